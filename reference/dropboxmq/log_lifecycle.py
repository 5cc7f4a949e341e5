"""The life of a transaction log: states, moves, and nothing else.

Theory of operation
===================

A transaction log is a file under ``<root>/dropboxmq/transaction/`` and, as for a
message (``lifecycle.py``), its state *is* the directory that holds it:

    state            directory         meaning
    ---------------  ----------------  -------------------------------------------------
    ASSOCIATED       associated/       an open transaction: one line per send / receive
    COMMITTING       committing/       decided commit, moves being applied (roll forward)
    ROLLING_BACK     rolling-back/     decided rollback, moves being undone
    COMMITTED        committed/        kept after its commit: a Spark sink's proof of a batch
    UNASSOCIATED     unassociated/     a two-phase branch being prepared (files being parked)
    PREPARED         prepared/         a prepared branch, waiting for its coordinator
    XA_COMMITTING    xa-committing/    a branch decided commit, being applied
    XA_ROLLING_BACK  xa-rolling-back/  a branch decided rollback, being undone

plus ABSENT, before the log is written and after it is deleted.  (``rolled-back/``
is part of the 1.2 layout and created, but no log of ours goes there.)

The moves, and who makes them (``transaction.LogStore`` executes them, for
``transaction.py``, ``dropboxmq_xa`` and ``dropboxmq_spark`` alike):

    move       from            to               by
    ---------  --------------  ---------------  -------------------------------------------
    OPEN       ABSENT          ASSOCIATED       the first send / receive of a transaction
    CLOSE      ASSOCIATED      ASSOCIATED       write the log fully (fsync unless syncfs follows)
    COMMIT     ASSOCIATED      COMMITTING       commit: THE POINT OF NO RETURN (fsync committing/)
    COMMIT     PREPARED        XA_COMMITTING    tpc_commit (fsync xa-committing/)
    ROLL_BACK  ASSOCIATED      ROLLING_BACK     rollback, or a commit that failed before the point
    ROLL_BACK  PREPARED        XA_ROLLING_BACK  tpc_rollback (fsync xa-rolling-back/)
    FINISH     COMMITTING      ABSENT           every move applied: delete the log
    FINISH     ROLLING_BACK    ABSENT           every move undone: delete the log
    FINISH     XA_COMMITTING   ABSENT           the same for a branch
    FINISH     XA_ROLLING_BACK ABSENT           the same for a branch
    RECOVER    ASSOCIATED      ABSENT           a log no live session will finish (a dead owner's,
                                                a failed Spark attempt's): rolled back where it lies
    RECOVER    COMMITTING      ABSENT           a dead owner's committed log: rolled forward
    RECOVER    ROLLING_BACK    ABSENT           a dead owner's rollback: finished
    RECOVER    UNASSOCIATED    ABSENT           a dead owner's branch never prepared: presumed abort
    STAGE      ABSENT          UNASSOCIATED     tpc_prepare: the branch log written whole, fsynced
    PREPARE    UNASSOCIATED    PREPARED         tpc_prepare: every file parked (fsync prepared/)
    UNSTAGE    UNASSOCIATED    ABSENT           a prepare that failed removes its staged log
    HAND_OVER  ASSOCIATED      ABSENT           a log whose entries another log now carries (the
                                                prepared branch's; a Spark job's or batch's)
    KEEP       COMMITTING      COMMITTED        a Spark sink batch, applied (fsync committed/)
    PRUNE      COMMITTED       ABSENT           a sink's old proofs

Applying a log's moves (SEND / ACK forward, DISCARD / REDELIVER back) is
idempotent, so FINISH and RECOVER may race: the loser finds the files moved.

The specification: ``spec/Dropbox.tla`` (the log of a transacted producer or
consumer, variable ``log``) and ``spec/TwoPhaseDropbox.tla`` (a two-phase branch,
``mqLog``) name every step that moves a log.  Each of those actions is exactly one
move here (``SPEC_ACTIONS``); a move is one decision in both specs (COMMIT is
EnterCommitting and CommitMQ) or, where Dropbox.tla splits producer and consumer
(WriteLog / WriteLogCons), one move for both.  STAGE, UNSTAGE, HAND_OVER, KEEP and
PRUNE are steps the specs do not see (``UNMODELLED``).  tests/test_log_lifecycle.py
reads the actions and their log states from the .tla files and checks this table.

Nothing in this module touches the file system.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .lifecycle import IdentityEnum

__all__ = [
    "LogState", "LogMove", "LOG_TRANSITIONS", "SYNCED", "NO_REPLACE", "SPEC_ACTIONS", "COLLAPSED",
    "UNMODELLED", "SPEC_STATES", "XA_LOG_STATES", "IllegalLogMove", "next_log_state",
]


class LogState(IdentityEnum):
    """A transaction log's state; the value is the directory that holds it (None: no file)."""

    ABSENT = None
    ASSOCIATED = "associated"
    COMMITTING = "committing"
    ROLLING_BACK = "rolling-back"
    COMMITTED = "committed"
    UNASSOCIATED = "unassociated"
    PREPARED = "prepared"
    XA_COMMITTING = "xa-committing"
    XA_ROLLING_BACK = "xa-rolling-back"


class LogMove(IdentityEnum):
    OPEN = "open"
    CLOSE = "close"
    COMMIT = "commit"
    ROLL_BACK = "roll back"
    FINISH = "finish"
    RECOVER = "recover"
    STAGE = "stage"
    PREPARE = "prepare"
    UNSTAGE = "unstage"
    HAND_OVER = "hand over"
    KEEP = "keep"
    PRUNE = "prune"


_S, _M = LogState, LogMove

#: The one table: for each state, the moves allowed out of it and where they lead.
LOG_TRANSITIONS: Mapping[LogState, Mapping[LogMove, LogState]] = MappingProxyType({
    _S.ABSENT: MappingProxyType({_M.OPEN: _S.ASSOCIATED, _M.STAGE: _S.UNASSOCIATED}),
    _S.ASSOCIATED: MappingProxyType({
        _M.CLOSE: _S.ASSOCIATED, _M.COMMIT: _S.COMMITTING, _M.ROLL_BACK: _S.ROLLING_BACK,
        _M.RECOVER: _S.ABSENT, _M.HAND_OVER: _S.ABSENT}),
    _S.COMMITTING: MappingProxyType({_M.FINISH: _S.ABSENT, _M.RECOVER: _S.ABSENT, _M.KEEP: _S.COMMITTED}),
    _S.ROLLING_BACK: MappingProxyType({_M.FINISH: _S.ABSENT, _M.RECOVER: _S.ABSENT}),
    _S.COMMITTED: MappingProxyType({_M.PRUNE: _S.ABSENT}),
    _S.UNASSOCIATED: MappingProxyType({_M.PREPARE: _S.PREPARED, _M.UNSTAGE: _S.ABSENT, _M.RECOVER: _S.ABSENT}),
    _S.PREPARED: MappingProxyType({_M.COMMIT: _S.XA_COMMITTING, _M.ROLL_BACK: _S.XA_ROLLING_BACK}),
    _S.XA_COMMITTING: MappingProxyType({_M.FINISH: _S.ABSENT}),
    _S.XA_ROLLING_BACK: MappingProxyType({_M.FINISH: _S.ABSENT}),
})

#: Moves whose destination directory is fsynced (when the transaction is durable): each is a
#: decision that must survive a crash before any of its file moves is made.
SYNCED: frozenset[tuple[LogState, LogMove]] = frozenset({
    (_S.ASSOCIATED, _M.COMMIT), (_S.PREPARED, _M.COMMIT), (_S.PREPARED, _M.ROLL_BACK),
    (_S.UNASSOCIATED, _M.PREPARE), (_S.COMMITTING, _M.KEEP),
})

#: Renames that must not replace: a branch log's name is its xid, so a second prepare of the
#: same xid, or two processes deciding one branch, meet here and one of them loses.
NO_REPLACE: frozenset[tuple[LogState, LogMove]] = frozenset({
    (_S.UNASSOCIATED, _M.PREPARE), (_S.PREPARED, _M.COMMIT), (_S.PREPARED, _M.ROLL_BACK),
})

#: The two-phase branch states (their logs are named ``xa-...``).
XA_LOG_STATES: frozenset[LogState] = frozenset(
    {_S.UNASSOCIATED, _S.PREPARED, _S.XA_COMMITTING, _S.XA_ROLLING_BACK})

#: Each action of the specs that moves a log, as the move it is here (Dropbox.tla's ``log``,
#: TwoPhaseDropbox.tla's ``mqLog``).  Every action is named once.
SPEC_ACTIONS: Mapping[LogMove, tuple[str, ...]] = MappingProxyType({
    _M.OPEN: ("WriteLog", "WriteLogCons"),
    _M.CLOSE: ("CloseLog",),
    _M.COMMIT: ("EnterCommitting", "CommitMQ"),
    _M.ROLL_BACK: ("AbortCommit", "RollbackMQ"),
    _M.FINISH: ("DeleteLogProd", "DeleteLogCons", "DeleteRolledBackLog", "EndCommit", "EndRollback"),
    _M.RECOVER: ("RecoverLog", "SweepDeadOwner"),
    _M.PREPARE: ("PrepareMQ",),
})

#: Spec actions a move does together with a later one: the code rolls a dead owner's open
#: branch back where it lies and deletes it, which the spec writes as SweepDeadOwner (into
#: "rollingback") followed by EndRollback.
COLLAPSED: Mapping[str, str] = MappingProxyType({"SweepDeadOwner": "EndRollback"})

#: Moves the specs do not see, and why.
UNMODELLED: Mapping[LogMove, str] = MappingProxyType({
    _M.STAGE: "part of PrepareMQ: the branch log is complete before it is visible to anyone",
    _M.UNSTAGE: "a prepare that failed before PrepareMQ: nothing was prepared",
    _M.HAND_OVER: "part of PrepareMQ (the prepared log replaces the session's), or of a Spark commit",
    _M.KEEP: "Spark's sink (CheckpointOwner.tla's SinkCommit is about its effect, not its files)",
    _M.PRUNE: "Spark's sink: housekeeping of old proofs",
})

#: The log states each spec names, as states of this table.
SPEC_STATES: Mapping[str, Mapping[str, frozenset[LogState]]] = MappingProxyType({
    "Dropbox.tla": MappingProxyType({
        "none": frozenset({_S.ABSENT}), "writing": frozenset({_S.ASSOCIATED}),
        "associated": frozenset({_S.ASSOCIATED}), "committing": frozenset({_S.COMMITTING}),
        "rolling-back": frozenset({_S.ROLLING_BACK})}),
    "TwoPhaseDropbox.tla": MappingProxyType({
        "associated": frozenset({_S.ASSOCIATED, _S.UNASSOCIATED}), "prepared": frozenset({_S.PREPARED}),
        "committing": frozenset({_S.XA_COMMITTING}),
        "rollingback": frozenset({_S.XA_ROLLING_BACK, _S.ROLLING_BACK}),
        "committed": frozenset({_S.ABSENT}), "rolledback": frozenset({_S.ABSENT})}),
})


class IllegalLogMove(ValueError):
    """A move that the log table does not allow from the given state."""


def next_log_state(state: LogState, move: LogMove) -> LogState:
    """Where ``move`` takes a log in ``state``; IllegalLogMove if the table forbids it."""
    try:
        return LOG_TRANSITIONS[state][move]
    except KeyError:
        raise IllegalLogMove(f"{move.name} is not allowed from {state.name}") from None
