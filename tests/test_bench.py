"""``make bench`` smoke test: a --quick run with very few messages writes every figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

from dropboxmq.stress import bench

EXPECTED = {
    "floor.nosync.send", "floor.nosync.receive", "floor.nosync.cycle",
    "floor.fsync.send", "floor.fsync.receive", "floor.fsync.cycle", "floor.group100.send",
    "ref.persistent.send", "ref.persistent.receive", "ref.persistent.cycle",
    "ref.nonpersistent.send", "ref.nonpersistent.receive", "ref.nonpersistent.cycle",
    "ref.persistent.send_many100", "ref.persistent.transacted100",
}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_quick_bench_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results" / "bench.json"
    before = set(bench.RESULTS_DIR.glob("*.json")) if bench.RESULTS_DIR.exists() else set()
    result = CliRunner().invoke(bench.main, ["--quick", "--messages", "100", "--budget", "0.05",
                                             "--dir", str(tmp_path / "work"), "--json", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["figures"]) == EXPECTED
    for key, fig in data["figures"].items():
        for field in ("messages", "seconds", "msg_per_s"):
            assert _positive(fig[field]), (key, field, fig[field])
    # every reference figure has its floor ratio, and the summary ratios are there too
    for key in bench.FLOOR_OF:
        assert _positive(data["ratios"][f"{key}/floor"]["ratio"]), key
    for key, *_ in bench.RATIOS:
        assert _positive(data["ratios"][key]["ratio"]), key
    assert "ref / floor" in result.stdout and "non-persistent full cycle" in result.stdout
    # the temporary root is gone, and --json did not also write into stress/results/
    assert list((tmp_path / "work").iterdir()) == []
    assert (set(bench.RESULTS_DIR.glob("*.json")) if bench.RESULTS_DIR.exists() else set()) == before
