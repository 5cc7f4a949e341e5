"""The real store (``store.Dropbox`` on a temp dir) against an in-memory model of the
lifecycle table: the model knows nothing but ``lifecycle.TRANSITIONS`` / ``next_state``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dropboxmq import lifecycle, store
from dropboxmq.making import ensure_dropbox
from dropboxmq.errors import StoreError
from dropboxmq.lifecycle import STATE_DIRS, TRANSITIONS, IllegalMove, Move, State, next_state
from dropboxmq.store import Dropbox

MESSAGES = [f"4.11404292012950{i:02d}-926257472{i}.T" for i in range(4)]
CLAIMERS = ["alpha", "beta"]
ALL_MOVES = list(Move)
ALL_STATES = list(State)

messages = st.sampled_from(MESSAGES)


def pname(claimer: str, name: str) -> str:
    return f"{claimer}~{name}"


class StoreModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="dropbox-model-")
        self.box = ensure_dropbox(Dropbox(Path(self._tmp.name) / "Q" / "incoming"))
        # the model: message -> (state, file name); ABSENT messages have no file
        self.model: dict[str, tuple[State, str]] = {m: (State.ABSENT, m) for m in MESSAGES}

    def teardown(self):
        self._tmp.cleanup()

    # --- helpers
    def disk(self) -> dict[tuple[str, str], bytes]:
        """Every file of the dropbox: (directory, name) -> content."""
        out = {}
        for d in STATE_DIRS:
            for n in os.listdir(self.box.path / d):
                out[(d, n)] = (self.box.path / d / n).read_bytes()
        return out

    def source_name(self, message: str, source: State) -> str:
        """The name a mover would use for ``message`` in ``source`` (its current name when
        the model puts it there, else the name it would have had)."""
        state, name = self.model[message]
        if state is source:
            return name
        return pname(CLAIMERS[0], message) if source is State.DELIVERED else message

    def new_name(self, message: str, move: Move, claimer: str) -> str | None:
        if move is Move.CLAIM:
            return pname(claimer, message)
        if move is Move.REDELIVER:
            return message
        return None

    def apply(self, message: str, move: Move, source: State, claimer: str) -> None:
        """Run one Dropbox.move and check it against the table and the model."""
        before = self.disk()
        name = self.source_name(message, source)
        new = self.new_name(message, move, claimer)
        if move not in TRANSITIONS[source] or source is State.ABSENT:
            # CREATE is Dropbox.create, not a rename: Dropbox.move has no move out of ABSENT
            with pytest.raises(IllegalMove):
                self.box.move(move, source, name, new)
            assert self.disk() == before, "an illegal move changed the disk"
            return
        ok = self.box.move(move, source, name, new)
        state, _ = self.model[message]
        if state is not source:
            assert ok is False, f"{move.name} from {source.name} succeeded but the model has {state.name}"
            assert self.disk() == before, "a lost race changed the disk"
            return
        assert ok is True
        dest = next_state(source, move)
        self.model[message] = (dest, new or name)

    # --- rules: every move of the table, from a drawn (possibly wrong) source state
    @rule(message=messages, durable=st.booleans())
    def create(self, message, durable):
        state, _ = self.model[message]
        before = self.disk()
        if state is State.ABSENT:
            self.box.create(message, message.encode(), durable)
            self.model[message] = (next_state(State.ABSENT, Move.CREATE), message)
        elif state is State.NOT_COMMITTED:  # exclusive create: never replaces
            with pytest.raises(StoreError):
                self.box.create(message, b"other", durable)
            assert self.disk() == before

    def _rule(move):
        def r(self, message, source, claimer):
            self.apply(message, move, source, claimer)

        r.__name__ = r.__qualname__ = move.name.lower()
        return rule(message=messages, source=st.sampled_from(ALL_STATES),
                    claimer=st.sampled_from(CLAIMERS))(r)

    send = _rule(Move.SEND)
    discard = _rule(Move.DISCARD)
    quarantine = _rule(Move.QUARANTINE)
    claim = _rule(Move.CLAIM)
    ack = _rule(Move.ACK)
    redeliver = _rule(Move.REDELIVER)
    expire = _rule(Move.EXPIRE)
    dead_letter = _rule(Move.DEAD_LETTER)
    purge = _rule(Move.PURGE)
    create_by_move = _rule(Move.CREATE)
    del _rule

    @rule(message=messages, data=st.data())
    def legal_move(self, message, data):
        """A move the table allows from where the model says the message is."""
        state, _ = self.model[message]
        if state is State.ABSENT:
            return
        move = data.draw(st.sampled_from(sorted(TRANSITIONS[state], key=lambda m: m.value)))
        self.apply(message, move, state, data.draw(st.sampled_from(CLAIMERS)))

    @precondition(lambda self: any(s is State.NEW for s, _ in self.model.values()))
    @rule(data=st.data())
    def competing_claims(self, data):
        """Two claimers race (two threads) for one NEW message: exactly one wins."""
        message = data.draw(st.sampled_from([m for m, (s, _) in self.model.items() if s is State.NEW]))
        results: dict[str, bool] = {}
        barrier = threading.Barrier(2)

        def claim(claimer):
            barrier.wait()
            results[claimer] = self.box.move(Move.CLAIM, State.NEW, message, pname(claimer, message))

        threads = [threading.Thread(target=claim, args=(c,)) for c in CLAIMERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [c for c, ok in results.items() if ok]
        assert len(winners) == 1, results
        self.model[message] = (State.DELIVERED, pname(winners[0], message))

    # --- invariants
    @invariant()
    def disk_matches_model(self):
        disk = self.disk()
        expected = {}
        for message, (state, name) in self.model.items():
            if state is not State.ABSENT:
                expected[(state.value, name)] = message.encode()
        assert disk == expected

    @invariant()
    def each_message_in_exactly_one_state(self):
        seen: dict[str, list[str]] = {}
        for d in STATE_DIRS:
            for n in os.listdir(self.box.path / d):
                seen.setdefault(n.split("~", 1)[-1], []).append(d)
        assert all(len(dirs) == 1 for dirs in seen.values()), seen


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class FallbackStoreModel(StoreModel):
    """The same machine on the store's path without renameat2 (every network file system:
    ``netfs.link_rename`` / ``netfs.checked_rename``), which must behave the same."""

    def __init__(self):
        self._patch = mock.patch.object(store, "noreplace_supported", False)
        self._patch.start()
        super().__init__()

    def teardown(self):
        self._patch.stop()
        super().teardown()


TestFallbackStoreModel = FallbackStoreModel.TestCase
TestFallbackStoreModel.settings = TestStoreModel.settings


@pytest.mark.parametrize("machine", [StoreModel, FallbackStoreModel], ids=["renameat2", "fallback"])
def test_a_claim_of_a_message_claimed_under_the_same_name_is_a_lost_race(machine):
    """Hypothesis's example, replayed: a claim finds target/<name> gone and processing/<its
    name> there (the sessions of one connection claim under one name; another won).  False,
    nothing changed, as renameat2 answers ENOENT before EEXIST; without renameat2 the check of
    the destination came first and the claim raised "processing/alpha~... already exists"."""
    state = machine()
    try:
        m = MESSAGES[0]
        state.create(message=m, durable=False)
        state.apply(m, Move.SEND, State.NOT_COMMITTED, "alpha")
        state.apply(m, Move.CLAIM, State.NEW, "alpha")
        state.apply(m, Move.CLAIM, State.NEW, "alpha")  # the model's assertion: False, disk unchanged
        state.disk_matches_model()
    finally:
        state.teardown()


@pytest.mark.parametrize("shared", [False, True], ids=["link_rename", "checked_rename"])
@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "fallback"])
def test_a_gone_source_is_a_lost_race_even_where_the_destination_is_taken(tmp_path, monkeypatch, renameat2, shared):
    """``rename_noreplace``'s answer when both hold: FileNotFoundError (Dropbox.move's False),
    never FileExistsError (for a claim, collisions.taken's StoreError "already exists")."""
    if not renameat2:
        monkeypatch.setattr(store, "noreplace_supported", False)
    elif not store.noreplace_supported:
        pytest.skip("no renameat2 here")
    dst = tmp_path / "dst"
    dst.write_bytes(b"winner")
    with pytest.raises(FileNotFoundError):
        store.rename_noreplace(str(tmp_path / "src"), str(dst), shared=shared)
    assert store.noreplace_supported is renameat2  # (the path under test was the one taken)
    assert [p.name for p in tmp_path.iterdir()] == ["dst"] and dst.read_bytes() == b"winner"


def test_model_covers_the_whole_table():
    """The table the machine is built from: every state has a move and every move a use."""
    used = {m for moves in TRANSITIONS.values() for m in moves}
    assert used == set(Move)
    assert set(TRANSITIONS) == set(State)
    for state in lifecycle.TERMINAL:
        assert set(TRANSITIONS[state]) == {Move.PURGE}


LEAK = '''
import ctypes, errno
from dropboxmq import store

def test_a_first_rename_on_a_network_file_system(tmp_path, monkeypatch):
    def einval(*args):
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(store, "renameat2", einval)  # sshfs, MooseFS: undone after the test
    (tmp_path / "a").write_bytes(b"x")
    store.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert store.noreplace_supported is False  # the process's path from now on

def test_the_next_test_in_the_worker():
    assert store.noreplace_supported is (store.renameat2 is not None)
'''


def test_a_test_on_a_network_file_system_leaves_the_next_one_its_renameat2(tmp_path):
    """tests/conftest.py puts the process-wide path back after each test: test_multihost's
    sshfs test left it off, and TestStoreModel, next in its worker, ran without renameat2."""
    (tmp_path / "test_leak.py").write_text(LEAK)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-p", "no:randomly", "-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(
                           [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
