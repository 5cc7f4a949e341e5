"""Reports a newcomer can act on: one headline per defect (the rule, its level, the evidence, what
to change), `conformance list` readable at 80 columns and as JSON, and a summary that names the
rules a pass-expected implementation broke."""

from __future__ import annotations

import io
import json
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from dropboxmq_conformance import checks as C
from dropboxmq_conformance import cli, protocol, runner
from dropboxmq_conformance import manifest as M
from dropboxmq_conformance.findings import findings


def _graded(*results: C.Result) -> list[C.Result]:
    return [C.grade(r) for r in results]


def test_one_defect_seen_by_a_check_and_the_model_is_one_headline():
    # a consumer that copies into processing/ and deletes the original: the check and both models see it
    res = _graded(C.failed("consumer.claims-by-rename", "2 events: copied", scenario="consume-basic"),
                  C.failed("model.replay", "consume-basic: event #40 rejected", scenario="consume-basic"),
                  C.Result("model.tlc", C.FAIL, "TLC rejected 1 trace(s)", {"scenario": "consume-basic"}),
                  C.passed("consumer.order", "ok"))
    heads = findings(res)
    assert len(heads) == 1
    f = heads[0]
    assert (f.status, f.rule, f.level) == (C.FAIL, "C-1", "MUST")
    assert f.checks == ["consumer.claims-by-rename", "model.replay", "model.tlc"]
    assert f.headline.startswith("FAILED: C-1 (MUST) A consumer takes a message by renaming")
    assert f.fix == C.FIX["consumer.claims-by-rename"] and len(f.evidence) == 3


def test_a_rule_broken_twice_is_one_headline_and_levels_stay_apart():
    res = _graded(C.failed("consumer.kill9-redelivered", "1 came back without a count", scenario="consume-kill9"),
                  C.Result("model.tlc", C.FAIL, "TLC rejected a Redeliver without a count",
                           {"scenario": "consume-kill9", "rule": "R-2"}),
                  C.failed("consumer.late-priority", "claimed after 40", scenario="consume-late-priority"),
                  C.failed("consumer.delivers-all", "1 of 12 not delivered", scenario="consume-basic"))
    heads = findings(res)
    assert [(f.word, f.rule) for f in heads] == [("FAILED", "C-4"), ("NON-STRICT", "C-9"), ("NON-STRICT", "R-2")]
    assert heads[2].checks == ["consumer.kill9-redelivered", "model.tlc"]


def test_list_is_readable_at_80_columns_and_as_json():
    out = CliRunner(env={"COLUMNS": "80"}).invoke(cli.conformance, ["list"])
    assert out.exit_code == 0, out.output
    assert max(len(line) for line in out.output.splitlines()) <= 80
    for c in C.CHECKS:
        assert f"{c.id}  [{c.role}]  {c.level()}" in out.output
    assert "Not checked" in out.output and "P-7 (MUST)" in out.output
    data = json.loads(CliRunner().invoke(cli.conformance, ["list", "--json"]).output)
    assert data["protocol"] == protocol.version()
    by_id = {c["id"]: c for c in data["checks"]}
    assert set(by_id) == set(C.BY_ID)
    assert by_id["consumer.kill9-redelivered"]["level"] == {"default": "SHOULD", "strict": "MUST"}
    assert by_id["consumer.order"]["enforces"][0]["id"] == "C-8" and by_id["consumer.order"]["fix"]
    assert {r["id"] for r in data["not_checked"]} == set(protocol.NOT_CHECKED)


def test_the_summary_names_the_rules_a_pass_expected_implementation_broke():
    m = M.Manifest("mine", "", Path("/x/mine.toml"), {"consume": "x"}, expect="pass")
    rep = runner.ImplReport(m, raw=[C.failed("consumer.delivers-all", "1 of 12 not delivered"),
                                    C.failed("consumer.late-priority", "claimed after 40"),
                                    C.passed("consumer.order", "ok")])
    rep.regrade()
    assert rep.levels == {"default": "FAILED", "strict": "FAILED"} and rep.verdict == "FAIL"
    buf = io.StringIO()
    cli._print_summary(runner.RunSummary([rep], 1.0), Console(file=buf, width=200), tlc=False)
    text = buf.getvalue()
    assert "C-4 (failed)" in text and "C-9 (non-strict)" in text
    assert "what to change: " + C.FIX["consumer.delivers-all"] in text
