"""Implementations written from spec/PROTOCOL.md alone, in languages other than Python (a
docs-minimal POSIX shell consumer, a 1.2-style Perl consumer, a fast C consumer), pass the suite
as shipped manifests, non-strict where they break a SHOULD; the fast one's crash recovery is
decided every time."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from dropboxmq_conformance import checks as C
from dropboxmq_conformance import consumer
from dropboxmq_conformance import manifest as M
from dropboxmq_conformance import runner

DOCS = M.impls_dir() / "docs"
CONSUME_CHECKS = {c.id for c in C.CHECKS if c.role == "consume"} | {"model.trace-complete", "model.replay"}
#: the SHOULD rules each one breaks by design (PROTOCOL.md), and nothing else
EXPECTED_FINDINGS = {"docs-minimal": {"C-3", "C-9", "R-2"}, "perl12": set(), "fast-c": set()}


def test_the_fast_consumer_compiles_cleanly(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler: the fast-c manifest cannot run either")
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "fc"),
                    str(DOCS / "fast_consumer.c")], check=True)


@pytest.mark.parametrize("name", sorted(EXPECTED_FINDINGS))
def test_a_consumer_written_from_the_protocol_passes(name, tmp_path):
    m = M.load(DOCS / f"{name}.toml")
    assert m.expect == "pass" and M.find(name) == DOCS / f"{name}.toml"  # shipped, found by name
    rep = runner.run_impl(m, tmp_path, only=CONSUME_CHECKS, tlc=False)
    assert rep.error is None
    undecided = [(r.check, r.summary) for r in rep.results if r.status == C.INCONCLUSIVE]
    assert not rep.failures and not undecided, ([(r.check, r.summary) for r in rep.failures], undecided)
    broken = {r.evidence["rule"] for r in rep.results if r.status == C.NON_STRICT}
    assert broken == EXPECTED_FINDINGS[name], [(r.check, r.summary) for r in rep.results if r.status == C.NON_STRICT]
    assert rep.levels["default"] == (C.NON_STRICT_LEVEL if broken else C.OK_LEVEL)
    if "R-2" in broken:  # the delivery count is required in the strict profile
        assert rep.levels["strict"] == C.FAILED_LEVEL


def test_a_fast_consumers_crash_recovery_is_decided_every_time(tmp_path):
    """It claims, reads and acknowledges in microseconds; the suite still catches it holding
    a claim (README "Fast consumers").  DROPBOXMQ_KILL9_RUNS=100 is the measurement of the README."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    m = M.load(DOCS / "fast-c.toml")
    runs = int(os.environ.get("DROPBOXMQ_KILL9_RUNS", "4"))
    undecided = []
    for i in range(runs):
        results, _ = consumer.consumer_kill9(m, tmp_path / str(i))
        if any(r.status == C.INCONCLUSIVE for r in results):
            undecided.append([r.summary for r in results])
        assert not [r for r in results if r.status == C.FAIL], [r.summary for r in results]
    assert not undecided, undecided
