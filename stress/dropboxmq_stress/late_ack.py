"""A late acknowledgement on a real network file system (issue 28).

``python -m dropboxmq_stress.late_ack --fs sshfs|moosefs|glusterfs [--lease 2]``

Consumer A on host A (mount 0) receives one persistent message under CLIENT_ACKNOWLEDGE and is
stopped (SIGSTOP: a stalled host).  Host B (mount 1) runs ``recover`` -- which watches the leases
until each is decided -- and a consumer that receives whatever came back.  Then A is continued
and acknowledges.  Where locks cross mounts (MooseFS, GlusterFS) A still holds its lock, so B
must leave its message alone and A's acknowledgement succeeds; where they do not (sshfs) B takes
the message once A's lease record stayed unchanged past 1.5 x lease, and A's acknowledgement
must fail (LeaseExpiredError: A fenced itself; or MessageTakenError), never succeed.  Either
way the message ends in processed/ exactly once.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import time
from typing import Any

from . import netfs

QUEUE = "late"


def _settings(lease: float) -> Any:
    from dropboxmq import Settings

    return Settings(allow_network_fs=True, lease=lease, poll_interval=0.01, recovery_interval=0.2)


def _holder(root: str, lease: float, got: Any, go: Any, result: Any) -> None:
    from dropboxmq import CLIENT_ACKNOWLEDGE, Connection, Queue

    with Connection(root, "A", _settings(lease)) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        m = s.create_consumer(Queue(QUEUE)).receive(30)
        result.put("received" if m is not None else "nothing received")
        got.set()
        go.wait(120)
        try:
            s.acknowledge()
            result.put("acknowledged")
        except Exception as e:  # noqa: BLE001 - the outcome is what we measure
            result.put(f"{type(e).__name__}: {e}")


def run(kind: str, lease: float = 2.0) -> dict:
    from dropboxmq import Connection, Queue, recovery

    why = netfs.unavailable(kind)
    if why:
        return {"fs": kind, "skipped": why}
    with netfs.start(kind) as fs:
        a, b = (str(m) for m in fs.mounts)
        with Connection(a, "init", _settings(lease), create=True) as c:
            c.create_session().create_producer(c.create_queue(QUEUE)).send("the message")
        ctx = multiprocessing.get_context("fork")
        got, go, result = ctx.Event(), ctx.Event(), ctx.Queue()
        holder = ctx.Process(target=_holder, args=(a, lease, got, go, result))
        holder.start()
        pid = holder.pid
        assert pid is not None
        got.wait(60)
        received = result.get(timeout=5)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        report = recovery.recover(b)
        recovered_after = round(time.monotonic() - t0, 2)
        with Connection(b, "B", _settings(lease)) as cb:
            m = cb.create_session().create_consumer(Queue(QUEUE)).receive(2)
            b_got = None if m is None else {"redelivered": m.redelivered, "count": m.delivery_count}
        os.kill(pid, signal.SIGCONT)
        go.set()
        outcome = result.get(timeout=60)
        holder.join(60)
        box = os.path.join(b, QUEUE, "incoming")
        left = {d: len([n for n in os.listdir(os.path.join(box, d)) if not n.startswith(".")])
                for d in ("target", "processing", "processed", "error")}
    return {"fs": kind, "lease_s": lease, "a_received": received, "recover_redelivered": report.redelivered,
            "recover_s": recovered_after, "b_received": b_got, "a_acknowledge": outcome, "final": left}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", required=True, choices=("moosefs", "sshfs", "glusterfs"))
    ap.add_argument("--lease", type=float, default=2.0)
    a = ap.parse_args()
    print(json.dumps(run(a.fs, a.lease)))


if __name__ == "__main__":
    main()
