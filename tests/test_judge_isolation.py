"""A failure while judging one implementation changes no other implementation's verdict, and the
model accepts every move PROTOCOL.md allows (bare claims, 1.2's publisher record copy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dropboxmq_spec import tlc_traces
from dropboxmq_conformance import checks as C
from dropboxmq_conformance import manifest as M
from dropboxmq_conformance import replay as R
from dropboxmq_conformance import runner

DOCS = M.impls_dir() / "docs"
SHELL = M.impls_dir() / "shell"
ONLY = {"consumer.delivers-all", "model.replay", "model.tlc"}
TRACES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dropboxmq12-traces"


def _status(summary: runner.RunSummary) -> dict[str, dict[str, str]]:
    return {rep.name: {r.check: r.status for r in rep.results if r.check in ONLY} for rep in summary.reports}


def test_a_tlc_crash_on_one_implementation_leaves_the_others_verdicts_unchanged(tmp_path, monkeypatch):
    """TLC throws on every trace of docs-minimal (as it once did on bare claims); the shell
    consumer, judged in the same run, keeps the verdict it gets when judged alone."""
    seen: list[list[str]] = []

    def tlc(paths, **kw):
        paths = [str(p) for p in paths]
        seen.append(paths)
        if any("/docs-minimal/" in p for p in paths):
            raise RuntimeError("TLC threw an unexpected exception")
        return [tlc_traces.TraceVerdict(p, True, None) for p in paths]

    monkeypatch.setattr(R.tlc_traces, "validate_traces", tlc)
    good = [M.load(SHELL / "shell.toml"), M.load(SHELL / "v12-style.toml")]
    alone = runner.run_all(good, tmp_path / "alone", only=ONLY, jobs=2)
    mixed = runner.run_all([M.load(DOCS / "docs-minimal.toml"), *good], tmp_path / "mixed", only=ONLY, jobs=3)
    # alone: one shared batch; mixed: the shared batch crashed, then each implementation had its own
    impls = [{Path(p).parts[-3] for p in batch} for batch in seen]
    assert len(impls) == 5 and len(impls[0]) == 2 and len(impls[1]) == 3
    assert sorted(next(iter(i)) for i in impls[2:]) == ["docs-minimal", "shell", "v12-style"]
    before, after = _status(alone), _status(mixed)
    for name in ("shell", "v12-style"):
        assert after[name] == before[name] and after[name]["model.tlc"] == C.PASS, (name, after[name])
    docs = next(rep for rep in mixed.reports if rep.name == "docs-minimal")
    crashed = next(r for r in docs.results if r.check == "model.tlc")
    assert crashed.status == C.INCONCLUSIVE and "TLC threw" in crashed.summary
    assert after["docs-minimal"]["consumer.delivers-all"] == C.PASS


@pytest.mark.slow
def test_tlc_accepts_bare_claims(tmp_path):
    """A docs-minimal consumer claims processing/NAME (no owner, N-9 allows it): TLC accepts its traces."""
    if shutil.which("java") is None:
        pytest.skip("TLC needs java (the spec check's own tests cover its absence)")
    rep = runner.run_impl(M.load(DOCS / "docs-minimal.toml"), tmp_path, only={"consumer.delivers-all", "model.tlc"})
    tlc = next(r for r in rep.results if r.check == "model.tlc")
    assert tlc.status == C.PASS, tlc.summary


def _box_records(box: str) -> list[dict]:
    name = "4.1795308179679000-1476094893.T"
    recs = [{"op": "create", "path": f"{box}/working/{name}"}, {"op": "close_write", "path": f"{box}/working/{name}"},
            {"op": "rename", "src": f"{box}/working/{name}", "dst": f"{box}/processed/{name}"}]
    return [dict(r, seq=i, t=i / 1000) for i, r in enumerate(recs)]


def test_the_12_publisher_record_copy_is_a_legal_move():
    """Every 1.2 publish files a copy in the topic's .incoming/, working/ -> processed/ (PROTOCOL.md T-5)."""
    ok = R.replay(_box_records("topic-root/news/sport/.incoming"), purge=False)
    assert ok.violation is None and ok.events == 2
    # in a queue (or a subscription) the same move skips the delivery: illegal
    bad = R.replay(_box_records("Q1/incoming"), purge=False)
    assert bad.violation is not None and "processed" in bad.violation.reason


@pytest.mark.parametrize("trace", sorted(p.name for p in TRACES.glob("*.jsonl")) if TRACES.is_dir() else [])
def test_every_recorded_12_trace_replays(trace):
    records = [json.loads(line) for line in (TRACES / trace).read_text().splitlines() if line.strip()]
    res = R.replay(records, purge=False)
    assert res.violation is None or res.violation.by_helper, res.violation and res.violation.reason
    assert res.events > 0


def test_a_12_style_publisher_filing_record_copies_passes_every_publisher_check(tmp_path):
    """No trace of a real 1.2 publish was recorded (the fixtures hold queue sends and consumes):
    impls/shell/publish12.sh (v12-style's publisher) publishes as 1.2 does, fan-out plus a record copy per publish in the
    topic's .incoming/ (working/ -> processed/), and the whole publisher scenario, the replay
    included, accepts it (issue 25: model.replay failed every real 1.2 publisher)."""
    m = M.load(SHELL / "v12-style.toml")  # its publish command is publish12.sh
    checks = {c.id for c in C.CHECKS if c.role == "publish"} | {"model.replay"}
    rep = runner.run_impl(m, tmp_path / "out", only=checks, tlc=False)
    assert rep.error is None
    for r in rep.results:
        if r.check in checks:
            assert r.status == C.PASS, (r.check, r.summary, r.evidence)
    trace = [json.loads(x) for x in (tmp_path / "out" / "v12-style" / "publish" / "trace.jsonl").read_text().splitlines()]
    records = [r for r in trace if r.get("op") == "rename" and "/.incoming/processed/" in r.get("dst", "")]
    assert records and all("/.incoming/working/" in r["src"] for r in records)
