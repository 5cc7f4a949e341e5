"""Message ids: JMSMessageIDs in DropboxMQ 1.2's form (N-5), unique across threads and forked processes."""

from __future__ import annotations

import os
import random
import threading
import time

__all__ = ["new_message_id", "new_message_id_and_time"]

_id_lock = threading.Lock()
_id_ms = 0
_id_seq = 0
_id_rng = random.Random()  # (seeded from os.urandom)


def _after_fork_in_child() -> None:
    global _id_lock
    _id_lock = threading.Lock()  # one held by another thread at fork time would never be released here
    _id_rng.seed(os.urandom(16) + os.getpid().to_bytes(8, "little"))  # not the parent's random digits


os.register_at_fork(after_in_child=_after_fork_in_child)


def new_message_id() -> str:
    """A fresh JMSMessageID (see :func:`new_message_id_and_time`)."""
    return new_message_id_and_time()[0]


_RANDOM_BITS, _RANDOM_LIMIT = 34, 10**10  # 2**34 > 10**10: draw bits, redraw past the limit


def new_message_id_and_time() -> tuple[str, int]:
    """A fresh JMSMessageID (N-5, 1.2's ten random digits) and its epochMillis (the JMSTimestamp).
    The numeric prefix strictly increases within a process, so equal-priority messages keep send
    order (N-6): over 1000 ids in a millisecond borrow the next one, a clock stepping back waits."""
    global _id_ms, _id_seq
    with _id_lock:
        now = time.time_ns() // 1_000_000
        if now > _id_ms:
            _id_ms, _id_seq = now, 0
        else:
            _id_seq += 1
            if _id_seq > 999:
                _id_ms, _id_seq = _id_ms + 1, 0
        ms, seq = _id_ms, _id_seq
        rnd = _id_rng.getrandbits(_RANDOM_BITS)  # (randrange: the same draw, through two Python calls)
        while rnd >= _RANDOM_LIMIT:
            rnd = _id_rng.getrandbits(_RANDOM_BITS)
    return f"ID:{ms}{seq:03d}-{rnd:010d}", ms
