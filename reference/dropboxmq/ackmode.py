"""The four JMS acknowledgement modes as one table (``POLICY``, JMS semantics: PROTOCOL.md §9).
Pure: ``session.Session`` executes the steps; each column says what one step does."""

from __future__ import annotations

import enum
from typing import Literal, NamedTuple

__all__ = [
    "AckMode", "AUTO_ACKNOWLEDGE", "CLIENT_ACKNOWLEDGE", "DUPS_OK_ACKNOWLEDGE", "SESSION_TRANSACTED",
    "AckPolicy", "POLICY",
]


class AckMode(enum.IntEnum):
    SESSION_TRANSACTED = 0
    AUTO_ACKNOWLEDGE = 1
    CLIENT_ACKNOWLEDGE = 2
    DUPS_OK_ACKNOWLEDGE = 3


AUTO_ACKNOWLEDGE = AckMode.AUTO_ACKNOWLEDGE
CLIENT_ACKNOWLEDGE = AckMode.CLIENT_ACKNOWLEDGE
DUPS_OK_ACKNOWLEDGE = AckMode.DUPS_OK_ACKNOWLEDGE
SESSION_TRANSACTED = AckMode.SESSION_TRANSACTED


class AckPolicy(NamedTuple):
    take: Literal["-", "hold", "log"]  # as it is claimed: hold until acknowledge(), or log until commit/rollback
    # as receive() or its listener returns: ack (a failed ACK puts it back), or batch (acked without
    # fsync once ``dups_ok_batch`` are kept or the session idles)
    done: Literal["-", "ack", "batch"]
    failure: Literal["redeliver", "keep"]  # its listener raised: redeliver after a delay, or keep (recover/rollback)
    close: Literal["redeliver", "ack", "rollback"]  # what becomes of those still held
    transacted: bool  # commit()/rollback() instead of acknowledge()/recover()/dead_letter()
    # acknowledge() raises when the fsync of its acks fails (else the renames stand and a warning is
    # logged: a crash that undoes them redelivers)
    durable_ack: bool
    # an ack whose claim recovery took (this client presumed dead: lease or lock lost) raises
    # MessageTakenError; DUPS_OK promises no more than at-least-once, a transacted commit rolls back
    taken_is_error: bool


POLICY: dict[AckMode, AckPolicy] = {
    #                              take    done     failure      close        transacted durable_ack taken_is_error
    AUTO_ACKNOWLEDGE:    AckPolicy("-",    "ack",   "redeliver", "redeliver", False,     False,      True),
    CLIENT_ACKNOWLEDGE:  AckPolicy("hold", "-",     "keep",      "redeliver", False,     True,       True),
    DUPS_OK_ACKNOWLEDGE: AckPolicy("-",    "batch", "redeliver", "ack",       False,     False,      False),
    SESSION_TRANSACTED:  AckPolicy("log",  "-",     "keep",      "rollback",  True,      False,      False),
}
