"""One headline per defect: the graded results below OK, grouped so that a defect that several
checks see (a check and the model replaying the same scenario, two checks of one rule) reads as
one finding with its rule, level, evidence and one line of what to change."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import checks as C
from . import protocol

#: how a finding reads, worst first
_ORDER = {C.FAIL: 0, C.NON_STRICT: 1, C.INFORMATIONAL: 2}
_WORD = {C.FAIL: "FAILED", C.NON_STRICT: "NON-STRICT", C.INFORMATIONAL: "INFORMATIONAL"}


@dataclass
class Finding:
    status: str  # fail | non-strict | informational
    rule: str
    level: str
    checks: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # each check's summary
    scenarios: set[str] = field(default_factory=set)

    @property
    def word(self) -> str:
        return _WORD[self.status]

    @property
    def rule_text(self) -> str:
        r = protocol.rules().get(self.rule)
        return r.text.split(". ")[0].rstrip(".") + "." if r else ""

    @property
    def fix(self) -> str:
        return C.FIX.get(self.checks[0], "")

    @property
    def headline(self) -> str:
        return f"{self.word}: {self.rule} ({self.level}) {self.rule_text}"

    def as_dict(self) -> dict:
        return {"status": self.status, "rule": self.rule, "level": self.level, "rule_text": self.rule_text,
                "checks": self.checks, "evidence": self.evidence, "fix": self.fix}


def _scenarios(r: C.Result) -> set[str]:
    ev = r.evidence or {}
    found = set(ev.get("scenarios") or [])
    if ev.get("scenario"):
        found.add(str(ev["scenario"]).split(":")[0])
    return found


def findings(results: list[C.Result]) -> list[Finding]:
    """The headlines of these graded results: non-model results grouped by the rule they break;
    a model.* result joins a headline of the same scenario (the model restating a defect a check
    already names), else stands alone."""
    flagged = [r for r in results if r.status in _ORDER]
    out: dict[tuple[str, str], Finding] = {}
    for r in sorted(flagged, key=lambda r: r.check.startswith("model.")):
        rule = r.evidence.get("rule") or C.BY_ID[r.check].rules[0]
        level = r.evidence.get("level") or C.BY_ID[r.check].level()
        scen = _scenarios(r)
        host = out.get((r.status, rule))
        if host is None and r.check.startswith("model."):
            host = next((f for f in out.values() if f.status == r.status and f.scenarios & scen), None)
        if host is None:
            host = out.setdefault((r.status, rule), Finding(r.status, rule, level))
        host.checks.append(r.check)
        host.evidence.append(f"{r.check}: {r.summary}")
        host.scenarios |= scen
    return sorted(out.values(), key=lambda f: (_ORDER[f.status], f.rule))
