"""The distributor: fans out files that foreign programs drop into a topic's ``.incoming/target/``.

Each file is handled in one transaction of a transacted session: CLAIM it from
``.incoming/``, CREATE a copy in every matching subscription's working/, then
commit, which SENDs every copy and ACKs the incoming file together through the
transaction log.  A distributor killed before its commit record is durable is
rolled back by recovery (copies discarded, the file back in ``.incoming/target``
as redelivered); one killed after is rolled forward.  So each file is fanned
out exactly once, however many distributors run and whichever of them dies.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterator

from . import codec, layout, topics
from .message import DeliveryMode, Topic
from .connection import Connection, Settings
from .consumer import MessageConsumer
from .producer import create_copy
from .transaction import session_log

__all__ = ["POLL_SECONDS", "topics_with_incoming", "distribute_once", "distribute"]

POLL_SECONDS = 0.2


def topics_with_incoming(root: Path) -> Iterator[Topic]:
    top = Path(root) / layout.TOPIC_ROOT
    for dirpath, dirnames, _ in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if os.path.isdir(os.path.join(dirpath, ".incoming", "target")):
            rel = os.path.relpath(dirpath, top)
            if rel != ".":
                yield Topic(rel.replace(os.sep, "."))


def distribute_once(conn: Connection, on_file: Callable[[Topic, str, int], None] | None = None) -> int:
    """Fan out every file now waiting in any topic's ``.incoming/target/``. Returns how many."""
    session = conn.create_session(transacted=True)
    done = 0
    try:
        for topic in topics_with_incoming(conn.root):
            box = topics.topic_incoming(conn.root, topic)
            consumer = MessageConsumer(session, box, topic, None)
            session.consumers.append(consumer)
            # the body is streamed from the claimed file into each copy, never held in memory
            while (d := consumer.claim_next(read_body=False)) is not None:
                with d.body_file or open(os.devnull, "rb") as body:
                    session.delivered(d)
                    msg = d.message
                    msg.delivery_mode = DeliveryMode.PERSISTENT
                    targets = topics.fan_out_targets(conn.root, topic, msg, None)
                    # the claim wrote this delivery's count into the name: a copy is a first delivery
                    copy_name = codec.with_delivery_count(d.original_name, None)
                    for target in targets:
                        session_log(session).record("send", target, copy_name)
                        create_copy(target, copy_name, msg, durable=False, source=body)
                    session.commit()
                done += 1
                if on_file is not None:
                    on_file(topic, d.original_name, len(targets))
            consumer.close()
    finally:
        session.close()
    return done


def distribute(root: Path, follow: bool = False, client_id: str | None = None,
               on_file: Callable[[Topic, str, int], None] | None = None,
               stop: Callable[[], bool] | None = None, settings: Settings | None = None) -> int:
    """One pass, or (``follow``) keep distributing until ``stop()`` says so."""
    total = 0
    with Connection(root, client_id, settings) as conn:
        while True:
            total += distribute_once(conn, on_file)
            if not follow or (stop is not None and stop()):
                return total
            time.sleep(POLL_SECONDS)
