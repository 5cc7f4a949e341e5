"""``make bench`` smoke test: a --quick run with very few messages writes every figure.

No timing assertions: only that every figure the run can make is there and positive,
and that every ratio (and issue-6 target) whose figures exist is computed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from dropboxmq_stress import bench

BASE = {
    "floor.nosync.send", "floor.nosync.receive", "floor.nosync.cycle",
    "floor.fsync.send", "floor.fsync.receive", "floor.fsync.cycle", "floor.group100.send", "floor.syncfs100.send",
    "floor.fsyncfile.send",
    "ref.persistent.send", "ref.persistent.receive", "ref.persistent.cycle",
    "ref.nonpersistent.send", "ref.nonpersistent.receive", "ref.nonpersistent.cycle",
    "ref.persistent.send_many100", "ref.persistent.transacted100",
    "ref.backlog.300.consume", "ref.backlog.1k.consume",
} | {f"ref.consumers.{k}.consume" for k in bench.CONSUMER_COUNTS}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_quick_bench_writes_every_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "results" / "bench.json"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(bench.main, ["--quick", "--messages", "100", "--budget", "0.05",
                                             "--backlogs", "300,1000", "--sample", "60", "--mc-messages", "60",
                                             "--dir", str(tmp_path / "work"), "--json", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())

    expected = set(BASE)
    if data["floor_impl"].startswith("C"):
        expected |= {"osfloor.nosync.send", "osfloor.nosync.receive", "osfloor.nosync.cycle"}
        expected |= {f"floor.consumers.{k}.consume" for k in bench.CONSUMER_COUNTS}
    for peer in bench.PEERS:
        assert peer.key in data["peers"] and data["peers"][peer.key]["durability"]
        if data["peers"][peer.key]["installed"]:
            expected |= {f"{peer.key}.send", f"{peer.key}.receive", f"{peer.key}.cycle"}
    assert set(data["figures"]) == expected
    for key, fig in data["figures"].items():
        for field in ("messages", "seconds", "msg_per_s", "us_per_msg"):
            assert _positive(fig[field]), (key, field, fig[field])
        assert fig["rounds"] and all(_positive(r) for r in fig["rounds"]), key

    # every figure with a floor has its floor ratio; every summary ratio whose figures exist is there
    for key, floor_key in bench.FLOOR_OF.items():
        if key in expected and floor_key in expected:
            assert _positive(data["ratios"][f"{key}/floor"]["ratio"]), key
    for key, num, den, _desc, goal, _sense in bench.RATIOS:
        if num.startswith("@") or (num in expected and den in expected):
            entry = data["ratios"][key]
            assert _positive(entry["ratio"]), key
            if goal is not None:
                assert isinstance(entry["met"], bool), key
    for size in ("300", "1k"):
        rounds = data["backlog"][size]["rounds"]
        assert rounds and all(_positive(r["claim_read_ack_us"]) for r in rounds)
    # the memory target of the largest backlog: a fresh consumer process's peak, in MB, judged
    rss = data["ratios"]["memory_backlog_rss"]
    assert rss["unit"] == "MB" and 5 < rss["ratio"] < rss["goal"] and rss["met"] is True, rss
    assert "1k backlog" in rss["description"]

    assert "non-persistent full cycle" in result.stdout.replace("\n", " ") or "dropboxmq" in result.stdout
    assert "targets" in result.stdout and ("hit" in result.stdout or "miss" in result.stdout)
    # the temporary root is gone, and --json did not also write a default file into the cwd
    assert list((tmp_path / "work").iterdir()) == []
    assert list(cwd.iterdir()) == []
