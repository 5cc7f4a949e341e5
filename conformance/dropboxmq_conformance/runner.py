"""Run the checks against implementations; compute verdicts and the catch rate."""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import checks as C
from . import consumer, model_checks, producer, protocol, replay, sessions, topics
from .checks import CHECKS, Result
from .manifest import Manifest

#: scenario -> (role it needs, function, checks it decides)
SCENARIOS: list[tuple[str, str, Callable, list[str]]] = [
    ("produce", "produce", producer.producer_scenario, [c.id for c in CHECKS if c.role == "produce"]),
    ("consume-basic", "consume", consumer.consumer_basic,
     ["consumer.exit-clean", "consumer.delivers-all", "consumer.expired-not-delivered", "consumer.order",
      "consumer.junk-tolerant", "consumer.claims-by-rename", "consumer.claims-name-owner", "consumer.acked-processed"]),
    ("consume-contention", "consume", consumer.consumer_contention,
     ["consumer.contention-exactly-once", "consumer.claims-by-rename"]),
    ("consume-lost-race", "consume", consumer.consumer_lost_race, ["consumer.lost-race"]),
    ("consume-kill9", "consume", consumer.consumer_kill9, ["consumer.kill9-recovery", "consumer.kill9-redelivered"]),
    ("consume-late-priority", "consume", consumer.consumer_late_priority, ["consumer.late-priority"]),
    ("sessions", "adapter", sessions.session_scenario, [c.id for c in CHECKS if c.role == "adapter"]),
    ("publish", "publish", topics.publisher_scenario, [c.id for c in CHECKS if c.role == "publish"]),
    ("subscribe", "subscribe", topics.subscriber_scenario,
     [c.id for c in CHECKS if c.role == "subscribe" and not c.id.startswith("subscriber.kill9-")]),
    ("subscribe-kill9", "subscribe", topics.subscriber_kill9,
     ["subscriber.kill9-recovery", "subscriber.kill9-redelivered"]),
]


@dataclass
class ImplReport:
    manifest: Manifest
    #: graded in ``profile`` (see grade); ``raw`` holds the checks' own pass / fail
    results: list[Result] = field(default_factory=list)
    raw: list[Result] = field(default_factory=list)
    profile: str = protocol.DEFAULT
    seconds: float = 0.0
    error: str | None = None
    #: TLC validations waiting for the batch (run_all runs all implementations' at once)
    tlc_jobs: list = field(default_factory=list)
    tlc_known: list = field(default_factory=list)
    overflowed: set[str] = field(default_factory=set)
    #: the checks that passed on every pass-expected implementation of the same run that
    #: played them (set by RunSummary); None: no pass-expected implementation to compare with
    trusted: set[str] | None = None

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def expect(self) -> str:
        return self.manifest.expect

    def __post_init__(self) -> None:
        if self.results and not self.raw:  # built from results (as tests do): they are the raw ones
            self.raw = list(self.results)

    def regrade(self) -> None:
        """Grade the raw results in the report's profile (after every change to ``raw``)."""
        self.results = [C.grade(r, self.profile) for r in self.raw]

    @property
    def levels(self) -> dict[str, str]:
        """The implementation's level (OK, NON-STRICT, FAILED) in every profile."""
        return {p: C.level_of([C.grade(r, p) for r in self.raw]) for p in protocol.PROFILES}

    @property
    def flagged(self) -> list[Result]:
        """The results below OK: broken MUSTs (fail) and SHOULDs (non-strict)."""
        return [r for r in self.results if r.status in (C.FAIL, C.NON_STRICT)]

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status == C.FAIL]

    @property
    def caught_by(self) -> list[str]:
        """The failed checks that count as catching this broken example: named in its
        ``caught_by`` and passed by every pass-expected implementation of the run (a check
        its good twin also fails proves nothing about the defect)."""
        return [r.check for r in self.flagged if r.check in self.manifest.caught_by
                and (self.trusted is None or r.check in self.trusted)]

    @property
    def ok(self) -> bool:
        """As expected: a passing implementation failed nothing; a broken one was caught."""
        if self.error:
            return False
        if self.expect == "pass":
            return not self.failures
        return bool(self.caught_by)

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        if self.expect == "fail":
            return "caught" if self.ok else "NOT CAUGHT"
        if self.failures:
            return "FAIL"
        text = "pass (non-strict)" if self.count(C.NON_STRICT) else "pass"
        return text if not self.count(C.INCONCLUSIVE) else text + " (with inconclusive)"


def wanted_checks(only: list[str] | None) -> set[str] | None:
    if not only:
        return None
    out: set[str] = set()
    for pat in only:
        hits = [c.id for c in CHECKS if c.id == pat or c.id.startswith(pat.rstrip("*").rstrip(".") + ".")
                or (pat.endswith("*") and c.id.startswith(pat[:-1]))]
        if not hits:
            raise ValueError(f"no check {pat!r} (see 'dropboxmq conformance list')")
        out.update(hits)
    return out


def planned_scenarios(m: Manifest, only: set[str] | None = None) -> list[tuple[str, Callable]]:
    """The scenarios (name, function) run_impl runs for ``m``: those of roles it plays that
    decide a wanted check; for model checks alone, one scenario per role is enough."""
    model_only = only is not None and all(c.startswith("model.") for c in only)
    planned, roles_run = [], set()
    for name, role, fn, decides in SCENARIOS:
        if only is not None and not model_only and not (set(decides) & only):
            continue
        if (model_only and role in roles_run) or not m.has(role):
            continue
        roles_run.add(role)
        planned.append((name, fn))
    return planned


def run_impl(m: Manifest, out: Path, only: set[str] | None = None, tlc: bool = True,
             tick: Callable[[str], None] | None = None, defer_tlc: bool = False,
             tlc_max_events: int = replay.TLC_MAX_EVENTS, stepped: Callable[[], None] | None = None,
             profile: str = protocol.DEFAULT) -> ImplReport:
    """Run every scenario the manifest can play and judge it.  model.tlc is decided by
    finish_tlc, here at the end, or (defer_tlc) by the caller for many reports at once.
    tick(what) names each scenario as it starts; stepped() follows each one's end."""
    rep = ImplReport(m, profile=profile)
    started = time.monotonic()
    impl_out = out / m.name
    if Path(m.name).name != m.name or m.name in ("", ".", ".."):  # a Manifest made without load()
        raise ValueError(f"manifest name {m.name!r} is no plain name: its report directory would leave {out}")
    shutil.rmtree(impl_out, ignore_errors=True)
    impl_out.mkdir(parents=True)
    scenarios = []
    raw: dict[str, list[Result]] = {}
    try:
        for name, fn in planned_scenarios(m, only):
            if tick:
                tick(f"{m.name}: {name}")
            results, sc = fn(m, impl_out)
            scenarios.append(sc)
            for r in results:
                raw.setdefault(r.check, []).append(r)
            if stepped:
                stepped()
        traced = [] if m.api_only else scenarios  # an API-only implementation has no dropbox to trace
        if traced and (only is None or any(c.startswith("model.") for c in only)):
            for r in model_checks.model_results(m, traced):
                raw.setdefault(r.check, []).append(r)
        if traced and (only is None or "model.tlc" in only):
            if tlc:
                rep.tlc_jobs, rep.tlc_known = model_checks.tlc_jobs(m, traced, tlc_max_events)
                raw["model.tlc"] = [C.inconclusive("model.tlc", "TLC validation pending")]
            else:
                raw["model.tlc"] = [C.inconclusive("model.tlc", "TLC validation was turned off (--no-tlc)")]
        rep.overflowed = model_checks.overflowed(scenarios)
        model_checks.downgrade_overflowed([r for rs in raw.values() for r in rs], rep.overflowed)
    except Exception as exc:  # a bug of ours, or an environment problem: report, never hide
        import traceback

        rep.error = f"{type(exc).__name__}: {exc}"
        raw.setdefault("model.trace-complete", []).append(
            C.inconclusive("model.trace-complete", "the run stopped: " + rep.error, text=traceback.format_exc()))
    for check in CHECKS:
        if only is not None and check.id not in only:
            continue
        if check.id in m.waivers and check.id in raw:  # shown as a waiver in every report
            rep.raw.append(C.skipped(check.id, f"waived: {m.waivers[check.id]}"))
        elif check.id in raw:
            rep.raw.append(C.combine(check.id, raw[check.id]))
        else:
            role = check.role if check.role != "model" else None
            why = f"the manifest has no {role} command" if role and not m.has(role) else "not run"
            if check.role == "model" and m.api_only:
                why = "API-only implementation (flags.api_only): no dropbox to trace"
            rep.raw.append(C.skipped(check.id, why))
    rep.regrade()
    rep.seconds = time.monotonic() - started
    if tlc and not defer_tlc:
        finish_tlc([rep])
    return rep


def finish_tlc(reports: list[ImplReport], parallel: int = 2) -> float:
    """Decide model.tlc for these reports: one TLC batch for all of them (TLC's start-up is paid
    per group of traces, not per implementation); then every implementation for which that batch
    could not decide (a trace that crashes or hangs TLC undecides its whole TLC run, whoever's
    traces share it) is validated again in a batch of its own.  So a failure while judging one
    implementation changes no other implementation's verdict.  Returns the seconds spent."""
    started = time.monotonic()
    waiting = [rep for rep in reports if rep.tlc_jobs or rep.tlc_known]
    try:
        shared = replay.run_tlc_jobs([j for rep in waiting for j in rep.tlc_jobs], parallel=parallel)
    except Exception as exc:  # our driver or TLC crashed on the shared batch: each on its own below
        shared = {j.key: replay.TlcOutcome("inconclusive", f"{type(exc).__name__}: {exc}", unavailable=True)
                  for rep in waiting for j in rep.tlc_jobs}

    def undecided(rep: ImplReport, outcomes: dict) -> bool:
        return any(outcomes[j.key].unavailable for j in rep.tlc_jobs)

    def settle(rep: ImplReport, outcomes: dict | None) -> None:
        if outcomes is None:  # alone this time
            try:
                outcomes = replay.run_tlc_jobs(rep.tlc_jobs, parallel=1)
            except Exception as exc:  # a crash of TLC or of our driver: this implementation only
                outcomes = {j.key: replay.TlcOutcome("inconclusive", f"TLC validation failed: {type(exc).__name__}: "
                                                     f"{exc}", unavailable=True) for j in rep.tlc_jobs}
        per_scenario = rep.tlc_known + [(j.key[1], outcomes[j.key]) for j in rep.tlc_jobs]
        result = model_checks.tlc_result(per_scenario)
        model_checks.downgrade_overflowed([result], rep.overflowed)
        rep.raw = [result if r.check == "model.tlc" else r for r in rep.raw]
        rep.regrade()
        rep.tlc_jobs, rep.tlc_known = [], []

    again = [rep for rep in waiting if undecided(rep, shared)]
    for rep in waiting:
        if rep not in again:
            settle(rep, shared)
    if len(waiting) > 1 and again:  # (alone, the shared batch was its own already)
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:  # each on its own, side by side
            list(pool.map(lambda rep: settle(rep, None), again))
    else:
        for rep in again:
            settle(rep, shared)
    return time.monotonic() - started


@dataclass
class RunSummary:
    reports: list[ImplReport]
    seconds: float
    tlc_seconds: float = 0.0   # of which the TLC batch

    @property
    def broken(self) -> list[ImplReport]:
        return [r for r in self.reports if r.expect == "fail"]

    @property
    def catch_rate(self) -> float | None:
        if not self.broken:
            return None
        return sum(1 for r in self.broken if r.ok) / len(self.broken)

    @property
    def inconclusive(self) -> list[str]:
        """Why the run cannot say OK although nothing failed (TLC asked for but unavailable)."""
        return [f"{r.name}: {x.summary}" for r in self.reports for x in r.results
                if x.check == "model.tlc" and x.status == C.INCONCLUSIVE and x.evidence.get("tlc_unavailable")]

    @property
    def ok(self) -> bool:
        return self.overall == "OK"

    @property
    def overall(self) -> str:
        """OK, FAILED, or INCONCLUSIVE (nothing failed, but TLC could not judge)."""
        if not all(r.ok for r in self.reports) or self.catch_rate not in (None, 1.0):
            return "FAILED"
        return "INCONCLUSIVE" if self.inconclusive else "OK"


def trust(reports: list[ImplReport]) -> None:
    """Mark, on every report, the checks that no pass-expected implementation failed or left
    undecided (at least one passed): only those can catch a broken example.  A good
    implementation non-strict on a SHOULD check leaves it trusted: the broken example is then
    caught at that level too."""
    good = [r for r in reports if r.expect == "pass"]
    played = [x for r in good for x in r.results if x.status != C.SKIPPED]
    trusted = None if not good else ({x.check for x in played if x.status == C.PASS}
                                     - {x.check for x in played if x.status in (C.FAIL, C.INCONCLUSIVE)})
    for r in reports:
        r.trusted = trusted


def run_all(manifests: list[Manifest], out: Path, only: set[str] | None = None, tlc: bool = True,
            jobs: int = 3, tick: Callable[[str], None] | None = None,
            done: Callable[[ImplReport], None] | None = None,
            tlc_max_events: int = replay.TLC_MAX_EVENTS, stepped: Callable[[], None] | None = None,
            profile: str = protocol.DEFAULT) -> RunSummary:
    """Judge every implementation (jobs at a time), then validate all their traces with TLC
    in one batch; done(report) is called as each implementation's verdict is final."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    reports: dict[str, ImplReport] = {}
    # the slowest (the reference, with its Python start-ups) first
    order = sorted(manifests, key=lambda m: (m.has("adapter"), m.has("consume")), reverse=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {pool.submit(run_impl, m, out, only, tlc, tick, True, tlc_max_events, stepped, profile): m
                for m in order}
        for f in as_completed(futs):
            r = f.result()
            reports[r.name] = r
            if done and r.expect == "pass" and not (r.tlc_jobs or r.tlc_known):
                done(r)
    waiting = [r for r in reports.values() if r.tlc_jobs or r.tlc_known]
    tlc_seconds = 0.0
    if waiting:
        if tick:
            tick(f"TLC: validating {sum(len(r.tlc_jobs) for r in waiting)} traces")
        tlc_seconds = finish_tlc(waiting)
    if stepped and tlc:
        stepped()  # the TLC batch is one step of the progress (see cli: one more than the scenarios)
    ordered = [reports[m.name] for m in manifests]
    trust(ordered)  # a broken example's verdict needs every pass-expected one's results
    for r in ordered:
        if done and (r in waiting or r.expect != "pass"):
            done(r)
    return RunSummary(ordered, time.monotonic() - started, tlc_seconds)
