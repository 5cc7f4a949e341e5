"""Model checks over every scenario's trace: model.trace-complete, model.replay (the lifecycle
table) and model.tlc (TLC jobs per trace, their verdict), and the downgrade of results whose
trace overflowed."""

from __future__ import annotations

from . import checks as C
from .checks import Result
from .harness import BOX, Scenario, excerpt
from .manifest import Manifest
from .replay import TLC_MAX_EVENTS, TlcJob, TlcOutcome, replay, tlc_job



def model_results(m: Manifest, scenarios: list[Scenario]) -> list[Result]:
    """model.trace-complete and model.replay (model.tlc: tlc_jobs / tlc_result)."""
    res: list[Result] = []
    over = [s.name for s in scenarios if s.watcher.overflowed]
    gaps = {s.name: s.watcher.gaps for s in scenarios if s.watcher.gaps}
    if over:
        res.append(C.inconclusive("model.trace-complete", f"inotify queue overflowed in {', '.join(over)}: events "
                                  "were lost, the run cannot pass"))
    elif gaps:
        first = next(iter(gaps.items()))
        res.append(C.inconclusive("model.trace-complete", f"the final rescan found {sum(map(len, gaps.values()))} "
                                  f"change(s) the event stream missed", trace=first[1][:10], scenario=first[0]))
    else:
        res.append(C.passed("model.trace-complete", f"{sum(len(s.records) for s in scenarios)} events in "
                            f"{len(scenarios)} traces, no overflow, final rescans agree"))
    rep = []
    for s in scenarios:
        r = replay(s.records, ack_removes=m.ack_removes, purge=False)
        if r.violation is not None:
            v = r.violation
            verdict = C.inconclusive if v.by_helper else C.failed
            who = f" (made by {v.actor}, the suite's own helper: not charged to the implementation)" \
                if v.by_helper else ""
            rep.append(verdict("model.replay", f"{s.name}: event #{v.seq} rejected{who}: {v.reason}",
                               scenario=s.name, trace=excerpt(s.records, [v.seq], around=3),
                               timeline=v.timeline, record=v.record))
        else:
            rep.append(C.passed("model.replay", f"{r.events} message events replayed" +
                                (f" ({r.partial} partly observed)" if r.partial else ""), scenario=s.name))
    total = sum(int(r.summary.split()[0]) for r in rep if r.status == C.PASS and r.summary[0].isdigit())
    comb = C.combine("model.replay", rep)
    if comb.status == C.PASS:
        comb = C.passed("model.replay", f"{len(rep)} traces, {total} message events, all legal moves of "
                        "lifecycle.TRANSITIONS")
    res.append(comb)
    return res


def tlc_jobs(m: Manifest, scenarios: list[Scenario],
             max_events: int = TLC_MAX_EVENTS) -> tuple[list[TlcJob], list[tuple[str, TlcOutcome]]]:
    """TLC jobs for every scenario's trace, and the outcomes known without TLC."""
    jobs: list[TlcJob] = []
    known: list[tuple[str, TlcOutcome]] = []
    for s in scenarios:
        if s.replay_only:
            known.append((s.name, TlcOutcome("too-large", s.replay_only)))
            continue
        for box in s.tlc_boxes:
            label = box[:-len("/incoming")] if box.endswith("/incoming") else box.rsplit("/", 1)[-1]
            name = s.name if box == BOX else f"{s.name}:{label}"
            j = tlc_job((m.name, name), s.records, s.dir, box=box, max_events=max_events)
            if isinstance(j, TlcJob):
                jobs.append(j)
            else:
                known.append((name, j))
    return jobs, known


def tlc_result(outcomes: list[tuple[str, TlcOutcome]]) -> Result:
    """model.tlc from the outcome of each scenario's trace: it fails if TLC rejected one,
    passes if it accepted at least one and rejected none (traces over the size limit are
    named but left to the replay), and is inconclusive otherwise."""
    judged = [(n, o) for n, o in outcomes if o.status in (C.PASS, C.FAIL, C.INCONCLUSIVE)]
    large = [n for n, o in outcomes if o.status == "too-large"]
    rest = f"; judged by the replay only (size): {', '.join(large)}" if large else ""
    fails = [(n, o) for n, o in judged if o.status == C.FAIL]
    if fails:
        n, o = fails[0]
        ev: dict = {"scenario": n, "rejections": [
            {"scenario": fn, "detail": fo.detail, "record": fo.first_bad, "trace": fo.context, "timeline": fo.timeline}
            for fn, fo in fails]}
        summary = f"TLC rejected {len(fails)} trace(s): " + "; ".join(f"{fn}: {fo.detail}" for fn, fo in fails)
        rules = {fo.rule for _, fo in fails}
        if len(rules) == 1 and None not in rules:  # graded at that rule's level, not S-1's
            ev["rule"] = rules.pop()
        return C.Result("model.tlc", C.FAIL, summary, ev)
    passed = [n for n, o in judged if o.status == C.PASS]
    unsure = [(n, o) for n, o in judged if o.status == C.INCONCLUSIVE]
    if passed and not unsure:
        return C.passed("model.tlc", f"TLC accepted {len(passed)} trace(s): {', '.join(passed)}{rest}",
                        scenarios=[n for n, _ in outcomes])
    if unsure:
        n, o = unsure[0]
        return C.inconclusive("model.tlc", f"{n}: {o.detail}{rest}", scenario=n,
                              tlc_unavailable=any(u.unavailable for _, u in unsure))
    return C.inconclusive("model.tlc", "no trace small enough for TLC" + rest)


def overflowed(scenarios: list[Scenario]) -> set[str]:
    """The scenarios whose watcher lost events."""
    return {s.name for s in scenarios if s.watcher.overflowed}


def downgrade_overflowed(results: list[Result], over: set[str]) -> None:
    """A result that rests on a trace that overflowed is inconclusive, never passed."""
    for r in results:
        if r.status == C.PASS and over & set(r.evidence.get("scenarios") or [r.evidence.get("scenario")]):
            r.status = C.INCONCLUSIVE
            r.summary = "trace overflowed (events lost): " + r.summary
