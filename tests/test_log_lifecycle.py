"""The transaction log's table (log_lifecycle.py) against the specs that name its moves.

The actions and the log states they go from and to are read from spec/Dropbox.tla (variable
``log``) and spec/TwoPhaseDropbox.tla (``mqLog``): a spec action renamed, added, removed or
retargeted makes these tests fail, and so does a table row the specs do not back.
"""

from __future__ import annotations

import re

import pytest

from dropboxmq_spec.tlc import spec_dir
from dropboxmq.log_lifecycle import (
    COLLAPSED,
    LOG_TRANSITIONS,
    SPEC_ACTIONS,
    SPEC_STATES,
    UNMODELLED,
    IllegalLogMove,
    LogMove,
    LogState,
    next_log_state,
)

#: per spec: the variable holding the log, the definition listing its states
SPECS = {"Dropbox.tla": ("log", "LogDirs"), "TwoPhaseDropbox.tla": ("mqLog", "MQStates")}

_HEAD = re.compile(r"^([A-Z][A-Za-z0-9]*)(?:\([^)]*\))?\s*==", re.M)


def definitions(text: str) -> dict[str, str]:
    """Each top-level definition's body, comments removed."""
    text = re.sub(r"\(\*.*?\*\)", " ", text, flags=re.S)
    text = re.sub(r"\\\*[^\n]*", " ", text)
    heads = list(_HEAD.finditer(text))
    return {h.group(1): text[h.end():(heads[i + 1].start() if i + 1 < len(heads) else len(text))]
            for i, h in enumerate(heads)}


def _strings(body: str) -> set[str]:
    return set(re.findall(r'"([\w-]+)"', body))


def log_actions(text: str, var: str) -> dict[str, tuple[set[str] | None, str]]:
    """action -> (the log states it may start from, None when its guard names none; the state it
    leads to), for every definition that assigns ``var'``."""
    defs = definitions(text)
    constants = {n: b.strip().strip('"') for n, b in defs.items() if re.fullmatch(r'\s*"[\w-]+"\s*', b)}
    out = {}
    for name, body in defs.items():
        to = re.search(rf"\b{var}'\s*=\s*(?:\[{var} EXCEPT !\[\w+\]\s*=\s*)?(\"[\w-]+\"|\w+)", body)
        if to is None:
            continue
        target = to.group(1).strip('"')
        target = constants.get(target, target)
        froms: set[str] | None = None
        eq = re.findall(rf"\b{var}(?:\[\w+\])?\s*=\s*\"([\w-]+)\"", body)
        inside = re.findall(rf"\b{var}(?:\[\w+\])?\s*\\in\s*\{{([^}}]*)\}}", body)
        other = re.findall(rf"\b{var}(?:\[\w+\])?\s*#\s*\"([\w-]+)\"", body)
        if eq or inside or other:
            froms = set(eq)
            for group in inside:
                froms |= _strings(group)
            if other:
                states = _strings(defs[SPECS_BY_VAR[var]])
                froms |= states - set(other)
        out[name] = (froms, target)
    return out


SPECS_BY_VAR = {var: states for var, states in SPECS.values()}


def table_problems(texts: dict[str, str]) -> list[str]:
    """Where the table and the specs disagree (empty: they agree)."""
    problems = []
    owner: dict[str, LogMove] = {}
    for move, actions in SPEC_ACTIONS.items():
        for action in actions:
            if action in owner:
                problems.append(f"{action} is both {owner[action].name} and {move.name}")
            owner[action] = move
    for move in LogMove:
        if (move in SPEC_ACTIONS) == (move in UNMODELLED):
            problems.append(f"{move.name} must name spec actions or be UNMODELLED, not both or neither")
    spec_actions: dict[str, tuple[str, set[str] | None, str]] = {}
    for module, (var, states_def) in SPECS.items():
        defs = definitions(texts[module])
        states = _strings(defs.get(states_def, ""))
        if states != set(SPEC_STATES[module]):
            problems.append(f"{module} {states_def} is {sorted(states)}, the table maps {sorted(SPEC_STATES[module])}")
        for action, (froms, to) in log_actions(texts[module], var).items():
            spec_actions[action] = (module, froms, to)
    for action in sorted(set(spec_actions) - set(owner)):
        problems.append(f"{action} moves a log in {spec_actions[action][0]} but is no move of the table")
    for action in sorted(set(owner) - set(spec_actions)):
        problems.append(f"{owner[action].name} names {action}, which moves no log in the specs")
    for action in sorted(set(owner) & set(spec_actions)):
        move, (module, froms, to) = owner[action], spec_actions[action]
        states = SPEC_STATES[module]
        if action in COLLAPSED:  # the code goes on to where the following action leads
            to = spec_actions[COLLAPSED[action]][2]
        if to not in states or (froms is not None and not froms <= set(states)):
            problems.append(f"{action} uses a log state the table does not map")
            continue
        rows = [(s, n) for s, moves in LOG_TRANSITIONS.items() for m, n in moves.items() if m is move]
        for src in sorted(froms) if froms is not None else [None]:
            sources = states[src] if src is not None else {s for s, _ in rows}
            if not any(s in sources and n in states[to] for s, n in rows):
                problems.append(f"{action} ({module}) goes {src or 'anywhere'} -> {to}: "
                                f"no row of {move.name} does")
    return problems


def _texts() -> dict[str, str]:
    return {m: (spec_dir() / m).read_text() for m in SPECS}


def test_every_log_action_of_the_specs_is_one_move_of_the_table():
    texts = _texts()
    # the parse found the actions (an empty parse would agree with nothing)
    assert {"EnterCommitting", "AbortCommit", "RecoverLog"} <= set(log_actions(texts["Dropbox.tla"], "log"))
    assert {"PrepareMQ", "CommitMQ", "EndRollback"} <= set(log_actions(texts["TwoPhaseDropbox.tla"], "mqLog"))
    assert table_problems(texts) == []


@pytest.mark.parametrize("module, old, new, complaint", [
    ("Dropbox.tla", "EnterCommitting(p) ==", "EnterCommit(p) ==", "EnterCommit moves a log"),
    ("Dropbox.tla", 'CommitLogDir == "committing"', 'CommitLogDir == "associated"', "EnterCommitting"),
    ("TwoPhaseDropbox.tla", 'mqLog = "prepared"\n            /\\ (pc = "recover" => decision = "commit")\n'
                            '            /\\ mqLog\' = "committing"',
     'mqLog = "prepared"\n            /\\ (pc = "recover" => decision = "commit")\n'
     '            /\\ mqLog\' = "rolledback"', "CommitMQ"),
    ("TwoPhaseDropbox.tla", "SweepDeadOwner ==", "SweepDeadOwners ==", "SweepDeadOwners moves a log"),
])
def test_a_changed_spec_is_noticed(module, old, new, complaint):
    texts = _texts()
    assert old in texts[module]
    texts[module] = texts[module].replace(old, new)
    assert any(complaint in p for p in table_problems(texts)), table_problems(texts)


def test_table_rows_are_legal_and_nothing_else_is():
    assert next_log_state(LogState.ASSOCIATED, LogMove.COMMIT) is LogState.COMMITTING
    assert next_log_state(LogState.PREPARED, LogMove.COMMIT) is LogState.XA_COMMITTING
    with pytest.raises(IllegalLogMove, match="PREPARE is not allowed from ASSOCIATED"):
        next_log_state(LogState.ASSOCIATED, LogMove.PREPARE)
    with pytest.raises(IllegalLogMove):  # a committed branch is never rolled back
        next_log_state(LogState.XA_COMMITTING, LogMove.ROLL_BACK)
    # every state but ABSENT can be left, and every state can be reached
    reached = {n for moves in LOG_TRANSITIONS.values() for n in moves.values()}
    assert reached == set(LogState)
    assert all(LOG_TRANSITIONS[s] for s in LogState)


def test_the_log_store_renames_syncs_and_refuses_as_the_table_says(tmp_path, monkeypatch):
    from dropboxmq import transaction
    from dropboxmq.dirs import ensure_layout

    synced: list[str] = []
    monkeypatch.setattr(transaction, "fsync_dir", lambda d: synced.append(d.rsplit("/", 1)[1]))
    ensure_layout(tmp_path)
    store = transaction.LogStore(tmp_path)
    for name in ("a", "b"):
        store.close(store.open(name), sync=False)
    assert store.move(LogState.ASSOCIATED, LogMove.COMMIT, "a") is LogState.COMMITTING  # a decision: fsynced
    assert store.move(LogState.ASSOCIATED, LogMove.ROLL_BACK, "b") is LogState.ROLLING_BACK  # not one
    assert synced == ["committing"]
    assert store.names(LogState.COMMITTING) == ["a"] and store.names(LogState.ROLLING_BACK) == ["b"]
    store.move(LogState.COMMITTING, LogMove.FINISH, "a")
    with pytest.raises(FileNotFoundError):
        store.move(LogState.COMMITTING, LogMove.FINISH, "a")
    store.move(LogState.COMMITTING, LogMove.FINISH, "a", missing_ok=True)
    with pytest.raises(IllegalLogMove):  # never moved, never touched
        store.move(LogState.ROLLING_BACK, LogMove.COMMIT, "b")
    # a branch log: a second decision of the same xid loses instead of replacing
    for state in (LogState.UNASSOCIATED, LogState.PREPARED, LogState.XA_ROLLING_BACK):
        (store.base / state.value).mkdir()
    store.stage("xa-1", b"whole\n")
    store.move(LogState.UNASSOCIATED, LogMove.PREPARE, "xa-1")
    store.path(LogState.XA_ROLLING_BACK, "xa-1").write_bytes(b"other\n")
    with pytest.raises(FileExistsError):
        store.move(LogState.PREPARED, LogMove.ROLL_BACK, "xa-1")
    assert store.path(LogState.PREPARED, "xa-1").read_bytes() == b"whole\n"
    assert synced == ["committing", "prepared"]


def test_the_layouts_log_directories_are_the_log_states_of_the_table():
    """layout.py names the log directories a connection makes and recovery lists (it loads no
    table); they must be the table's states: every non-XA state's directory and 1.2's rolled-back/,
    and the pending ones those a crash can leave a log in."""
    from dropboxmq.layout import LOG_DIRS, PENDING_LOG_DIRS
    from dropboxmq.log_lifecycle import XA_LOG_STATES, LogState

    table = {s.value for s in LogState if s.value is not None and s not in XA_LOG_STATES}
    assert set(LOG_DIRS) == table | {"rolled-back"}
    assert set(PENDING_LOG_DIRS) == {LogState.COMMITTING.value, LogState.ASSOCIATED.value, LogState.ROLLING_BACK.value}
