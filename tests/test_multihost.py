"""Several hosts, one dropbox (issue 28): ``dropboxmq doctor`` and the store's use of its verdict.

Real network file systems run on loopback (:mod:`dropboxmq_stress.netfs`): two client mounts
of one export play two hosts; each test starts and stops its own daemons and is skipped,
with the reason, only where FUSE, root or a Debian package is missing (``make system-deps``).
The verdict logic is a pure function, tested here without any file system.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dropboxmq import Connection, Queue, doctor, filesystems
from dropboxmq.filesystems import UnsupportedFileSystemError
from dropboxmq_stress import netfs

pytestmark = pytest.mark.multihost

DMQ = [sys.executable, "-m", "dropboxmq.cli"]
TRIALS = "100"   # the broken properties show in the first round (smbnetfs: O_EXCL ~60 %, link always EPERM)

# ---------------------------------------------------------------- the verdict, pure

CLEAN = doctor.Probes(fs_type="fuse.mfs", other_fs_type="fuse.mfs", two_mounts=True, rename_trials=100,
                      rename_loser={"ENOENT": 100}, noreplace="EINVAL", link_trials=100, link_loser={"EEXIST": 100},
                      excl_trials=100, excl_loser={"EEXIST": 100}, flock_across=True, fcntl_across=True,
                      visibility_max_s=0.01, visibility_timeout_s=30, mtime_subsecond=False)


def test_all_properties_hold_is_supported_with_notes_for_differences():
    v = doctor.judge(CLEAN)
    assert (v.level, v.reasons, doctor.EXIT_CODES[v.level]) == (filesystems.SUPPORTED, (), 0)
    assert any("EINVAL" in n for n in v.notes) and any("whole-second" in n for n in v.notes)


def test_local_file_system_probed_through_one_mount_is_supported():
    p = replace(CLEAN, fs_type="ext4", other_fs_type=None, two_mounts=False, noreplace="works")
    assert doctor.judge(p).level == filesystems.SUPPORTED


def test_network_file_system_probed_through_one_mount_needs_leases():
    v = doctor.judge(replace(CLEAN, two_mounts=False, other_fs_type=None))
    assert v.level == filesystems.SUPPORTED_WITH_LEASES and "--other" in v.reasons[0]


def test_locks_not_crossing_mounts_need_leases():
    v = doctor.judge(replace(CLEAN, flock_across=False, fcntl_across=False,
                             link_loser={"EEXIST": 60, "EPERM": 40}))
    assert v.level == filesystems.SUPPORTED_WITH_LEASES and doctor.EXIT_CODES[v.level] == 3
    assert "flock does not exclude across mounts" in v.reasons[0]
    assert any("EPERM 40" in n for n in v.notes)


@pytest.mark.parametrize("broken, words", [
    ({"rename_both": 3}, "rename is not exclusive: both renames of one file succeeded in 3/100"),
    ({"rename_lost": 1}, "rename lost files"),
    ({"excl_both": 58}, "O_CREAT|O_EXCL is not exclusive: both creates succeeded in 58/100"),
    ({"link_both": 1}, "link() is not exclusive"),
    ({"link_none": 100, "link_loser": {"EPERM": 100}}, "no no-replace primitive"),
    ({"noreplace": "replaced"}, "replaced an existing file"),
    ({"visibility_max_s": None}, "did not appear in the other's listing within 30 s"),
    ({"visibility_max_s": 20.0}, "took 20.0 s to appear"),
    ({"fsync_file": "EIO"}, "fsync of a file fails (EIO)"),
])
def test_a_broken_property_is_unsafe_and_says_which(broken, words):
    v = doctor.judge(replace(CLEAN, flock_across=False, **broken))
    assert v.level == filesystems.UNSAFE and doctor.EXIT_CODES[v.level] == 4
    assert words in v.reasons[0], v.reasons   # the unsafe reason comes before the lease need


def test_gluster_phantom_eexist_and_client_clock_are_notes_not_failures():
    v = doctor.judge(replace(CLEAN, excl_phantom=3, mtime_offset_s=5.0, mtime_subsecond=True))
    assert v.level == filesystems.SUPPORTED
    assert any("does not prove the file exists" in n for n in v.notes)
    assert any("5.0 s away" in n for n in v.notes)


# ---------------------------------------------------------------- the store and the record


def _doctor(root: Path, other: Path | None = None) -> tuple[int, dict]:
    cmd = DMQ + ["doctor", str(root), "--trials", TRIALS, "--json"] + (["--other", str(other)] if other else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_doctor_on_a_local_disk_says_supported_and_records_it(tmp_path):
    code, out = _doctor(tmp_path)
    assert (code, out["verdict"]) == (0, "supported"), out
    assert out["probes"]["rename_both"] == 0 and out["probes"]["noreplace"] == "works"
    assert filesystems.verdict_for(tmp_path) == filesystems.Verdict("supported", (), tuple(out["notes"]))
    assert [p.name for p in tmp_path.iterdir()] == [filesystems.RECORD]   # the scratch directory is gone


def test_doctor_on_tmpfs_says_supported(tmp_path):
    shm = Path("/dev/shm")
    if doctor.mount_type(shm) != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as d:
        code, out = _doctor(Path(d))
        assert (code, out["verdict"], out["probes"]["fs_type"]) == (0, "supported", "tmpfs"), out


def test_an_unsafe_record_is_refused_with_its_reason_even_when_forced(root):
    p = replace(CLEAN, fs_type=doctor.mount_type(root), excl_both=5)
    doctor.record(root, p, doctor.judge(p))
    for force in (False, True):
        with pytest.raises(UnsupportedFileSystemError,
                           match="judged unsafe by dropboxmq doctor: O_CREAT.O_EXCL is not exclusive"):
            Connection(root, "a", create=True, allow_network_fs=force)


def test_a_record_for_another_file_system_type_is_ignored(root):
    p = replace(CLEAN, fs_type="fuse.smbnetfs", excl_both=5)
    doctor.record(root, p, doctor.judge(p))
    assert filesystems.verdict_for(root) is None
    with Connection(root, "a", create=True):
        pass


def test_doctor_usage_errors_are_one_line(tmp_path):
    r = subprocess.run(DMQ + ["doctor", str(tmp_path / "missing")], capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = subprocess.run(DMQ + ["doctor", "--help"], capture_output=True, text=True)
    assert "supported with leases" in r.stdout and "Exit status" in r.stdout


# ---------------------------------------------------------------- real network file systems


def _netfs(kind: str):
    why = netfs.unavailable(kind)
    if why:
        pytest.skip(f"{kind}: {why}")
    return netfs.start(kind)


def _send(root: Path) -> None:
    with Connection(root, "p") as c:
        c.create_session().create_producer().send(Queue("q"), "hello")


def _init(root: Path) -> None:
    with Connection(root, "init", create=True, allow_network_fs=True) as c:
        c.create_session().create_producer().send(Queue("q"), "first")


def test_moosefs_is_recognised_then_qualified_by_doctor(tmp_path):
    with _netfs("moosefs") as fs:
        a, b = fs.mounts
        assert doctor.mount_type(a) == "fuse.mfs"          # plain "fuse" to the kernel
        _init(a)
        with pytest.raises(UnsupportedFileSystemError, match=r"network file system \(fuse.mfs\)"):
            _send(b)                                         # no longer accepted unknowingly
        code, out = _doctor(a, b)
        assert (code, out["verdict"]) == (0, "supported"), out
        assert out["probes"]["flock_across"] is True and out["probes"]["noreplace"] == "EINVAL"
        _send(b)                                             # qualified: no force flag needed


def test_sshfs_is_supported_with_leases_because_locks_do_not_cross(tmp_path):
    with _netfs("sshfs") as fs:
        a, b = fs.mounts
        _init(a)
        code, out = _doctor(a, b)
        assert (code, out["verdict"]) == (3, "supported with leases"), out
        assert out["probes"]["flock_across"] is False and out["probes"]["rename_both"] == 0
        _send(b)


def test_smbnetfs_is_unsafe_and_refused(tmp_path):
    with _netfs("smbnetfs") as fs:
        a, b = fs.mounts
        code, out = _doctor(a, b)
        assert (code, out["verdict"]) == (4, "unsafe"), out
        assert out["probes"]["excl_both"] > 0 or out["probes"]["rename_both"] > 0
        with pytest.raises(UnsupportedFileSystemError, match="judged unsafe by dropboxmq doctor"):
            Connection(b, "p", create=True, allow_network_fs=True)


def test_glusterfs_is_supported(tmp_path):
    with _netfs("glusterfs") as fs:
        a, b = fs.mounts
        code, out = _doctor(a, b)
        assert (code, out["verdict"]) == (0, "supported"), out
        assert out["probes"]["flock_across"] is True and out["probes"]["excl_both"] == 0


def _gone_within(pid: int, seconds: float) -> bool:
    """SIGKILL is delivered asynchronously: the process may still be running (state R) for a
    moment after kill() returned (CI flake); gone or a zombie within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


def test_sshfs_network_cut_heals_and_server_kill_restarts(tmp_path):
    """The fault helpers the stress case relies on do what they say."""
    with _netfs("sshfs") as fs:
        a, b = fs.mounts
        (a / "before").write_text("x")
        killed = fs.cut(0)
        assert _gone_within(killed, 30), f"ssh client {killed} still running after SIGKILL"
        # reconnect: the first operation after the cut may fail (EIO); the mount then works again
        for _ in range(3):
            try:
                (a / "after").write_text("y")
                break
            except OSError:
                continue
        assert (b / "after").read_text() == "y"


# ---------------------------------------------------------------- the stress case's count, pure


def _h(t, p, type_, f, value, **extra):
    return {"t": t, "p": p, "type": type_, "f": f, "value": value, **extra}


def _processed(*values):
    return {"processed": [{"value": v} for v in values]}


def test_count_of_a_clean_history_with_a_flagged_redelivery():
    from dropboxmq_stress.multihost import count

    hist = [_h(1, "p0", "ok", "send", "p0-0"), _h(1, "p0", "ok", "send", "p0-1"),
            _h(2, "c0", "ok", "receive", "p0-0", redelivered=False), _h(3, "c0", "ok", "receive", "p0-1",
                                                                           redelivered=False),
            _h(4, "c2", "ok", "receive", "p0-1", redelivered=True),   # c0 was killed before acking it
            _h(5, "c2", "ok", "ack", ["p0-1"]), _h(2.5, "c0", "ok", "ack", ["p0-0"])]
    # p0-2: c0's acknowledgement moved it to processed/, then c0 died before recording it
    hist += [_h(1, "p0", "ok", "send", "p0-2"), _h(3.2, "c0", "ok", "receive", "p0-2", redelivered=False)]
    c = count(hist, _processed("p0-0", "p0-1", "p0-2"), killed="c0", t_kill=3.5)
    assert (c["lost_count"], c["acknowledged_unrecorded"]) == (0, 1)
    assert (c["duplicated_redelivered"], c["duplicated_not_flagged"]) == (1, 0)
    assert (c["acknowledged_then_delivered_again"], c["double_acknowledgements"]) == (0, 0)
    assert c["recovery_time_s"] == 0.5 and c["processed_more_than_once"] == 0


def test_count_finds_what_the_issue_reports_on_moosefs():
    """An acknowledged message delivered again (redelivered, count 2), acknowledged twice, its stale
    link left in processing/, one message lost, one duplicate without the flag."""
    from dropboxmq_stress.multihost import count

    hist = [_h(1, "p0", "ok", "send", v) for v in ("a", "b", "c")] + [
        _h(2, "c0", "ok", "receive", "a", redelivered=False), _h(3, "c0", "ok", "ack", ["a"]),
        _h(4, "c2", "ok", "receive", "a", redelivered=True), _h(5, "c2", "ok", "ack", ["a"]),
        _h(2, "c1", "ok", "receive", "b", redelivered=False), _h(2.1, "c3", "ok", "receive", "b", redelivered=False),
        _h(3, "c1", "ok", "ack", ["b"]), _h(3, "c3", "fail", "ack", ["b"], error="AcknowledgeError: taken")]
    final = {"processed": [{"value": "a"}, {"value": "a"}, {"value": "b"}], "processing": [{"value": "a"}]}
    c = count(hist, final, killed=None, t_kill=None)
    assert c["lost"] == ["c"] and c["lost_count"] == 1
    assert (c["duplicated_redelivered"], c["duplicated_not_flagged"]) == (1, 1)
    assert (c["acknowledged_then_delivered_again"], c["double_acknowledgements"], c["acknowledge_errors"]) == (1, 1, 1)
    assert c["left"]["processing"] == 1 and c["processed_more_than_once"] == 1


def test_stress_case_on_moosefs_loses_nothing_across_a_kill_and_recovery_from_the_other_host():
    """The stress case end to end, short: c0 killed -9 on host A, recovery from host B, every sent
    message acknowledged or in processed/, nothing waiting in target/.  (Duplicates of acknowledged
    messages are still expected today, issue 28: `make stress` runs the full case and fails on them.)"""
    from dropboxmq_stress.multihost import run

    if netfs.unavailable("moosefs"):
        pytest.skip(f"moosefs: {netfs.unavailable('moosefs')}")
    r = run("moosefs", messages=40, kill=True, idle=30)
    c = r["counts"]
    assert c["sent"] == 80 and c["lost_count"] == 0, c
    assert c["sent_missing_from_processed"] == 0 and c["left"]["target"] == 0, c
    assert c["duplicated_not_flagged"] == 0 and c["unknown_values_delivered"] == 0, c
    assert any(e["what"].startswith("kill -9 c0") for e in r["events"])


def test_a_hostile_record_is_ignored_not_waited_on(root):
    """A FIFO, a directory or garbage under the record's name: no verdict, and nothing blocks."""
    import os

    rec = root / filesystems.RECORD
    os.mkfifo(rec)
    assert filesystems.verdict_for(root) is None
    rec.unlink()
    rec.mkdir()
    assert filesystems.verdict_for(root) is None
    rec.rmdir()
    rec.write_text("{not json")
    assert filesystems.verdict_for(root) is None
    with Connection(root, "a", create=True):
        pass


def test_a_record_over_its_bound_is_ignored_not_read_whole(root):
    """A verdict is a few hundred bytes: a record past 1 MiB (a hostile root's huge file) is read
    no further than the bound at each connect, and does not count as a verdict."""
    import json

    verdict = {"fs_type": filesystems.file_system_type(root), "level": filesystems.UNSAFE,
               "reasons": ["planted"], "notes": []}
    rec = root / filesystems.RECORD
    rec.write_text(json.dumps(verdict))
    assert filesystems.verdict_for(root) is not None  # (the record itself is valid)
    rec.write_text(json.dumps({**verdict, "notes": ["x" * (1 << 20)]}))  # valid JSON, past the bound
    assert filesystems.verdict_for(root) is None
