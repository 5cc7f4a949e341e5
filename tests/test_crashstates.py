"""The crash-state explorer (issue 31): its pure core, its recorder, every library operation
under the short profile (no promise broken), and the self-test: deliberately broken variants
of the library, made by monkeypatching it in the recording child, are each reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dropboxmq_stress.crashstates.check import ALLOWED, PROMISES, census, judge
from dropboxmq_stress.crashstates.explore import SHORT_BOUNDS, explore
from dropboxmq_stress.crashstates.model import (MODELS, Baseline, Bounds, Create, Fsync, Mark, Rename, SyncAll, Trace,
                                                Write, crash_states)
from dropboxmq_stress.crashstates.operations import OPERATIONS, Expect, body_of, key_of, ref
from dropboxmq_stress.crashstates.record import ENVIRONMENTS, Recorder, RecordingGap

ROOT, WORK, TARGET = 1, 2, 3


def _trace(*ops) -> Trace:  # type: ignore[no-untyped-def]
    """A root holding working/ and target/."""
    return Trace(Baseline(ROOT, {ROOT: {"working": WORK, "target": TARGET}, WORK: {}, TARGET: {}}, {}), list(ops))


def _send(*, file_fsync: bool = True, dir_fsync: bool = True) -> Trace:
    ops = [Create(WORK, "m", 10, False), Write(10, 0, b"hello")]
    if file_fsync:
        ops.append(Fsync(10))
    ops.append(Rename(WORK, "m", TARGET, "m", 10))
    if dir_fsync:
        ops.append(Fsync(TARGET))
    ops.append(Mark("sent", ("m",)))
    return _trace(*ops)


def _after_return(trace: Trace, model: str = "abstract") -> list[dict[str, bytes | None]]:
    return [s.tree for s in crash_states(trace, MODELS[model]) if s.marks]


# ---------------------------------------------------------------- the model


def test_a_synced_send_leaves_one_state_after_it_returns() -> None:
    assert _after_return(_send()) == [{"working": None, "target": None, "target/m": b"hello"}]


def test_a_rename_not_followed_by_an_fsync_of_its_directory_may_be_lost() -> None:
    trees = _after_return(_send(dir_fsync=False))
    assert {"working": None, "target": None, "working/m": b"hello"} in trees
    assert {"working": None, "target": None, "target/m": b"hello"} in trees


def test_unsynced_data_may_persist_torn_empty_or_as_zeros_behind_a_synced_rename() -> None:
    contents = {t.get("target/m") for t in _after_return(_send(file_fsync=False))}
    assert contents == {b"hello", b"", b"he", b"\0" * 5}


def test_fsync_of_a_file_orders_its_name_only_in_the_journaled_model() -> None:
    trace = _trace(Create(WORK, "m", 10, False), Write(10, 0, b"x"), Fsync(10), Mark("synced"))
    abstract = _after_return(trace, "abstract")
    journaled = _after_return(trace, "journaled")
    assert {"working": None, "target": None} in abstract  # the name was never made durable
    assert journaled == [{"working": None, "target": None, "working/m": b"x"}]


def test_ops_on_one_name_persist_in_order_and_syncall_orders_everything() -> None:
    trace = _trace(Create(WORK, "m", 10, False), Rename(WORK, "m", TARGET, "n", 10), SyncAll(), Mark("synced"))
    trees = [s.tree for s in crash_states(trace)]
    # never the rename without the create it renames (the same entry); after SyncAll, only everything
    assert all(("target/n" in t) <= ("working/m" not in t) for t in trees)
    assert {"working": None, "target": None} in trees
    assert _after_return(trace) == [{"working": None, "target": None, "target/n": b""}]


def test_journaled_metadata_persists_as_a_prefix() -> None:
    trace = _trace(Create(WORK, "a", 10, False), Create(TARGET, "b", 11, False))
    abstract = {frozenset(s.tree) for s in crash_states(trace, MODELS["abstract"])}
    journaled = {frozenset(s.tree) for s in crash_states(trace, MODELS["journaled"])}
    only_b = frozenset({"working", "target", "target/b"})
    assert only_b in abstract and only_b not in journaled


def test_many_unsynced_renames_are_bounded_by_few_kept_or_dropped() -> None:
    ops = []
    for i in range(12):
        ops += [Create(WORK, f"m{i}", 10 + i, False), Fsync(WORK)]
    ops += [Rename(WORK, f"m{i}", TARGET, f"m{i}", 10 + i) for i in range(12)]
    ops.append(Mark("returned"))
    states = [s for s in crash_states(_trace(*ops), bounds=Bounds(full_subsets=4, few=1, full_data=4)) if s.marks]
    # kept none, kept one (12), dropped one (12), kept all
    assert len(states) == 1 + 12 + 12 + 1


# ---------------------------------------------------------------- the judge


def test_key_of_knows_a_whole_body_only() -> None:
    assert key_of(body_of("m7")) == "m7"
    assert key_of(body_of("m7")[:-1]) is None and key_of(b"") is None


def test_judge_reports_an_acknowledged_send_lost_and_a_message_in_two_states() -> None:
    box = "q/incoming"
    dirs = {f"{box}/{s}": None for s in ("working", "target", "processing", "processed", "expired", "error")}
    initial = census(dict(dirs))
    lost = judge(initial, census(dict(dirs)), (Mark("sent", (ref(box, "m0"),)),), Expect())
    assert [v.rule for v in lost] == ["acknowledged-send-lost"]
    twice = {**dirs, f"{box}/target/a": body_of("m0"), f"{box}/processed/a": body_of("m0")}
    assert {v.rule for v in judge(initial, census(twice), (), Expect())} == {"two-states"}
    assert set(PROMISES).isdisjoint(ALLOWED)


# ---------------------------------------------------------------- the recorder


def test_recorder_sees_renameat2_syncfs_and_file_objects_and_rebuilds_the_tree(tmp_path: Path) -> None:
    from dropboxmq.groupsync import sync_file_system
    from dropboxmq.store import rename_noreplace

    (tmp_path / "a").mkdir()
    with Recorder(tmp_path, ENVIRONMENTS["quiet"]) as rec:
        with open(tmp_path / "a" / "f", "w") as f:
            f.write("data")
        rename_noreplace(str(tmp_path / "a" / "f"), str(tmp_path / "g"))
        sync_file_system(tmp_path)
    kinds = [type(op).__name__ for op in rec.trace.ops]
    assert kinds == ["Create", "Write", "Rename", "SyncAll"]  # the file object's write read back before syncfs
    assert "renameat2" in rec.trace.ops[2].call


def test_recorder_refuses_a_trace_that_misses_a_call(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(RecordingGap):
            with Recorder(tmp_path):
                os.pwrite(fd, b"unseen", 0)  # not a call the recorder wraps: the gap check must say so
    finally:
        os.close(fd)


# ---------------------------------------------------------------- every operation, short profile


# "busy" (each file fsynced on its own) orders less than "quiet" (one syncfs a batch): every
# operation there, and the batches once more with syncfs; make stress runs all, deeper.
SHORT_PROFILE = [(op, "busy") for op in sorted(OPERATIONS)] + [
    ("send_many", "quiet"), ("commit-producer", "quiet"),
    ("ack-client", "no-renameat2"),  # regression: the fallback's unlink was not synced (D5)
]


@pytest.mark.parametrize("op, env", SHORT_PROFILE)
def test_no_crash_state_breaks_a_promise(op: str, env: str) -> None:
    """Regression for the explorer's findings: before the fixes of issue 31, send / send_many /
    commit-producer (new directories not durable), commit-producer / commit-consumer /
    distribute in "busy" (the commit point reached before the working/ names and the claims
    were durable) and subscribe (not durable, and its .new-* left forever) broke promises."""
    report = explore(OPERATIONS[op], env, bounds=SHORT_BOUNDS)
    assert report.states > 0 and report.recorded > 0
    assert report.violations == {}, [f"{f.rule}: {f.detail}\n" + "\n".join(f.calls) for f in report.findings]


def test_weaker_promises_are_really_used() -> None:
    """DUPS_OK's undone acknowledgements and unflagged redeliveries after a power loss are
    allowed (D2, D7) because they happen: the explorer finds them."""
    report = explore(OPERATIONS["ack-dups-ok"], "quiet", bounds=SHORT_BOUNDS)
    assert report.allowed.get("lazy-ack-undone", 0) > 0 and report.allowed.get("delivered-unflagged", 0) > 0
    unsynced = explore(OPERATIONS["send-non-persistent"], "quiet", bounds=SHORT_BOUNDS)
    assert unsynced.allowed.get("non-persistent-lost", 0) > 0 and unsynced.allowed.get("non-persistent-torn", 0) > 0


def test_recovery_sweeps_what_a_crash_left_of_a_subscription_creation_or_removal(tmp_path: Path) -> None:
    """Regression (issue 31): a crash between the mkdir of .new-<uuid> and its rename, or between
    a removal's rename to .deleted-<uuid> and its rmtree, left a directory nothing removed."""
    from dropboxmq.recovery import recover

    subs = tmp_path / "topic-root" / "t" / ".subscriptions"
    for name in (".new-crashed", ".new-still-being-made", ".deleted-cut-short", "s1.client"):
        (subs / name / "target").mkdir(parents=True)
    os.utime(subs / ".new-crashed", (0, 0))
    report = recover(tmp_path, orphan_age=3600)
    assert sorted(p.name for p in subs.iterdir()) == [".new-still-being-made", "s1.client"]
    assert report.unfinished_removed == 2


# ---------------------------------------------------------------- the self-test: broken variants


def _send_returns_before_target_is_fsynced() -> None:
    import dropboxmq.producer as producer

    producer.sync_many = lambda boxes: None  # type: ignore[assignment]


def _commit_log_unlinked_before_its_moves_are_durable() -> None:
    import dropboxmq.transaction as transaction

    def roll_forward(root, entries, durable, held=False):  # type: ignore[no-untyped-def]
        transaction.apply_moves(root, entries, commit=True, held=held)  # and no sync of the touched directories

    transaction.roll_forward = roll_forward  # type: ignore[assignment]


def _ack_rename_not_fsynced() -> None:
    import dropboxmq.session as session

    session.sync_many = lambda boxes: None  # type: ignore[assignment]


@pytest.mark.parametrize("op, patch, rules", [
    ("send", _send_returns_before_target_is_fsynced, {"acknowledged-send-lost"}),
    ("commit-producer", _commit_log_unlinked_before_its_moves_are_durable,
     {"commit-not-atomic", "acknowledged-send-lost"}),
    ("ack-client", _ack_rename_not_fsynced, {"acknowledged-came-back"}),
    ("ack-auto", _ack_rename_not_fsynced, {"acknowledged-came-back"}),
])
def test_a_broken_variant_is_reported(op: str, patch, rules: set[str]) -> None:  # type: ignore[no-untyped-def]
    report = explore(OPERATIONS[op], "busy", bounds=SHORT_BOUNDS, setup_patch=patch, stop_at_first=True)
    assert set(report.violations) & rules, report.violations
    finding = next(f for f in report.findings if f.rule in rules)
    assert any("LOST" in line for line in finding.calls)  # the state is shown with what did not persist


# ---------------------------------------------------------------- the command line


def test_cli_json_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "dropboxmq_stress.crashstates", "--short", "--op", "ack-auto",
                          "--env", "busy", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(out.read_text())
    (report,) = doc["reports"]
    assert report["operation"] == "ack-auto" and report["states"] > 0 and report["violations"] == {}
    assert "1 recordings" in run.stdout
    helped = subprocess.run([sys.executable, "-m", "dropboxmq_stress.crashstates", "--help"],
                            capture_output=True, text=True, timeout=300)
    assert "--deep" in helped.stdout and "--op" in helped.stdout and "--json" in helped.stdout


def test_the_commit_point_comes_after_every_name_roll_forward_needs_is_durable() -> None:
    """Regression (issue 31, "busy": each file fsynced on its own): the log reached committing/
    while the working/ names of its sends and the processing/ names of its receives were not
    durable, so a power loss could leave a committed transaction that roll-forward cannot
    finish.  Now their directories are fsynced (or one syncfs) before the log is renamed."""
    from dropboxmq_stress.crashstates.explore import record
    from dropboxmq_stress.crashstates.operations import DEEP_SCALE

    trace, _, _ = record(OPERATIONS["commit-consumer"], ENVIRONMENTS["busy"], DEEP_SCALE)  # receives and a send
    calls = [op.call for op in trace.ops]
    commit_point = next(i for i, c in enumerate(calls) if c.startswith("rename(") and "/committing/" in c)
    synced_before = [c for c in calls[:commit_point] if c.startswith("fsync(")]
    assert "fsync(q/incoming/processing)" in synced_before and "fsync(out/incoming/working)" in synced_before


def test_recovery_finishes_a_rollback_cut_between_link_and_unlink(tmp_path: Path) -> None:
    """Regression (issue 31, the link()+unlink() fallback): a recovery killed between the link
    and the unlink of a REDELIVER left the file in processing/ and target/; the next recovery
    raised StoreError ("already exists") out of recover() and never finished.  Now the old name
    is dropped and the transaction finished."""
    from dropboxmq import layout
    from dropboxmq.lifecycle import State
    from dropboxmq.message import Queue
    from dropboxmq.recovery import recover
    from dropboxmq.connection import Connection
    from dropboxmq.layout import transaction_dir

    with Connection(tmp_path, client_id="seeder", create=True) as conn:
        session = conn.create_session()
        session.create_producer(Queue("q")).send(session.create_bytes_message(b"x"))
    box = layout.queue_box(tmp_path, Queue("q"))
    (name,) = box.list(State.NEW)
    claimed = f"dead~{name}"
    os.rename(box.file(State.NEW, name), box.file(State.DELIVERED, claimed))
    os.link(box.file(State.DELIVERED, claimed), box.file(State.NEW, name))  # the REDELIVER's link, no unlink
    log = transaction_dir(tmp_path) / "associated" / "dead~s~1"
    log.write_text(json.dumps({"kind": "receive", "box": "q/incoming", "name": claimed}) + "\n")
    report = recover(tmp_path, assume_unknown_dead=True)
    assert report.errors == [] and report.transactions == {"rolled back": 1}
    assert box.list(State.DELIVERED) == [] and box.list(State.NEW) == [name]
    assert os.stat(box.file(State.NEW, name)).st_nlink == 1
