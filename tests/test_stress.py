"""The stress harness: the checker on hand-written histories, a reduced smoke run,
fail-at-N, a genuinely full disk, and regressions for the reference bugs the runs found."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dropboxmq_stress import checker, faults, failn, nemesis, run
from dropboxmq_stress.workload import make_body, parse_body

# ---------------------------------------------------------------- hand-written histories

T = iter(range(1, 10**6))


def rec(p, typ, f, value=None, **kw):
    r = {"t": float(next(T)), "p": p, "type": typ, "f": f, **kw}
    if value is not None:
        r["value"] = value
    return r


def sent(*values, p="p0.1", persistent=True):
    return [rec(p, "invoke", "send", list(values), persistent=persistent),
            rec(p, "ok", "send", list(values), persistent=persistent)]


def got(p, v, mode="client", redelivered=False, **kw):
    return [rec(p, "invoke", "receive"), rec(p, "ok", "receive", v, mode=mode, redelivered=redelivered, **kw)]


def acked(p, *values):
    return [rec(p, "invoke", "ack", list(values)), rec(p, "ok", "ack", list(values))]


def killed(victim):
    return [rec("nemesis", "info", "kill", victim=victim, nemesis=True)]


def test_clean_history_is_valid():
    h = sent("a", "b") + got("c0.1", "a", mode="auto") + got("c0.1", "b") + acked("c0.1", "b")
    r = checker.check(h)
    assert r["valid"]
    assert (r["attempt-count"], r["acknowledged-count"], r["ok-count"]) == (2, 2, 2)
    assert r["lost-count"] == r["unexpected-count"] == r["duplicated-count"] == r["recovered-count"] == 0


def test_lost_message_fails():
    r = checker.check(sent("a", "b") + got("c0.1", "a", mode="auto"))
    assert not r["valid"]
    assert r["lost-count"] == 1 and r["lost"] == ["b"]


def test_unexpected_message_fails():
    r = checker.check(sent("a") + got("c0.1", "a", mode="auto") + got("c0.1", "zz", mode="auto"))
    assert not r["valid"]
    assert r["unexpected-count"] == 1


def test_duplicate_explained_by_kill_between_claim_and_ack():
    h = sent("a") + got("c0.1", "a") + killed("c0.1") + got("drain", "a", redelivered=True) + acked("drain", "a")
    r = checker.check(h)
    assert r["valid"]
    assert r["duplicated-count"] == 1 and r["duplicates-explained"] == 1
    assert "kill between claim and ack" in r["duplicates"]["explained"][0]["why"]


def test_duplicate_after_acknowledgement_is_unexplained():
    h = sent("a") + got("c0.1", "a") + acked("c0.1", "a") + got("c1.1", "a", redelivered=True) + acked("c1.1", "a")
    r = checker.check(h)
    assert not r["valid"]
    assert r["duplicates-unexplained"] == 1


def test_duplicate_without_any_cause_is_unexplained():
    # never acknowledged, but nobody was killed and no ack failed: the library redelivered on its own
    h = sent("a") + got("c0.1", "a") + got("c1.1", "a", redelivered=True) + acked("c1.1", "a")
    assert checker.check(h)["duplicates-unexplained"] == 1


def test_duplicate_explained_by_failed_ack_and_rollback():
    h = (sent("a", "b") + got("c0.1", "a") + [rec("c0.1", "invoke", "ack", ["a"]),
                                               rec("c0.1", "info", "ack", ["a"], err="EIO")]
         + got("c1.1", "b", mode="transacted") + [rec("c1.1", "invoke", "rollback", ["b"]),
                                                   rec("c1.1", "ok", "rollback", ["b"])]
         + got("drain", "a", redelivered=True) + got("drain", "b", redelivered=True) + acked("drain", "a", "b"))
    r = checker.check(h)
    assert r["valid"] and r["duplicates-explained"] == 2


def test_missing_redelivered_flag_is_reported():
    h = sent("a") + got("c0.1", "a") + killed("c0.1") + got("drain", "a", redelivered=False)
    assert checker.check(h)["redelivered-flag-missing-count"] == 1


def test_recovered_and_in_doubt():
    h = [rec("p0.1", "invoke", "send", ["a"]), rec("p0.1", "info", "send", ["a"], err="ENOSPC")] + got("c0.1", "a", mode="auto")
    r = checker.check(h, {"working": [{"name": "x", "value": "b"}], "processing": []})
    assert r["valid"] and r["recovered-count"] == 1 and r["in-doubt-count"] == 1


def test_corrupt_delivery_fails():
    r = checker.check(sent("a") + got("c0.1", "a", mode="auto", corrupt=True))
    assert not r["valid"] and r["corrupt-count"] == 1


def test_auto_ack_kill_window_is_explained_only_for_a_killed_receiver():
    h = sent("a") + [rec("c0.1", "invoke", "receive")] + killed("c0.1")
    state = {"processed": [{"name": "n", "value": "a", "client": "c0.1"}]}
    r = checker.check(h, state)
    assert r["valid"] and r["acked-unobserved-count"] == 1 and r["lost-count"] == 0
    h2 = sent("a") + [rec("c0.1", "invoke", "receive")]  # same, but nobody was killed: lost
    assert checker.check(h2, state)["lost-count"] == 1


def test_power_loss_may_lose_non_persistent_only():
    h = sent("a", persistent=False) + sent("b") + [rec("nemesis", "info", "power-loss", nemesis=True)]
    r = checker.check(h, power_loss=True)
    assert r["lost-non-persistent-count"] == 1 and r["lost-count"] == 1 and r["lost"] == ["b"]


def test_bodies_detect_tearing():
    body = make_body("p0.1-7", 300)
    assert len(body) == 300 and parse_body(body) == ("p0.1-7", True)
    assert parse_body(body[:150])[1] is False
    assert parse_body(b"") == (None, False)


def test_check_cli_on_a_history_dir(tmp_path):
    hist = tmp_path / "case" / "history"
    hist.mkdir(parents=True)
    lines = sent("a") + got("c0.1", "a", mode="auto")
    (hist / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"torn')
    from click.testing import CliRunner

    from dropboxmq_stress.cli import stress

    res = CliRunner().invoke(stress, ["check", str(tmp_path / "case")])
    assert res.exit_code == 0, res.output
    (hist / "y.jsonl").write_text(json.dumps(got("c1.1", "zz", mode="auto")[1]) + "\n")
    assert CliRunner().invoke(stress, ["check", str(tmp_path / "case")]).exit_code == 1


def test_compare_ratios(tmp_path):
    from dropboxmq_stress.compare import compare

    base = {"valid": True, "figures": {"lost-count": 0, "unexpected-count": 0, "kills.deliver_per_s": 100.0,
                                       "kills.send_p99": 0.01}}
    same = json.loads(json.dumps(base))
    assert compare(base, same)[0]
    slow = json.loads(json.dumps(base))
    slow["figures"]["kills.deliver_per_s"] = 30.0
    assert not compare(base, slow, tolerance=0.5)[0]
    lossy = json.loads(json.dumps(base))
    lossy["figures"]["lost-count"] = 1
    assert not compare(base, lossy)[0]


# ---------------------------------------------------------------- runs


def _root_or_skip(tmp_path):
    ok, why = nemesis.can_mount_tmpfs(tmp_path)
    if not ok:
        pytest.skip(why)


@pytest.mark.slow
def test_ci_smoke_kills_contention_full_disk(tmp_path):
    """Reduced smoke (kills + contention + a full tmpfs): lost == unexpected == 0 for every schedule."""
    cases = run.profile("ci")
    report = run.run_profile(cases, tmp_path / "out", scratch=tmp_path / "scratch", html=True)
    kills = report["cases"]["kills"]
    assert kills["lost-count"] == 0 and kills["unexpected-count"] == 0, kills["lost"]
    assert kills["corrupt-count"] == 0 and kills["duplicates-unexplained"] == 0, kills["duplicates"]
    assert kills["kills"] >= 1 and kills["acknowledged-count"] > 0
    disk = report["cases"]["full-disk"]
    if disk.get("valid") is None:  # not root: the skip must be reported, never a silent pass
        assert "full-disk" in disk["skipped"]
    else:
        assert disk["lost-count"] == 0 and disk["unexpected-count"] == 0 and disk["corrupt-count"] == 0
        assert disk["recovered-count"] + disk["acknowledged-count"] > 0
    assert (tmp_path / "out" / "report.html").read_text().count("<svg") >= 2
    assert list((tmp_path / "out" / "kills" / "history").glob("*.jsonl"))


def test_full_disk_tmpfs(tmp_path, fast):
    """A genuinely full disk: sends fail with ENOSPC, leave nothing behind, and every
    acknowledged send is delivered intact."""
    _root_or_skip(tmp_path)
    from dropboxmq.errors import StoreError
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AUTO_ACKNOWLEDGE
    from dropboxmq.connection import Connection

    with nemesis.tmpfs_mount(tmp_path / "fs", "64k") as mnt:
        ok, failures = [], 0
        with Connection(mnt / "root", client_id="p", settings=fast, create=True) as conn:
            s = conn.create_session()
            p = s.create_producer(Queue("q"))
            for i in range(200):
                m = s.create_bytes_message(make_body(f"v{i}", 3000))
                try:
                    p.send(m)
                    ok.append(f"v{i}")
                except StoreError as exc:
                    assert getattr(exc, "errno", None) == errno.ENOSPC
                    failures += 1
            assert failures > 0 and ok
            working = os.listdir(mnt / "root" / "q" / "incoming" / "working")
            assert working == []  # partial files removed
            c = conn.create_session(ack_mode=AUTO_ACKNOWLEDGE).create_consumer(Queue("q"))
            seen = []
            while (m := c.receive(0)) is not None:
                v, intact = parse_body(m.body)
                assert intact
                seen.append(v)
            assert sorted(seen) == sorted(ok)


def _fiu_python(code: str, tmp_path: Path) -> dict:
    env = faults.preload_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fail_at_n_send_every_call_site(tmp_path):
    """Fail-at-N over every system call of a persistent send (libfiu errno, and a kill right after
    the call): every trial keeps lost == unexpected == 0."""
    code = f"""
import json
from pathlib import Path
from dropboxmq_stress import failn, run
case = run.Case("fail-at-n", run.Workload(), ("fail-at-n",),
                failn={{"ops": ["send", "send_many"], "actions": ["errno:EIO", "kill-after"]}})
r = failn.run(case, Path({str(tmp_path / 'out')!r}), Path({str(tmp_path / 'scratch')!r}))
print(json.dumps({{k: r[k] for k in ("valid", "trials-run", "call-sites", "libfiu", "lost-count",
                                      "unexpected-count", "invalid")}}))
"""
    r = _fiu_python(code, tmp_path)
    assert r["lost-count"] == 0 and r["unexpected-count"] == 0, r["invalid"]
    assert r["valid"], r["invalid"]
    sites = r["call-sites"]["send/renameat2"]
    # the queue's eight directories made durable (each parent fsynced, issue 31: a fresh root's first
    # send creates the queue), working/'s lock (held from CREATE to SEND), the file, the rename, target/
    assert [s.split(":")[1] for s in sites] == ["open", "fsync"] * 8 + [
        "open", "open", "write", "fsync", "renameat2", "open", "fsync"]
    assert r["trials-run"] >= 2 * len(sites)
    if os.path.exists(faults.PRELOAD):
        assert r["libfiu"]


# ---------------------------------------------------------------- bugs the runs found (now fixed)


# Regression, found by the stress runs and fixed: session.py Session._ack via
# MessageConsumer.receive (AUTO_ACKNOWLEDGE): the ACK rename processing->processed succeeds, then
# fsync of processed/ fails (EIO) and receive() raises; the application never gets the message and
# it is already in processed/: lost
def test_regression_auto_ack_fsync_failure_loses_message(tmp_path):
    # claim = renameat2(claim) open(read) renameat2(ack) open(processed/) fsync(processed/): call 5
    t = failn.trial("claim", "errno:EIO", 5, "renameat2", tmp_path / "t")
    assert t["kind"] == "fsync"
    assert t["lost"] == 0, t["note"]


# Regression, found by the stress runs and fixed: session.py Session.delivered (transacted): the
# claim moved the message to processing/, then TransactionLog.record fails (open/write of the log:
# EIO/ENOSPC) and receive() raises; the message is in neither the log nor unacked, so
# rollback/close never redeliver it, and since Connection.close unlinks the client registration
# (clients.Registration.release), recovery sees the owner as 'unknown' and never reclaims it:
# stuck in processing/ forever
def test_regression_transacted_receive_log_failure_strands_message(tmp_path):
    # tx_commit: renameat2(claim) open(read) open(log) write(log): call 3 = the log's open
    t = failn.trial("tx_commit", "errno:EIO", 3, "renameat2", tmp_path / "t")
    assert t["kind"] == "open"
    assert t["lost"] == 0 and t["in_doubt"] == 0, t["note"]


# Regression, found by the stress runs and fixed: recovery.py recover(): for a LIVE owner's
# transaction log it calls read_log(path) on the listing of pending_logs(); the live owner may
# commit/roll back (rename or unlink the log) in between, and FileNotFoundError escapes recover()
# (seen in the kills stress case when recovery ran while a transacted producer was still alive)
def test_regression_recover_races_a_live_owners_commit(tmp_path, monkeypatch):
    from dropboxmq import recovery
    from dropboxmq.connection import Connection
    from dropboxmq.log_lifecycle import LogState
    from dropboxmq.transaction import LogStore

    root = tmp_path / "root"
    with Connection(root, client_id="live", create=True):
        gone = LogStore(root).path(LogState.ASSOCIATED, "live~abc~1")  # listed, then committed by its owner
        monkeypatch.setattr(recovery, "pending_logs", lambda r: iter([("associated", gone)]))
        report = recovery.recover(root)
        assert report.errors == []


# Regression, found by the stress runs and fixed: store.py rename_noreplace link()+unlink()
# fallback + recovery.py: a crash after link(target/x, processing/c~x') and before
# unlink(target/x) leaves ONE message under two names; recovery only de-duplicates
# working/+target/ (_sweep_working), so reclaim REDELIVERs processing/c~x' to target/ under its
# delivery-count name and target/ holds the message twice: delivered twice, both acked
# (Issue 28: without renameat2 a claim is a plain rename() now, never link()+unlink(), so call 1 is
# that rename and a crash can no longer leave two names; the trial still proves nothing is duplicated.)
def test_regression_link_fallback_claim_crash_duplicates_message(tmp_path):
    t = failn.trial("claim", "kill-after", 1, "link", tmp_path / "t")  # call 1 = the claim's rename()
    assert t["kind"] == "rename"
    assert t["duplicated"] == 0 and t["unexplained"] == 0, t["note"]


def test_power_loss_freezes_workers_before_the_shutdown():
    """Issue 6: a power loss stops every process at the same instant.  nemesis.freeze() returns
    only when every thread of every worker is stopped, so nothing runs across the shutdown."""
    import signal
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"])
    try:
        assert nemesis.freeze([child.pid], timeout=10) == []
        assert nemesis._task_states(child.pid) and all(s in "Tt" for s in nemesis._task_states(child.pid))
        time.sleep(0.05)
        assert child.poll() is None  # stopped, not dead
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert nemesis.freeze([child.pid], timeout=1) == []  # gone: nothing to wait for


def test_unreadable_message_whose_dead_letter_fails_goes_back_to_target(tmp_path, monkeypatch):
    """Stress faults case: EIO on the read, then EIO on the rename into error/ left the message
    in processing/ of a consumer that then closed cleanly -- nobody would ever reclaim it."""
    from dropboxmq import store
    from dropboxmq.errors import StoreError
    from dropboxmq.bodies import BytesMessage
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection, Settings

    root, q = tmp_path / "root", Queue("Q")
    with Connection(root, "a", Settings(poll_interval=0.002), create=True) as c:
        c.create_session().create_producer(q).send(BytesMessage(body=b"x"))
        cons = c.create_session().create_consumer(q)
        real_rename = store.rename_noreplace

        def eio(*a, **k):
            raise OSError(errno.EIO, "Input/output error")

        def no_error_dir(src, dst, src_dir_fd=-100, dst_dir_fd=-100, shared=False):  # (by name in a held dir fd)
            where = dst if dst_dir_fd < 0 else os.path.join(os.readlink(f"/proc/self/fd/{dst_dir_fd}"), dst)
            if "/error/" in where:
                raise OSError(errno.EIO, "Input/output error", dst)
            return real_rename(src, dst, src_dir_fd, dst_dir_fd, shared)

        monkeypatch.setattr(store.Dropbox, "read", eio)
        monkeypatch.setattr(store, "rename_noreplace", no_error_dir)
        with pytest.raises(StoreError):
            cons.receive(0.05)
        monkeypatch.undo()
        box = root / "Q" / "incoming"
        assert os.listdir(box / "processing") == [] and len(os.listdir(box / "target")) == 1
        m = cons.receive(1)
        assert m is not None and m.body == b"x"


def _hold_the_flags_locks_and_die(flag, conn) -> None:
    """A consumer killed -9 while it reads the stop flag: every lock the flag has stays held."""
    for lock in (getattr(flag, "_cond", None), getattr(flag, "get_lock", lambda: None)()):
        if lock is not None:
            lock.acquire()
    import time

    conn.send("holding")
    time.sleep(3600)


def test_the_multihost_stop_flag_cannot_be_wedged_by_a_killed_consumer():
    """A CI run hung for good in test_leases: the driver killed consumer c0 -9 while c0 was inside
    its stop Event's is_set(), and the driver's set() then waited on the lock c0 took with it.
    multihost.stop_flag has no lock: setting it returns whatever a killed reader held."""
    import multiprocessing
    import threading

    from dropboxmq_stress import multihost

    ctx = multiprocessing.get_context("fork")
    flag = multihost.stop_flag(ctx)
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_hold_the_flags_locks_and_die, args=(flag, theirs))
    child.start()
    assert ours.recv() == "holding"
    child.kill()
    child.join()
    setter = threading.Thread(target=lambda: setattr(flag, "value", 1), daemon=True)
    setter.start()
    setter.join(30)
    assert not setter.is_alive() and flag.value == 1
