"""make bench's network-file-system part (issue 28): its rates, its table, and one phase run on a
local temporary directory (no daemons; the network file systems themselves are `make bench-netfs`)."""

from __future__ import annotations

from pathlib import Path

from dropboxmq_stress import netfs_bench as nb


def _rec(t: float, type_: str, f: str, value: object = None, p: str = "p0") -> dict:
    return {"t": t, "p": p, "type": type_, "f": f, "value": value}


def test_send_rate_spans_from_the_first_send_started_to_the_last_returned() -> None:
    # 4 sends, the first starting at t=0 and returning at 1: 4 messages in 4 s, not 4 in the 3 s between returns
    hist = [_rec(0.0, "invoke", "send", "p0-0"), _rec(1.0, "ok", "send", "p0-0")]
    for i, t in enumerate((2.0, 3.0, 4.0), start=1):
        hist += [_rec(t - 0.5, "invoke", "send", f"p0-{i}"), _rec(t, "ok", "send", f"p0-{i}")]
    assert nb.send_rate(hist) == 1.0
    assert nb.sent(hist) == 4


def test_receive_ack_rate_counts_acknowledged_values_once_and_ignores_failed_acks() -> None:
    hist = [_rec(10.0, "ok", "receive", "a", p="c0"), _rec(10.5, "ok", "ack", ["a"], p="c0"),
            _rec(11.0, "ok", "receive", "b", p="c0"), _rec(11.5, "fail", "ack", ["b"], p="c0"),
            _rec(12.0, "ok", "receive", "b", p="c0"), _rec(12.5, "ok", "ack", ["b"], p="c0"),
            _rec(13.0, "ok", "ack", ["b"], p="c0")]   # a double acknowledgement is not a second message
    assert nb.acknowledged(hist) == 2
    assert nb.receive_ack_rate(hist) == round(2 / 3.0, 1)
    assert nb.receive_ack_rate([_rec(1.0, "ok", "receive", "a")]) is None   # nothing acknowledged: no rate


def test_the_table_marks_skipped_incomplete_and_unrecovered_file_systems() -> None:
    full = {"fs": "moosefs", "send_per_s": {"host_a": 109.4, "host_b": 12.34, "aggregate": None},
            "receive_ack_per_s": {"host_a": 1234.5, "host_b": 99.96, "aggregate": 300.0},
            "acknowledged": {"host_a": 5, "host_b": 5, "aggregate": 10},
            "expected": {"host_a": 5, "host_b": 5, "aggregate": 10},
            "recovery": {"recovery_time_s": 0.4149, "in_flight_at_kill": 3}}
    short = {**full, "fs": "glusterfs", "acknowledged": {"host_a": 5, "host_b": 4, "aggregate": 10},
             "recovery": {"recovery_time_s": None, "in_flight_at_kill": 0, "note": "c0 held nothing"}}
    rows = nb.table([full, short, {"fs": "sshfs", "skipped": "not root"}]).splitlines()
    assert rows[2] == "| moosefs | 109 | 12.3 | n/a | 1,234 | 100.0 | 300 | 0.41 s (3 held) |"
    assert rows[3].startswith("| glusterfs (incomplete: host_b) |") and rows[3].endswith("| c0 held nothing |")
    assert rows[4].startswith("| sshfs | skipped: not root |")
    assert all(r.count("|") == rows[0].count("|") for r in rows)   # every row has every column


def test_a_local_run_sends_and_acknowledges_every_message_in_each_phase() -> None:
    r = nb.bench_fs("local", messages=15, recovery=False, phase_seconds=60.0)
    assert r["expected"] == {"host_a": 15, "host_b": 15, "aggregate": 30}
    assert r["sent"] == r["expected"] and r["acknowledged"] == r["expected"]
    assert all(v is not None and v > 0 for v in (*r["send_per_s"].values(), *r["receive_ack_per_s"].values()))


def test_a_file_system_that_cannot_start_is_skipped_with_its_reason() -> None:
    r = nb.bench_fs("no-such-fs")
    assert r == {"fs": "no-such-fs", "skipped": "unknown network file system 'no-such-fs' "
                 "(one of moosefs, glusterfs, sshfs, smbnetfs)"}


def test_a_consumer_killed_on_host_a_has_its_messages_received_on_host_b(tmp_path: Path) -> None:
    with nb.started("local") as fs:
        r = nb.recover_after_kill(nb.on(fs, "recovery"), 30, str(tmp_path), 60.0, hold=5)
    assert r["acknowledged"] == 30 and r["in_flight_at_kill"] >= 5
    assert r["recovery_time_s"] is not None and r["duplicated_not_flagged"] == 0
