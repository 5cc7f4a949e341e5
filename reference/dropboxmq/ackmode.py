"""The four JMS acknowledgement modes as one table: what a session does with a message it
delivers, when the application is done with it, when a listener fails on it, and when the
session closes with it unacknowledged.  Pure: no I/O; ``session.Session`` executes the steps.

=================  =======  =====  ==========  =========  ==================  ============  ===========
mode               take     done   failure     close      acknowledge/recover  durable ack   taken ack
=================  =======  =====  ==========  =========  ==================  ============  ===========
AUTO_ACKNOWLEDGE   -        ACK    REDELIVER   REDELIVER  allowed             no            error
CLIENT_ACKNOWLEDGE HOLD     -      KEEP        REDELIVER  allowed             yes           error
DUPS_OK            -        BATCH  REDELIVER   ACK        allowed             no            silent
SESSION_TRANSACTED LOG      -      KEEP        ROLLBACK   commit/rollback     (the log's)   (rollback)
=================  =======  =====  ==========  =========  ==================  ============  ===========

*take*: as a consumer claims it (HOLD: kept until acknowledge(); LOG: recorded in the
transaction log and kept until commit/rollback).  *done*: receive() returns it, or its
listener returned (ACK: now, a failed ACK puts it back; BATCH: kept, acked without fsync once
``dups_ok_batch`` are kept or the session idles).  *failure*: its listener raised (REDELIVER
after the consumer's redelivery delay; KEEP: the application recovers or rolls back).
*close*: what happens to the messages still held.  *durable ack*: acknowledge() raises when
the fsync of its acks fails (else the renames stand and a warning is logged: a crash that
undoes them redelivers, at-least-once).  *taken ack*: an ack that finds its claim gone because
recovery took it from this client (presumed dead: lease or lock lost; it is delivered again)
raises MessageTakenError; DUPS_OK promises no more than at-least-once, so it stays silent (a
transacted commit is rolled back: TransactionRolledBackError).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "AckMode", "AUTO_ACKNOWLEDGE", "CLIENT_ACKNOWLEDGE", "DUPS_OK_ACKNOWLEDGE", "SESSION_TRANSACTED",
    "Take", "Done", "Failure", "Close", "AckPolicy", "POLICY",
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


class Take(enum.Enum):
    NOTHING = "-"
    HOLD = "hold"
    LOG = "log"


class Done(enum.Enum):
    NOTHING = "-"
    ACK = "ack"
    BATCH = "batch"


class Failure(enum.Enum):
    KEEP = "keep"
    REDELIVER = "redeliver"


class Close(enum.Enum):
    REDELIVER = "redeliver"
    ACK = "ack"
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class AckPolicy:
    take: Take
    done: Done
    failure: Failure
    close: Close
    transacted: bool  # commit()/rollback(), not acknowledge()/recover()/dead_letter()
    durable_ack: bool  # acknowledge() returns only once its acks are durable
    taken_is_error: bool  # an ack whose claim recovery took raises MessageTakenError


POLICY: dict[AckMode, AckPolicy] = {
    AckMode.AUTO_ACKNOWLEDGE: AckPolicy(Take.NOTHING, Done.ACK, Failure.REDELIVER, Close.REDELIVER, False, False, True),
    AckMode.CLIENT_ACKNOWLEDGE: AckPolicy(Take.HOLD, Done.NOTHING, Failure.KEEP, Close.REDELIVER, False, True, True),
    AckMode.DUPS_OK_ACKNOWLEDGE: AckPolicy(Take.NOTHING, Done.BATCH, Failure.REDELIVER, Close.ACK, False, False, False),
    AckMode.SESSION_TRANSACTED: AckPolicy(Take.LOG, Done.NOTHING, Failure.KEEP, Close.ROLLBACK, True, False, False),
}
