"""Two-phase commit: a dropbox XA session and a real PostgreSQL, driven by coordinator.py.

Every scenario consumes one message and inserts one row "or neither".  Crashes
are real: the worker is a forked process that kill -9's itself at an exact step
of the protocol (the coordinator's ``on_step`` hook), and recovery runs in
another process from the logs alone.  No mocks of the database.
"""

from __future__ import annotations

import json
import os
import random
import signal
import uuid
from pathlib import Path

import pytest

from conftest import FAST, fork_context, ls
from dropboxmq_stress.pg_server import PgServer, PgUnavailable

import dropboxmq_xa as xa
from dropboxmq import recovery
from dropboxmq_xa.coordinator import Coordinator, CoordinatorError
from dropboxmq.errors import IllegalStateError
from dropboxmq.message import Queue
from dropboxmq.connection import Connection

psycopg = pytest.importorskip("psycopg")

Q = Queue("in")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server per xdist worker, stopped at the end."""
    try:
        server = PgServer(max_prepared=200, max_connections=200).start()
    except PgUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture
def table(pg_server) -> str:
    """A fresh table per test (no unique key: duplicates must be countable)."""
    name = "rows_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (msg_id text NOT NULL, body text)")
    return name


@pytest.fixture
def tm_name() -> str:
    """A coordinator name of its own: in-doubt branches of other tests are never touched."""
    return "t" + uuid.uuid4().hex[:10]


def send(root: Path, n: int = 1, prefix: str = "m") -> None:
    with Connection(root, settings=FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        for i in range(n):
            p.send(p.session.create_text_message(f"{prefix}{i}"))


def rows(dsn: str, table: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(f"SELECT msg_id, body FROM {table} ORDER BY msg_id").fetchall()


def pg_in_doubt(dsn: str, tm: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return [x.gtrid for x in c.tpc_recover() if (x.gtrid or "").startswith(tm + ".")]


def parked(root: Path) -> list[str]:
    """Dot-named (parked) files of prepared branches, anywhere in the queue."""
    return [n for s in ("working", "processing") for n in ls(root, "in", s, dot=True) if n.startswith(".xa-")]


def kill_at(point: str | None):
    def on_step(step: str) -> None:
        if step == point:
            os.kill(os.getpid(), signal.SIGKILL)
    return on_step


def consume_and_insert(root: Path, dsn: str, table: str, tm_dir: Path, tm_name: str, *,
                       crash_at: str | None = None, fail_before_prepare: bool = False,
                       order: tuple[str, str] = ("mq", "db")) -> str:
    """One unit of work: receive a message, insert its row, commit both (or neither)."""
    conn = Connection(root, settings=FAST, create=True)
    session = xa.create_xa_session(conn)
    consumer = session.create_consumer(Q)
    pg = psycopg.connect(dsn)
    on_step = kill_at(crash_at)
    coord = Coordinator(tm_dir, tm_name, on_step=on_step)
    try:
        resources = {"mq": session, "db": pg}
        tx = coord.begin({k: resources[k] for k in order})
        msg = consumer.receive(5)
        assert msg is not None
        on_step("received")
        pg.execute(f"INSERT INTO {table} (msg_id, body) VALUES (%s, %s)", (msg.message_id, msg.text))
        on_step("inserted")
        if fail_before_prepare:
            coord.rollback(tx)
            return "rolled back"
        coord.commit(tx)
        return msg.message_id
    finally:
        coord.close()
        pg.close()
        conn.close()


def run_crashing(fn, *args, **kw) -> int:
    """Run ``fn`` in a forked child; its exit code (-9 when it killed itself)."""
    ctx = fork_context()
    p = ctx.Process(target=fn, args=args, kwargs=kw)
    p.start()
    p.join(60)
    assert not p.is_alive()
    return p.exitcode


def recover_all(root: Path, dsn: str, tm_dir: Path, tm_name: str):
    """What a restarted worker does first: the coordinator finishes its in-doubt branches."""
    conn = Connection(root, settings=FAST, create=True)
    session = xa.create_xa_session(conn)
    pg = psycopg.connect(dsn)
    try:
        with Coordinator(tm_dir, tm_name) as coord:
            return coord.recover({"mq": session, "db": pg})
    finally:
        pg.close()
        conn.close()


def assert_committed_once(root: Path, dsn: str, table: str, tm_dir: Path, tm_name: str, n: int = 1):
    got = rows(dsn, table)
    processed = ls(root, "in", "processed")
    assert len(got) == n and len({m for m, _ in got}) == n
    assert len(processed) == n
    assert ls(root, "in", "target") == [] and ls(root, "in", "processing", dot=True) == []
    assert parked(root) == []
    assert pg_in_doubt(dsn, tm_name) == [] and xa.recover(root) == []
    assert [n for n in os.listdir(tm_dir) if n.endswith(".commit")] == []


def receive_again(root: Path):
    with Connection(root, settings=FAST, create=True) as c:
        s = c.create_session(transacted=True)
        m = s.create_consumer(Q).receive(5)
        s.rollback()
        return m


# ---------------------------------------------------------------- scenarios


def test_consume_and_insert_commits_both(tmp_path, pg_server, table, tm_name):
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    mid = consume_and_insert(root, pg_server.dsn, table, tm_dir, tm_name)
    assert rows(pg_server.dsn, table) == [(mid, "m0")]
    assert_committed_once(root, pg_server.dsn, table, tm_dir, tm_name)


def test_failure_before_prepare_rolls_back_both(tmp_path, pg_server, table, tm_name):
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    assert consume_and_insert(root, pg_server.dsn, table, tm_dir, tm_name, fail_before_prepare=True) == "rolled back"
    assert rows(pg_server.dsn, table) == []
    assert len(ls(root, "in", "target")) == 1 and ls(root, "in", "processed") == []
    m = receive_again(root)
    assert m.redelivered and m.delivery_count == 2 and m.text == "m0"


@pytest.mark.parametrize("crash_at", ["received", "inserted", "prepared:mq"])
def test_kill_before_both_prepared_rolls_back_both(tmp_path, pg_server, table, tm_name, crash_at):
    """Presumed abort: a crash before the decision (only one branch prepared, or none)."""
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    assert run_crashing(consume_and_insert, root, pg_server.dsn, table, tm_dir, tm_name,
                        crash_at=crash_at) == -signal.SIGKILL
    recovery.recover(root)  # the dead owner's open branch (associated log) comes back
    res = recover_all(root, pg_server.dsn, tm_dir, tm_name)
    assert res.committed == []
    assert rows(pg_server.dsn, table) == []
    assert pg_in_doubt(pg_server.dsn, tm_name) == [] and parked(root) == []
    m = receive_again(root)
    assert m is not None and m.redelivered and m.text == "m0"


def test_kill_after_both_prepares_without_decision_rolls_back(tmp_path, pg_server, table, tm_name):
    """Rollback decision (no decision logged = abort): message redelivered, no row."""
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    assert run_crashing(consume_and_insert, root, pg_server.dsn, table, tm_dir, tm_name,
                        crash_at="prepared:db") == -signal.SIGKILL
    # both branches are prepared and in doubt ...
    assert len(pg_in_doubt(pg_server.dsn, tm_name)) == 1
    assert [x.bqual for x in xa.recover(root)] == ["mq"]
    # ... and the dead-owner sweeps do not touch the prepared receive, even when told
    # to treat unknown owners as dead
    rep = recovery.recover(root, assume_unknown_dead=True, orphan_age=0)
    assert rep.redelivered == 0 and ls(root, "in", "target") == [] and len(parked(root)) == 1
    res = recover_all(root, pg_server.dsn, tm_dir, tm_name)
    assert sorted(r for r, _ in res.rolled_back) == ["db", "mq"] and res.committed == []
    assert rows(pg_server.dsn, table) == []
    assert parked(root) == [] and pg_in_doubt(pg_server.dsn, tm_name) == []
    m = receive_again(root)
    assert m.redelivered and m.text == "m0"


def test_explicit_rollback_after_prepare(tmp_path, pg_server, table, tm_name):
    """The coordinator decides rollback after both prepares (e.g. a third check failed)."""
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    conn = Connection(root, settings=FAST, create=True)
    s = xa.create_xa_session(conn)
    pg = psycopg.connect(pg_server.dsn)
    with Coordinator(tm_dir, tm_name) as coord:
        tx = coord.begin({"mq": s, "db": pg})
        m = s.create_consumer(Q).receive(5)
        pg.execute(f"INSERT INTO {table} VALUES (%s, %s)", (m.message_id, m.text))
        s.tpc_prepare()
        pg.tpc_prepare()
        coord.rollback(tx)
    pg.close()
    conn.close()
    assert rows(pg_server.dsn, table) == [] and parked(root) == []
    m = receive_again(root)
    assert m.redelivered and m.text == "m0"


@pytest.mark.parametrize("order", [("mq", "db"), ("db", "mq")])
def test_kill_after_decision_recovery_commits_both_once(tmp_path, pg_server, table, tm_name, order):
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    assert run_crashing(consume_and_insert, root, pg_server.dsn, table, tm_dir, tm_name,
                        crash_at="decided", order=order) == -signal.SIGKILL
    assert len([n for n in os.listdir(tm_dir) if n.endswith(".commit")]) == 1
    assert rows(pg_server.dsn, table) == [] and ls(root, "in", "processed") == []  # nothing visible yet
    recovery.recover(root, assume_unknown_dead=True, orphan_age=0)  # must not disturb the branch
    res = recover_all(root, pg_server.dsn, tm_dir, tm_name)
    assert sorted(r for r, _ in res.committed) == ["db", "mq"] and res.rolled_back == []
    assert_committed_once(root, pg_server.dsn, table, tm_dir, tm_name)
    # recovering again is a no-op: exactly once
    res = recover_all(root, pg_server.dsn, tm_dir, tm_name)
    assert res.committed == [] and res.rolled_back == []
    assert_committed_once(root, pg_server.dsn, table, tm_dir, tm_name)


@pytest.mark.parametrize("first", ["mq", "db"])
def test_kill_after_first_commit_recovery_finishes_second(tmp_path, pg_server, table, tm_name, first):
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    send(root)
    order = (first, "db" if first == "mq" else "mq")
    assert run_crashing(consume_and_insert, root, pg_server.dsn, table, tm_dir, tm_name,
                        crash_at=f"committed:{first}", order=order) == -signal.SIGKILL
    if first == "mq":
        assert len(ls(root, "in", "processed")) == 1 and rows(pg_server.dsn, table) == []
    else:
        assert len(rows(pg_server.dsn, table)) == 1 and ls(root, "in", "processed") == []
    res = recover_all(root, pg_server.dsn, tm_dir, tm_name)
    assert [r for r, _ in res.committed] == [order[1]] and res.rolled_back == []
    assert_committed_once(root, pg_server.dsn, table, tm_dir, tm_name)


# ---------------------------------------------------------------- stress


def _fork(fn, *args) -> int:
    """Start ``fn(*args)`` in a forked child that never returns into pytest."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        except BaseException:
            import traceback

            os.write(2, traceback.format_exc().encode())  # fd 2: pytest's capture shows it
        finally:
            os._exit(code)
    return pid


def _stress_worker(root, dsn, table, tm_dir, slot, total, seed, p_kill, deadline):
    import time

    rnd = random.Random(seed)
    steps = {"received", "inserted", "prepared:mq", "prepared:db", "decided", "committed:mq",
             "committed:db"}

    def on_step(step: str) -> None:
        if step in steps and rnd.random() < p_kill:
            os.kill(os.getpid(), signal.SIGKILL)

    conn = Connection(root, f"w{slot}-{seed}", settings=FAST, create=True)
    session = xa.create_xa_session(conn)
    consumer = session.create_consumer(Q)
    pg = psycopg.connect(dsn)
    coord = Coordinator(tm_dir, f"slot{slot}", on_step=on_step)
    resources = {"mq": session, "db": pg}
    coord.recover(resources)  # a restarted slot first settles its predecessor's in-doubt work
    processed = Path(root) / "in" / "incoming" / "processed"
    while len(os.listdir(processed)) < total:
        if time.time() > deadline:
            os._exit(3)
        tx = coord.begin(resources)
        msg = consumer.receive(0.05)
        if msg is None:
            coord.rollback(tx)
            continue
        on_step("received")
        pg.execute(f"INSERT INTO {table} (msg_id, body) VALUES (%s, %s)", (msg.message_id, msg.text))
        on_step("inserted")
        coord.commit(tx)


@pytest.mark.slow
def test_stress_random_kills_consumed_equals_inserted(tmp_path, pg_server, table, capsys):
    """Many workers, random kill -9 at every step of the protocol; each killed slot is
    restarted (and recovers first).  Messages consumed == rows inserted, no duplicates."""
    root, tm_dir = tmp_path / "root", tmp_path / "tm"
    total, workers, p_kill = 150, 6, 0.02
    send(root, total)
    (root / "in" / "incoming" / "processed").mkdir(parents=True, exist_ok=True)
    import time

    seeds = iter(range(1, 10_000))
    procs: dict[int, int] = {}  # pid -> slot
    kills = 0
    deadline = time.time() + 50  # workers give up (exit 3) past this: the test fails, never hangs

    def start(slot: int) -> None:
        procs[_fork(_stress_worker, root, pg_server.dsn, table, tm_dir, slot, total, next(seeds), p_kill,
                    deadline)] = slot

    for slot in range(workers):
        start(slot)
    while procs:
        pid, status = os.waitpid(-1, 0)  # blocks until a worker ends: no sleeps
        slot = procs.pop(pid, None)
        if slot is None:
            continue
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            kills += 1
            start(slot)
        else:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    for slot in range(workers):  # settle whatever the last incarnations left in doubt
        recover_all(root, pg_server.dsn, tm_dir, f"slot{slot}")
    got = rows(pg_server.dsn, table)
    ids = [m for m, _ in got]
    consumed = ls(root, "in", "processed")
    with capsys.disabled():
        print(f"\n[xa stress] {total} messages, {workers} workers, {kills} kill -9: "
              f"consumed={len(consumed)} rows={len(got)} distinct_rows={len(set(ids))}")
    assert kills > 0
    from dropboxmq.codec import from_wire

    consumed_ids = sorted(from_wire(n.split("~", 1)[-1]).message_id for n in consumed)
    diag = (f"dup consumed={sorted({i for i in consumed_ids if consumed_ids.count(i) > 1})} "
            f"consumed-not-inserted={sorted(set(consumed_ids) - set(ids))} "
            f"inserted-not-consumed={sorted(set(ids) - set(consumed_ids))} "
            f"target={ls(root, 'in', 'target')} processing={ls(root, 'in', 'processing', dot=True)}")
    assert len(consumed) == len(got) == len(set(ids)) == len(set(consumed_ids)) == total, diag
    assert sorted(b for _, b in got) == sorted(f"m{i}" for i in range(total))
    assert ls(root, "in", "target") == [] and ls(root, "in", "processing", dot=True) == []
    assert parked(root) == []


# ---------------------------------------------------------------- the dropbox resource alone


def test_xid_log_name_round_trip():
    x = xa.Xid(7, "a-b.c~d/é", "q-1")
    assert xa.Xid.from_log_name(x.log_name) == x
    assert x.log_name.count("-") == 3 and "/" not in x.log_name
    assert xa.Xid.parse("7:g:b") == xa.Xid(7, "g", "b")
    assert tuple(x) == (7, "a-b.c~d/é", "q-1") and x[1] == "a-b.c~d/é"
    with pytest.raises(ValueError):
        xa.Xid(1, "g" * 65, "b")


def test_prepared_branch_survives_and_commits_from_another_process(tmp_path):
    root = tmp_path / "root"
    send(root, 2)
    x = xa.Xid(1, "g1", "mq")

    def prepare_and_die():
        conn = Connection(root, "preparer", settings=FAST, create=True)
        s = xa.create_xa_session(conn)
        s.tpc_begin(x)
        s.create_consumer(Q).receive(5)
        s.create_producer(Queue("out")).send(s.create_text_message("reply"))
        s.tpc_prepare()
        os.kill(os.getpid(), signal.SIGKILL)

    assert run_crashing(prepare_and_die) == -signal.SIGKILL
    # nothing visible; nothing swept
    rep = recovery.recover(root, assume_unknown_dead=True, orphan_age=0)
    assert rep.redelivered == 0 and rep.orphans_quarantined == 0
    assert len(ls(root, "in", "target")) == 1 and ls(root, "out", "target") == []
    assert ls(root, "in", "processing") == [] and len(parked(root)) == 1
    assert json.loads((root / "dropboxmq/transaction/prepared" / x.log_name).read_text().splitlines()[0])[
        "owner"] == "preparer"
    with Connection(root, settings=FAST, create=True) as c:
        s = xa.create_xa_session(c)
        assert s.tpc_recover() == [x]
        s.tpc_commit(x)
        assert s.tpc_recover() == []
        with pytest.raises(xa.UnknownXidError):
            s.tpc_commit(x)
    assert len(ls(root, "in", "processed")) == 1 and len(ls(root, "out", "target")) == 1
    assert parked(root) == [] and len(ls(root, "in", "target")) == 1


def test_one_phase_commit_and_local_tx_refused_inside_branch(tmp_path):
    root = tmp_path / "root"
    send(root)
    with Connection(root, settings=FAST, create=True) as c:
        s = xa.create_xa_session(c)
        s.tpc_begin(s.xid(1, "one", "phase"))
        assert s.create_consumer(Q).receive(5) is not None
        with pytest.raises(IllegalStateError, match="use tpc_commit"):
            s.commit()
        s.tpc_commit()  # one-phase: the branch is the only resource
        assert s.xa_state == "idle"
    assert len(ls(root, "in", "processed")) == 1 and ls(root, "dropboxmq/transaction", "prepared") == []


def test_duplicate_xid_is_refused(tmp_path):
    root = tmp_path / "root"
    with Connection(root, settings=FAST, create=True) as c:
        s = xa.create_xa_session(c)
        x = s.xid(1, "dup", "b")
        s.tpc_begin(x)
        s.tpc_prepare()
        s2 = xa.create_xa_session(c)
        with pytest.raises(xa.XAError):
            s2.tpc_begin(x)
        s.tpc_rollback()
        assert s.tpc_recover() == []


def test_crash_during_prepare_is_rolled_back(tmp_path):
    """Killed after parking the files but before the log reached prepared/: presumed abort."""
    root = tmp_path / "root"
    send(root)

    def die_in_prepare():
        from dropboxmq import transaction

        real = transaction.rename_noreplace

        def rename(src, dst):
            if "/prepared/" in str(dst):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, dst)

        transaction.rename_noreplace = rename
        conn = Connection(root, "dier", settings=FAST, create=True)
        s = xa.create_xa_session(conn)
        s.tpc_begin(s.xid(1, "torn", "mq"))
        s.create_consumer(Q).receive(5)
        s.tpc_prepare()

    assert run_crashing(die_in_prepare) == -signal.SIGKILL
    assert len(parked(root)) == 1 and os.listdir(root / "dropboxmq/transaction/unassociated")
    recovery.recover(root)  # the associated log: its names are parked, nothing to do
    assert xa.recover(root) == []  # the unassociated log of a dead owner: rolled back
    assert parked(root) == [] and len(ls(root, "in", "target")) == 1
    assert os.listdir(root / "dropboxmq/transaction/unassociated") == []
    assert receive_again(root).redelivered


def test_decided_branch_refuses_the_other_decision(tmp_path):
    root = tmp_path / "root"
    send(root)
    with Connection(root, settings=FAST, create=True) as c:
        s = xa.create_xa_session(c)
        x = s.xid(1, "half", "mq")
        s.tpc_begin(x)
        s.create_consumer(Q).receive(5)
        s.tpc_prepare()
    # simulate a crash in the middle of phase two: the log is in xa-committing/
    t = root / "dropboxmq/transaction"
    os.rename(t / "prepared" / x.log_name, t / "xa-committing" / x.log_name)
    with pytest.raises(xa.XAError):
        xa.finish_branch(root, x, commit=False)
    assert xa.recover(root) == []  # a decided branch is finished by recovery
    assert len(ls(root, "in", "processed")) == 1 and parked(root) == []


def test_cli_xa_list_commit_rollback(tmp_path):
    from click.testing import CliRunner

    from dropboxmq.cli import main

    root = tmp_path / "root"
    send(root, 2)
    xids = []
    with Connection(root, settings=FAST, create=True) as c:
        for g in ("cli-a", "cli-b"):
            s = xa.create_xa_session(c)
            x = s.xid(9, g, "mq")
            s.tpc_begin(x)
            s.create_consumer(Q).receive(5)
            s.tpc_prepare()
            xids.append(x)
    r = CliRunner()
    out = r.invoke(main, ["--root", str(root), "xa", "list", "--json"])
    assert out.exit_code == 0, out.output
    listed = [json.loads(line) for line in out.output.splitlines()]
    assert sorted(d["gtrid"] for d in listed) == ["cli-a", "cli-b"]
    assert r.invoke(main, ["--root", str(root), "xa", "commit", xids[0].log_name]).exit_code == 0
    assert r.invoke(main, ["--root", str(root), "xa", "rollback", "cli-b"]).exit_code == 0
    out = r.invoke(main, ["--root", str(root), "xa", "commit", "nope"])
    assert out.exit_code != 0
    assert len(ls(root, "in", "processed")) == 1 and len(ls(root, "in", "target")) == 1
    assert "no in-doubt branches" in r.invoke(main, ["--root", str(root), "xa", "list"]).output


def test_coordinator_is_single_instance(tmp_path):
    with Coordinator(tmp_path / "tm", "solo"):
        with pytest.raises(CoordinatorError):
            Coordinator(tmp_path / "tm", "solo")


def test_coordinators_sharing_a_directory_keep_each_others_decisions(tmp_path):
    """Found by the stress test: a restarted coordinator must forget only its own decisions."""
    with Coordinator(tmp_path / "tm", "a") as a, Coordinator(tmp_path / "tm", "b") as b:
        from dropboxmq_xa.coordinator import GlobalTx

        a._write_decision(GlobalTx("a.1", 1, {}, {}))
        b._write_decision(GlobalTx("b.1", 1, {}, {}))
        assert a.decisions() == {"a.1"} and b.decisions() == {"b.1"}
        assert a.recover({}).forgotten == ["a.1"]
        assert b.decisions() == {"b.1"}
