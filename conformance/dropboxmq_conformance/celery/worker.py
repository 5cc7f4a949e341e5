"""Celery worker (prefork pool, one process) consuming QUEUE through the dropboxmq:// transport
with late acks; each message is a run of ``conformance.deliver``, which prints its message id.
The worker stops warm (SIGTERM to itself) once the queue has nothing it could claim and
nothing is being processed.

    worker.py ROOT QUEUE CLIENT_ID
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

from celery import signals

from common import make_app  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]
from dropboxmq import Queue
from dropboxmq.decision import ClaimSettings, Verdict, decide
from dropboxmq.layout import queue_box
from dropboxmq.lifecycle import State
from dropboxmq.codec import now_ms

root, queue, client_id = sys.argv[1], sys.argv[2], sys.argv[3]
app = make_app(root, queue)
box = queue_box(Path(root), Queue(queue))
policy = ClaimSettings(None, 10)
ready = threading.Event()


def nothing_to_do() -> bool:
    """Nothing claimable in target/ (what is left is deferred or skipped for good), nothing in
    processing/ (target/ is listed first: a claim in between shows in processing/)."""
    now = now_ms()
    waiting = box.list(State.NEW) if box.exists() else []
    if any(decide(name, now, policy)[0] not in (Verdict.SKIP, Verdict.DEFER) for name in waiting):
        return False
    return not (box.list(State.DELIVERED) if box.exists() else [])


def stop_when_drained() -> None:
    ready.wait()
    quiet = 0
    while quiet < 3:  # three looks in a row, 0.2 s apart
        time.sleep(0.2)  # polling the directories: the worker runs in another thread of control
        quiet = quiet + 1 if nothing_to_do() else 0
    os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown


signals.worker_ready.connect(lambda **_: ready.set(), weak=False)
threading.Thread(target=stop_when_drained, daemon=True).start()
app.worker_main(["worker", "-P", "prefork", "-c", "1", "-Q", queue, "-l", "warning",
                 "-n", f"conformance-{client_id}-{os.getpid()}@%h",
                 "--without-mingle", "--without-gossip", "--without-heartbeat"])
