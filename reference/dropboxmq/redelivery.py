"""A session gives messages back: ``recover()``, ``dead_letter()``, a listener that raised, an
AUTO ack that failed, a close with messages still held, an unreadable message; picks the
messages given to acknowledge/recover/dead_letter among those it holds; and the errors of acks
that failed.  Imported when that first happens: a session whose acks all work never needs it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .claim import finish
from .errors import IllegalStateError, MessageTakenError, StoreError
from .lifecycle import Move, State

if TYPE_CHECKING:
    from .claim import Delivery
    from .message import Message
    from .session import Session
    from .store import Dropbox

__all__ = ["held", "redeliver", "return_failed_ack", "recover", "dead_letter", "quarantine", "taken_error",
           "ack_not_durable"]

log = logging.getLogger("dropboxmq")


def held(session: Session, messages: tuple[Message, ...]) -> tuple[list[Delivery], list[Delivery]]:
    """The session's unacked deliveries of ``messages`` (all of them when none is given), and the rest."""
    if not messages:
        return session.unacked, []
    wanted = {id(m) for m in messages}
    chosen = [d for d in session.unacked if id(d.message) in wanted]
    if len(chosen) != len(wanted):
        raise IllegalStateError("a message given is not held by this session: it was never received here, "
                                "or is already acknowledged, recovered or dead-lettered")
    return chosen, [d for d in session.unacked if id(d.message) not in wanted]


def redeliver(session: Session, deliveries: list[Delivery], back_off: bool = False) -> None:
    """Put ``deliveries`` back in target/ (REDELIVER).  With ``back_off`` (processing failed),
    each consumer of one holds it back for its redelivery delay before trying it again:
    ``redelivery_delay * redelivery_backoff ** (deliveries - 1)``, at most ``max_redelivery_delay``."""
    for d in deliveries:
        d.box.move(Move.REDELIVER, State.DELIVERED, d.processing_name, d.original_name)
    for c in session.consumers:
        if back_off and c.redelivery_delay > 0:
            for d in deliveries:
                if c.box.path == d.box.path:
                    delay = min(c.max_redelivery_delay,
                                c.redelivery_delay * c.redelivery_backoff ** (d.message.delivery_count - 1))
                    c.claimer.hold_back(d.original_name, c.claimer.clock() + int(delay * 1000))
        c.claimer.invalidate()


def return_failed_ack(session: Session, d: Delivery) -> None:
    """An AUTO ack of ``d`` failed (ENOSPC...): back to target/, or if that fails too, held for
    close() to redeliver."""
    try:
        redeliver(session, [d])
    except StoreError:
        session.unacked.append(d)


def recover(session: Session, messages: tuple[Message, ...], back_off: bool) -> None:
    with session.lock:
        session.check_open()
        if session.transacted:
            raise IllegalStateError("recover() is not allowed in a transacted session; use rollback()")
        chosen, kept = held(session, messages)
        redeliver(session, chosen, back_off)
        session.unacked = kept


def dead_letter(session: Session, messages: tuple[Message, ...]) -> None:
    with session.lock:
        session.check_open()
        if session.transacted:
            raise IllegalStateError("dead_letter() is not allowed in a transacted session")
        if not messages:
            raise ValueError("dead_letter() needs the messages to give up on")
        chosen, kept = held(session, messages)
        for d in chosen:
            d.box.move(Move.DEAD_LETTER, State.DELIVERED, d.processing_name)
        session.unacked = kept


def quarantine(box: Dropbox, pname: str, claimed: str, exc: Exception) -> None:
    """A message just claimed cannot be read: DEAD_LETTER it to error/ (or back to target/)."""
    log.warning("unreadable message %s quarantined to error/: %s", claimed, exc)
    try:
        finish(box, Move.DEAD_LETTER, pname)
    except StoreError:
        # Not left in processing/: after a clean close() nobody would reclaim it
        # (stress faults case: EIO on the read, then on the rename into error/).
        box.move(Move.REDELIVER, State.DELIVERED, pname, claimed)
        raise


def taken_error(taken: list[Delivery]) -> MessageTakenError:
    """The error of an acknowledge whose claims recovery took away (fenced by construction)."""
    ids = tuple(d.message.message_id or d.original_name for d in taken)
    return MessageTakenError(
        f"{len(taken)} message(s) not acknowledged: recovery took them back from this client "
        f"(presumed dead: lease or lock lost) and they are delivered again: {', '.join(ids[:5])}"
        f"{' ...' if len(ids) > 5 else ''}", ids)


def ack_not_durable(exc: OSError, count: int, durable_ack: bool) -> None:
    """The fsync of ``count`` acks failed.  With a durable ack (acknowledge()) a StoreError: it
    must not return before its acks are durable (issue 6: a power loss undid CLIENT acks whose
    fsync had failed with EIO), and the session keeps them unacked, so a retry syncs again."""
    if durable_ack:
        err = StoreError(f"acknowledgement of {count} message(s) is not durable: {exc}")
        err.errno = exc.errno  # type: ignore[attr-defined]
        raise err from exc
    # The renames are done: the messages are acknowledged.  Should a crash undo them, they come
    # back redelivered (at-least-once), so raising would only make the caller drop a message it
    # was given (stress fail-at-N, claim call 5).
    log.warning("acknowledgement of %d message(s) may not survive a crash: %s", count, exc)
