"""The life of a message: states, moves, and nothing else.

Theory of operation
===================

A dropbox is a directory with six sub-directories.  A message *is* a file and
its state *is* the directory that holds it.  The states are those of the JBoss
Messaging Core channel (seed 002), plus the three terminal places a message
can end up in:

    state           directory      meaning
    --------------  -------------  ----------------------------------------------
    NOT_COMMITTED   working/       being written, or part of an open transaction
    NEW             target/        committed; any consumer may claim it
    DELIVERED       processing/    claimed by exactly one consumer, not yet acked
    ACKNOWLEDGED    processed/     consumed and acknowledged (or deleted)
    EXPIRED         expired/       its expiration passed before delivery
    DEAD_LETTER     error/         undecodable, unreadable, or redelivered too often

plus ABSENT, the pseudo-state of a file that does not exist (before CREATE and
after DISCARD / PURGE).

Every move between two directories is a single ``rename(2)`` on one file
system, so a message is in exactly one state at every instant, and when two
consumers race for the same file exactly one rename succeeds (the other gets
ENOENT: a lost race, normal and silent).  A copy never moves a message.

The moves, and who makes them:

    move         from           to             by
    -----------  -------------  -------------  -----------------------------------
    CREATE       ABSENT         NOT_COMMITTED  producer: open(O_CREAT|O_EXCL|O_NOFOLLOW), write, fsync
    SEND         NOT_COMMITTED  NEW            producer: rename working->target (+ fsync target/)
    DISCARD      NOT_COMMITTED  ABSENT         rollback of a transacted send; orphan sweep
    QUARANTINE   NOT_COMMITTED  DEAD_LETTER    orphan sweep (keep torn files for an operator)
    CLAIM        NEW            DELIVERED      consumer: rename target->processing/<client>~<name>
    EXPIRE       NEW            EXPIRED        expiry sweep / consumer notices before claiming
    EXPIRE       DELIVERED      EXPIRED        consumer notices right after claiming
    ACK          DELIVERED      ACKNOWLEDGED   acknowledge / commit: rename processing->processed
    REDELIVER    DELIVERED      NEW            recover, rollback, listener failure, dead owner
    DEAD_LETTER  DELIVERED      DEAD_LETTER    undecodable body, or delivery count over the limit
    PURGE        NEW            ABSENT         operator purge
    PURGE        terminal       ABSENT         housekeeping of processed/, expired/, error/

The TLA+ specification in ``spec/`` uses exactly these state and action names
(``Dropbox.tla``: ``Create``, ``Send``, ``Discard``, ``Quarantine``, ``Claim``,
``Expire``, ``Ack``, ``Redeliver``, ``DeadLetter``, ``Purge``), and the
conformance suite replays recorded file-system traces against this table
(with ``trace_rules.py``: who makes each move, and what a move may do to the
delivery count a name carries).

Transactions do not add states: a transacted send stays NOT_COMMITTED until
commit SENDs it; a transacted receive stays DELIVERED until commit ACKs it or
rollback REDELIVERs it.  Crash atomicity of a commit is the job of the
transaction log (``transaction.py``; its own table is ``log_lifecycle.py``), not of this table.

Nothing in this module touches the file system; ``store.py`` executes it.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Mapping

__all__ = ["IdentityEnum", "DirectoryState", "State", "Move", "STATE_DIRS", "TRANSITIONS", "TERMINAL", "IllegalMove",
           "next_state"]


class IdentityEnum(enum.Enum):
    """An enum of states or moves (here and in ``log_lifecycle.py``).  Members are singletons
    compared by identity: hash them by identity too, in C, not by Enum's Python-level hash of
    the name (every store call looks a state up in a dict)."""

    __hash__ = object.__hash__


class DirectoryState(IdentityEnum):
    """A state that is the directory holding the file: the value (None: no file)."""

    @property
    def directory(self) -> str | None:
        return self.value


class State(DirectoryState):
    """A message state; the value is the directory that holds it (None: no file)."""

    ABSENT = None
    NOT_COMMITTED = "working"
    NEW = "target"
    DELIVERED = "processing"
    ACKNOWLEDGED = "processed"
    EXPIRED = "expired"
    DEAD_LETTER = "error"


class Move(IdentityEnum):
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

    @property
    def spec_action(self) -> str:
        """The name of the action in spec/Dropbox.tla."""
        return self.value


#: The six directories of every dropbox, in lifecycle order.
STATE_DIRS: tuple[str, ...] = tuple(s.value for s in State if s.value is not None)

_S, _M = State, Move

#: The one table: for each state, the moves allowed out of it and where they lead.
TRANSITIONS: Mapping[State, Mapping[Move, State]] = MappingProxyType(
    {
        _S.ABSENT: MappingProxyType({_M.CREATE: _S.NOT_COMMITTED}),
        _S.NOT_COMMITTED: MappingProxyType(
            {_M.SEND: _S.NEW, _M.DISCARD: _S.ABSENT, _M.QUARANTINE: _S.DEAD_LETTER}
        ),
        _S.NEW: MappingProxyType(
            {_M.CLAIM: _S.DELIVERED, _M.EXPIRE: _S.EXPIRED, _M.PURGE: _S.ABSENT}
        ),
        _S.DELIVERED: MappingProxyType(
            {
                _M.ACK: _S.ACKNOWLEDGED,
                _M.REDELIVER: _S.NEW,
                _M.DEAD_LETTER: _S.DEAD_LETTER,
                _M.EXPIRE: _S.EXPIRED,
            }
        ),
        _S.ACKNOWLEDGED: MappingProxyType({_M.PURGE: _S.ABSENT}),
        _S.EXPIRED: MappingProxyType({_M.PURGE: _S.ABSENT}),
        _S.DEAD_LETTER: MappingProxyType({_M.PURGE: _S.ABSENT}),
    }
)


#: Terminal states: a message that reaches one is never delivered again (PURGE is all that
#: leads out of them).
TERMINAL: frozenset[State] = frozenset(s for s, moves in TRANSITIONS.items() if set(moves) == {Move.PURGE})


class IllegalMove(ValueError):
    """A move that the lifecycle table does not allow from the given state."""


def next_state(state: State, move: Move) -> State:
    """Where ``move`` takes a message in ``state``; IllegalMove if the table forbids it."""
    try:
        return TRANSITIONS[state][move]
    except KeyError:
        raise IllegalMove(f"{move.name} is not allowed from {state.name}") from None
