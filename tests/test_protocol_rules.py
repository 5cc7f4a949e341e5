"""spec/PROTOCOL.md is what the conformance suite judges by: every rule a check cites exists,
every MUST rule is enforced by a check or named as not checkable black-box (with the reason),
and no check cites a document the repository does not ship."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dropboxmq_conformance import checks as C
from dropboxmq_conformance import protocol

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ROOT / "conformance" / "dropboxmq_conformance"


def test_the_document_is_versioned_and_numbers_its_rules():
    assert protocol.version().startswith("Protocol 1.0 (DropboxMQ 1.2 file protocol)")
    rules = protocol.rules()
    assert len(rules) >= 50
    for rid, rule in rules.items():
        assert re.fullmatch(r"[A-Z]-[0-9]+", rid)
        assert rule.level in (protocol.MUST, protocol.SHOULD, protocol.MAY) and rule.text, rid


def test_the_shipped_document_is_the_repository_one():
    assert protocol.document() == (ROOT / "spec" / "PROTOCOL.md").read_text(encoding="utf-8")


def test_every_cited_rule_exists():
    rules = protocol.rules()
    for chk in C.CHECKS:
        assert chk.rules, f"{chk.id} cites no rule"
        missing = [r for r in chk.rules if r not in rules]
        assert not missing, f"{chk.id} cites {missing}, which PROTOCOL.md does not define"
    assert set(protocol.NOT_CHECKED) <= set(rules)


def test_every_must_rule_is_enforced_or_said_not_checkable():
    cited = {r for chk in C.CHECKS for r in chk.rules}
    for rid, rule in protocol.rules().items():
        if protocol.MUST not in (rule.level, rule.strict_level):
            continue
        assert rid in cited or protocol.NOT_CHECKED.get(rid, "").strip(), \
            f"MUST rule {rid} is neither enforced by a check nor listed in protocol.NOT_CHECKED with a reason"
    # a rule is either checked or not, never both
    assert not cited & set(protocol.NOT_CHECKED), cited & set(protocol.NOT_CHECKED)


def test_the_durability_heading_is_left_for_the_crash_state_work():
    assert re.search(r"^## Durability$", protocol.document(), re.M)


@pytest.mark.parametrize("where", ["checks", "judge sources"])
def test_no_check_cites_a_document_outside_the_repository(where):
    texts = [c.rule + " " + c.ref for c in C.CHECKS] if where == "checks" else [
        p.read_text(encoding="utf-8") for p in JUDGE.rglob("*.py")]
    for text in texts:
        assert not re.search(r"\bseeds? ?0\d\d\b", text, re.I), text[:200]
        assert not re.search(r"PROTOCOL\.md ?§", text), text[:200]


def test_a_check_is_graded_at_its_rule_level_per_profile():
    late = C.failed("consumer.late-priority", "a listing kept for 30 s")
    assert C.grade(late).status == C.NON_STRICT and C.grade(late).evidence["rule"] == "C-9"
    count = C.failed("consumer.kill9-redelivered", "no count")
    assert C.grade(count, protocol.DEFAULT).status == C.NON_STRICT
    assert C.grade(count, protocol.STRICT).status == C.FAIL
    shared = C.failed("session.shared-subscription", "not supported")
    assert C.grade(shared, protocol.DEFAULT).status == C.INFORMATIONAL
    assert C.grade(shared, protocol.STRICT).status == C.FAIL
    lost = C.failed("consumer.delivers-all", "lost one")
    assert C.grade(lost).status == C.FAIL
    assert C.level_of([C.grade(late), C.passed("consumer.order", "ok")]) == C.NON_STRICT_LEVEL
    assert C.level_of([C.grade(late), C.grade(lost)]) == C.FAILED_LEVEL
    assert C.level_of([C.grade(shared), C.passed("consumer.order", "ok")]) == C.OK_LEVEL


#: the reference's modules the judge may use: the lifecycle table (the state machine the spec also
#: states) with the rules a trace of it is checked against (trace_rules.py, split from it: who makes
#: each move, what a move may do to a name's delivery count), and the install extras (the spec
#: package, dropboxmq_spec, with the TLA+ model's trace driver, is not the reference).  Never its
#: codec, store, session, topics or ids: the judge reads names with its own grammar (PROTOCOL.md).
JUDGE_MAY_IMPORT = {"dropboxmq.lifecycle", "dropboxmq.trace_rules", "dropboxmq.extras"}
#: implementations under test that ship inside the judge's package: they run the library
# implementations under test, not the judge: they may use the library
IMPLEMENTATIONS = {"reference_adapter.py", "spark/consumer.py", "spark/producer.py",
                   "celery/common.py", "celery/producer.py", "celery/worker.py"}


def _reference_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "dropboxmq":
                found |= {f"dropboxmq.{a.name}" for a in node.names}
            elif node.module.startswith("dropboxmq."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name == "dropboxmq" or a.name.startswith("dropboxmq.")}
    return found


def test_the_judge_imports_no_reference_internals():
    offenders = {}
    for path in JUDGE.rglob("*.py"):
        rel = path.relative_to(JUDGE).as_posix()
        if rel in IMPLEMENTATIONS:
            continue
        bad = _reference_imports(path) - JUDGE_MAY_IMPORT
        if bad:
            offenders[rel] = sorted(bad)
    assert not offenders, f"the judge imports the reference's internals: {offenders}"


def test_the_spec_package_the_judge_uses_imports_no_reference_internals():
    """The judge validates traces with the spec package's trace driver (dropboxmq_spec): it reads
    names with the same grammar, so a reference codec bug cannot reach the judge through it."""
    spec = JUDGE.parent.parent / "spec"
    offenders = {p.name: sorted(_reference_imports(p) - JUDGE_MAY_IMPORT) for p in spec.glob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_the_import_scan_sees_every_form_of_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from dropboxmq import codec\nimport dropboxmq.store\nfrom dropboxmq.session import X\n"
                     "def f():\n    from dropboxmq.topics import Subscription\n")
    assert _reference_imports(probe) == {"dropboxmq.codec", "dropboxmq.store", "dropboxmq.session",
                                         "dropboxmq.topics"}
