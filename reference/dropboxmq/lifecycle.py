"""The life of a message (spec/PROTOCOL.md section 3): states and moves, pure (``store.py`` executes
them).  A move is one ``rename(2)``: a message is in one state at every instant, and of two racing
consumers exactly one wins.  ``spec/Dropbox.tla`` uses these names (a move's value is its action);
the conformance suite replays traces against :data:`TRANSITIONS` (with ``trace_rules.py``).
Transactions add no state (the transaction log's table: ``log_lifecycle.py``)."""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Mapping

__all__ = ["IdentityEnum", "State", "Move", "STATE_DIRS", "TRANSITIONS", "TERMINAL", "IllegalMove", "next_state"]


class IdentityEnum(enum.Enum):
    """An enum hashed by identity, in C, not by Enum's Python-level hash of the name (every store
    call looks a state up in a dict); also ``log_lifecycle.py``'s."""

    __hash__ = object.__hash__


class State(IdentityEnum):
    """A message state; the value is the directory that holds it (None: no file)."""

    ABSENT = None
    NOT_COMMITTED = "working"  # being written, or part of an open transaction
    NEW = "target"  # committed; any consumer may claim it
    DELIVERED = "processing"  # claimed by exactly one consumer (processing/<client>~<name>), not yet acked
    ACKNOWLEDGED = "processed"  # consumed and acknowledged (or deleted)
    EXPIRED = "expired"  # its expiration passed before delivery
    DEAD_LETTER = "error"  # undecodable, unreadable, or redelivered too often


class Move(IdentityEnum):
    """A move of the table; the value is the action's name in spec/Dropbox.tla."""

    CREATE = "Create"
    SEND = "Send"
    DISCARD = "Discard"
    QUARANTINE = "Quarantine"
    CLAIM = "Claim"
    EXPIRE = "Expire"
    ACK = "Ack"
    REDELIVER = "Redeliver"
    DEAD_LETTER = "DeadLetter"
    PURGE = "Purge"


#: The six directories of every dropbox, in lifecycle order.
STATE_DIRS: tuple[str, ...] = tuple(s.value for s in State if s.value is not None)

_S, _M = State, Move

#: The one table: for each state, the moves allowed out of it, where they lead, and who makes them.
TRANSITIONS: Mapping[State, Mapping[Move, State]] = MappingProxyType({s: MappingProxyType(m) for s, m in {
    _S.ABSENT: {_M.CREATE: _S.NOT_COMMITTED},  # producer: open(O_CREAT|O_EXCL|O_NOFOLLOW), write, fsync
    _S.NOT_COMMITTED: {
        _M.SEND: _S.NEW,  # producer, or a commit: rename working -> target (+ fsync target/)
        _M.DISCARD: _S.ABSENT,  # rollback of a transacted send; orphan sweep
        _M.QUARANTINE: _S.DEAD_LETTER,  # orphan sweep (keeps a torn file for an operator)
    },
    _S.NEW: {
        _M.CLAIM: _S.DELIVERED,  # consumer: rename target -> processing/<client>~<name>
        _M.EXPIRE: _S.EXPIRED,  # expiry sweep, or a consumer before claiming
        _M.PURGE: _S.ABSENT,  # operator purge
    },
    _S.DELIVERED: {
        _M.ACK: _S.ACKNOWLEDGED,  # acknowledge, commit
        _M.REDELIVER: _S.NEW,  # recover, rollback, listener failure, dead owner
        _M.DEAD_LETTER: _S.DEAD_LETTER,  # unreadable body, or delivery count over the limit
        _M.EXPIRE: _S.EXPIRED,  # a consumer right after claiming
    },
    # housekeeping of the terminal states (retention, prune)
    _S.ACKNOWLEDGED: {_M.PURGE: _S.ABSENT},
    _S.EXPIRED: {_M.PURGE: _S.ABSENT},
    _S.DEAD_LETTER: {_M.PURGE: _S.ABSENT},
}.items()})

#: Terminal states: never delivered again (PURGE is all that leads out of them).
TERMINAL: frozenset[State] = frozenset(s for s, moves in TRANSITIONS.items() if set(moves) == {Move.PURGE})


class IllegalMove(ValueError):
    """A move that the lifecycle table does not allow from the given state."""


def next_state(state: State, move: Move) -> State:
    """Where ``move`` takes a message in ``state``; IllegalMove if the table forbids it."""
    try:
        return TRANSITIONS[state][move]
    except KeyError:
        raise IllegalMove(f"{move.name} is not allowed from {state.name}") from None
