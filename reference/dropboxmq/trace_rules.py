"""What a recorded trace of the lifecycle is checked against, beside the one table of moves
(``lifecycle.py``): who makes each move, what a move may do to the delivery count a name
carries, the spec's process-level actions, and the way back from a directory to its state and
from two states to the move between them.  The conformance replay and the TLC trace mapping
(``spec/tlc_traces.py``) use these; sending, receiving and acknowledging never do.

The delivery count in the name: one family of correct behaviours
----------------------------------------------------------------
A name may carry ``JMSXDeliveryCountI=<n>``.  In target/ it means "n deliveries
were attempted before": the next delivery reports JMSRedelivered = (n > 0) and
JMSXDeliveryCount = n + 1.  Where the count is written is the implementation's
choice, and every choice below is correct as long as a message that goes back
to target/ carries the deliveries attempted so far (``k``):

    move                    the name after the move (n = count before, k = deliveries so far)
    ----------------------  ----------------------------------------------------------------
    CLAIM                   unchanged (1.2), or stamped with k (ours: the claim writes it)
    ACK, EXPIRE, DEAD_LETTER  unchanged, or stamped with k (1.2 appends k at ack)
    REDELIVER               exactly k (stamped at claim and kept, or stamped now):
                            anything else makes the next delivery's flag or count wrong
    CREATE                  any (a message may be sent already carrying a count)
    SEND, DISCARD, QUARANTINE, PURGE   unchanged

``k`` starts at the count the name carries when the message is first seen and
grows by one at each CLAIM.  ``count_ok`` is this table; the conformance replay
and the TLC trace mapping (``tlc_traces``) both use it.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Mapping

from .lifecycle import TRANSITIONS, IllegalMove, Move, State

__all__ = [
    "Actor", "ACTORS", "PROCESS_ACTIONS", "PURGEABLE", "CountRule", "COUNT_RULES", "count_ok",
    "state_of_directory", "move_between",
]

_S, _M = State, Move


class Actor(enum.Enum):
    """Who makes a move: the process whose step the spec's action is."""

    PRODUCER = "the producer (the orphan sweep, when it is dead)"
    TAKER = "the consumer that the destination processing/<client>~ name names"
    HOLDER = "the consumer that the source processing/<client>~ name names (its recovery, when it is dead)"
    ANYONE = "any process (an operator, housekeeping, the expiry sweep)"


#: Process-level actions of spec/Dropbox.tla: steps that move no message between states
#: (writing and closing files and logs, listings, lost races, listeners, crashes, recovery).
#: With the Move names they are every action of the spec (checked by tests/test_spec.py).
PROCESS_ACTIONS: tuple[str, ...] = (
    "CloseWrite", "WriteLog", "AppendLog", "CloseLog", "EnterCommitting", "DeleteLogProd",
    "AbortCommit", "DeleteRolledBackLog",
    "List", "LoseRace", "Deliver", "ListenerReturns", "ListenerThrows",
    "Acknowledge", "AckDone", "Recover", "RecoverDone",
    "WriteLogCons", "AppendLogCons", "DeleteLogCons",
    "Tick", "TickDue", "Crash", "RecoverLog", "Restart",
)

#: Who makes each move (the process whose step its spec action is).  EXPIRE out of target/ has no holder: anyone's then.
ACTORS: Mapping[Move, Actor] = MappingProxyType(
    {
        _M.CREATE: Actor.PRODUCER, _M.SEND: Actor.PRODUCER, _M.DISCARD: Actor.PRODUCER,
        _M.QUARANTINE: Actor.PRODUCER, _M.CLAIM: Actor.TAKER, _M.EXPIRE: Actor.HOLDER,
        _M.ACK: Actor.HOLDER, _M.REDELIVER: Actor.HOLDER, _M.DEAD_LETTER: Actor.HOLDER,
        _M.PURGE: Actor.ANYONE,
    }
)

#: Purgeable states: those the table lets PURGE empty.
PURGEABLE: frozenset[State] = frozenset(s for s, moves in TRANSITIONS.items() if Move.PURGE in moves)


class CountRule(enum.Enum):
    """What a move may do to the delivery count in the name (see the table above)."""

    ANY = "any count"
    KEEP = "the count unchanged"
    KEEP_OR_STAMP = "the count unchanged, or stamped with the deliveries so far"
    STAMPED = "the deliveries so far (so the next delivery is flagged redelivered, with the right count)"


_C = CountRule

#: The one table of the delivery count in names, per move (EXPIRE covers both of its sources).
COUNT_RULES: Mapping[Move, CountRule] = MappingProxyType(
    {
        _M.CREATE: _C.ANY, _M.SEND: _C.KEEP, _M.DISCARD: _C.KEEP, _M.QUARANTINE: _C.KEEP,
        _M.CLAIM: _C.KEEP_OR_STAMP, _M.EXPIRE: _C.KEEP_OR_STAMP, _M.ACK: _C.KEEP_OR_STAMP,
        _M.REDELIVER: _C.STAMPED, _M.DEAD_LETTER: _C.KEEP_OR_STAMP, _M.PURGE: _C.KEEP,
    }
)


def count_ok(move: Move, before: int, after: int, deliveries: int) -> bool:
    """Whether ``move`` may turn a name carrying count ``before`` into one carrying
    ``after`` (0: none), ``deliveries`` being the deliveries attempted so far (after
    the move: a CLAIM counts itself)."""
    rule = COUNT_RULES[move]
    if rule is CountRule.ANY:
        return True
    if rule is CountRule.KEEP:
        return after == before
    if rule is CountRule.KEEP_OR_STAMP:
        return after in (before, deliveries)
    return after == deliveries


def state_of_directory(directory: str) -> State:
    """The state a directory name stands for (``"target"`` -> NEW)."""
    for state in State:
        if state.value == directory:
            return state
    raise ValueError(f"not a dropbox state directory: {directory!r}")


def move_between(source: State, destination: State) -> Move:
    """The unique move from ``source`` to ``destination`` (trace replay uses this)."""
    for move, target in TRANSITIONS[source].items():
        if target is destination:
            return move
    raise IllegalMove(f"no move leads from {source.name} to {destination.name}")
