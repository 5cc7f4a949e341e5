"""The runs of ``dropboxmq spec check``: CI models, mutants, witnesses, and their verdicts.

* every module of ``spec/`` is SANY-parsed (SANY exits 0 on semantic errors, so its
  output is scanned for errors);
* the CI models run (safety with symmetry, a liveness model without symmetry, a
  time-boxed simulation of a larger model), every mutant (each must be rejected by
  TLC with the exit code and the property listed in its header) and every witness
  (an invariant that must be violated: proof of reachability);
* TLC's ``-coverage`` report is checked: an action of Dropbox never taken fails.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Iterable

from dropboxmq.lifecycle import Move
from dropboxmq.trace_rules import PROCESS_ACTIONS
from .tlc import EXIT_INVARIANT, EXIT_OK, EXIT_PROPERTY, TlcResult, run_tlc, sany, spec_dir

__all__ = ["ACTION_PROPERTIES", "ALL_ACTIONS", "CI_MODELS", "DEEP_MODELS", "LIFECYCLE_ACTIONS", "Model", "Outcome",
           "SIMULATE_SECONDS", "missing_coverage", "models", "run_model", "sany_all", "violated_property"]

#: The actions of Dropbox.tla that move a message (lifecycle.Move's names) and the
#: process-level ones: both defined once, in lifecycle.py.
LIFECYCLE_ACTIONS = tuple(m.value for m in Move)
ALL_ACTIONS = LIFECYCLE_ACTIONS + PROCESS_ACTIONS


@dataclasses.dataclass(frozen=True)
class Model:
    """One TLC run: ``kind`` is model (must pass), simulate, mutant or witness."""

    name: str
    cfg: str                  # relative to spec/
    kind: str
    expect_code: int = EXIT_OK
    expect_prop: str | None = None
    deep: bool = False
    module: str = "DropboxMC.tla"
    args: tuple[str, ...] = ()

    @property
    def expected(self) -> str:
        if self.expect_code == EXIT_OK:
            return "ok"
        return f"{self.expect_code} {self.expect_prop}"


#: the properties TLC checks as actions (a violation exits 13, not 12)
ACTION_PROPERTIES = ("Refinement", "ClientAckAll", "ExpiredNeverDelivered",
                     "NoSpuriousAck", "NoSpuriousRedelivery", "ReceiveTxAtomicity",
                     "DeadLetterOnlyOverLimit", "ExpiryNotFromHolder", "NoEarlyDelivery")

_RE_EXPECT = re.compile(r"^\\\*\s*expect:\s*(?:rejected,\s*)?violated\s+(\w+)", re.M)
#: a mutant or witness of another module than DropboxMC says so: "\* module: Lease"
_RE_MODULE = re.compile(r"^\\\*\s*module:\s*(\w+)", re.M)
_RE_DEEP = re.compile(r"^\\\*\s*deep:", re.M)

#: time box of the CI simulation (seconds)
SIMULATE_SECONDS = 25


def _expectation(cfg_text: str, kind: str) -> tuple[int, str | None]:
    if kind in ("model", "simulate"):
        return EXIT_OK, None
    m = _RE_EXPECT.search(cfg_text)
    if not m:
        raise ValueError("mutant/witness config without an '\\* expect: violated NAME' line")
    prop = m.group(1)
    # invariants make TLC exit 12; action properties (and the refinement) 13
    code = EXIT_PROPERTY if prop in ACTION_PROPERTIES else EXIT_INVARIANT
    return code, prop


CI_MODELS = ("safety_race", "safety_tx", "safety_client_tx", "safety_tx_pair", "safety_client_pair", "liveness_auto",
             "liveness_client_tx")
DEEP_MODELS = ("deep_safety", "deep_race", "deep_liveness")


def models(deep: bool = False, root: Path | None = None) -> list[Model]:
    """Every run of ``spec check`` (``deep`` adds the larger models)."""
    root = root or spec_dir()
    out: list[Model] = []
    for name in CI_MODELS + (DEEP_MODELS if deep else ()):
        out.append(Model(name, f"models/{name}.cfg", "model", deep=name in DEEP_MODELS,
                         args=("-coverage", "1") if name in CI_MODELS else ()))
    out.append(Model("simulate_big", "models/simulate_big.cfg", "simulate",
                     args=("-simulate", "-depth", "60")))
    for sub, kind in (("mutants", "mutant"), ("witnesses", "witness")):
        for cfg in sorted((root / sub).glob("*.cfg")):
            text = cfg.read_text()
            code, prop = _expectation(text, kind)
            named = _RE_MODULE.search(text)
            out.append(Model(f"{kind}:{cfg.stem}", f"{sub}/{cfg.name}", kind, code, prop,
                             module=f"{named.group(1)}.tla" if named else "DropboxMC.tla"))
    out.append(Model("channel", "models/channel.cfg", "model", module="Channel.tla"))
    # top-level <Module>[suffix].cfg files (Topics.cfg, and other modules' models such
    # as TwoPhaseDropbox*.cfg): the longest module name that prefixes the config's;
    # a header "\* expect: ... violated NAME" makes it a mutant, a line "\* deep: ..." a
    # model of --deep only
    modules = sorted((p.stem for p in root.glob("*.tla")), key=len, reverse=True)
    for cfg in sorted(root.glob("*.cfg")):
        mod = next((m for m in modules if cfg.stem.startswith(m)), None)
        if mod is None:
            continue
        text = cfg.read_text()
        is_deep = _RE_DEEP.search(text) is not None
        if is_deep and not deep:
            continue
        kind = "model" if not _RE_EXPECT.search(text) else \
            "witness" if text.startswith("\\* WITNESS") else "mutant"
        code, prop = _expectation(text, kind)
        out.append(Model(cfg.stem.lower() if kind == "model" else f"{kind}:{cfg.stem}",
                         cfg.name, kind, code, prop, deep=is_deep, module=f"{mod}.tla"))
    return out


_RE_LOCATED = re.compile(r"Error: Action property line (\d+), col \d+ to .*? of module (\w+) is violated")


def violated_property(result: TlcResult, root: Path | None = None) -> str | None:
    """TLC names a violated conjunct of a property by its location, not its name: a
    step of Channel (Ch!Spec) or the line of Dropbox's ``Refinement ==`` is Refinement."""
    m = _RE_LOCATED.search(result.output)
    if m is None:
        return result.violated
    line, module = int(m.group(1)), m.group(2)
    if module == "Channel":
        return "Refinement"
    src = (root or spec_dir()) / f"{module}.tla"
    lines = src.read_text().splitlines() if src.is_file() else []
    if 0 < line <= len(lines) and lines[line - 1].lstrip().startswith("Refinement =="):
        return "Refinement"
    return result.violated


@dataclasses.dataclass
class Outcome:
    model: Model
    result: TlcResult | None
    actual: str
    ok: bool
    note: str = ""


def run_model(model: Model, root: Path | None = None, workers: str = "2") -> Outcome:
    root = root or spec_dir()
    args = list(model.args)
    timeout = 1800.0 if model.deep else 400.0
    if model.kind == "simulate":
        args = ["-Dtlc2.TLC.stopAfter=%d" % SIMULATE_SECONDS] + args
        timeout = SIMULATE_SECONDS + 120
    jvm_props = [a for a in args if a.startswith("-D")]
    tlc_args = [a for a in args if not a.startswith("-D")]
    res = run_tlc(root / model.module, root / model.cfg, workers=workers,
                  args=tlc_args, timeout=timeout, jvm_props=jvm_props)
    violated = violated_property(res, root)
    if res.timed_out:
        actual = "timeout"
    elif res.exit_code == EXIT_OK:
        actual = "ok"
    else:
        actual = f"{res.exit_code} {violated}"
    if model.kind == "simulate":
        ok = res.exit_code == EXIT_OK or (res.timed_out and "Error:" not in res.output)
        if ok:
            actual = "ok"
    elif model.kind in ("mutant", "witness"):
        ok = res.exit_code == model.expect_code and violated == model.expect_prop
    else:
        ok = res.exit_code == EXIT_OK
    note = ""
    if not ok:
        errs = [ln for ln in res.output.splitlines() if ln.startswith("Error") or "Exception" in ln]
        note = "; ".join(errs[:3])
    return Outcome(model, res, actual, ok, note)


def missing_coverage(outcomes: Iterable[Outcome]) -> list[str]:
    """Actions of ALL_ACTIONS that no coverage-reporting run ever took."""
    taken: dict[str, int] = {}
    seen_report = False
    for o in outcomes:
        if o.result is not None and "-coverage" in o.model.args and o.result.coverage:
            seen_report = True
            for name, n in o.result.coverage.items():
                taken[name] = taken.get(name, 0) + n
    if not seen_report:
        return ["(no coverage report)"]
    return [a for a in ALL_ACTIONS if taken.get(a, 0) == 0]


def sany_all(root: Path | None = None) -> list[tuple[str, bool, str]]:
    root = root or spec_dir()
    return [(p.name, *sany(p)) for p in sorted(root.glob("*.tla"))]
