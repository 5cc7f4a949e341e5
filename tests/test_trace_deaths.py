"""Deaths in traces: the suite records every process it kills (a ``kill`` record), and both
judges of a trace -- the conformance replay and TLC's trace validation -- hold recoveries to
it: a recovery may take a message only from a holder the trace records as dead; the model's
Crash happens at the recorded death and nowhere else, and a Restart only after one.

The traces below are written by hand (as an outsider would), not recorded."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

from dropboxmq_spec import tlc_traces
from dropboxmq_conformance import harness
from dropboxmq_conformance import manifest as M
from dropboxmq_conformance import replay as R
from dropboxmq_conformance.harness import Proc, Scenario, make_layout
from dropboxmq_spec.trace import TraceError, death_of, load_trace

Q = "Q1/incoming"
NAME = "4.1700000000001-0000000001.T"
AGAIN = NAME + ".....JMSXDeliveryCountI=1"      # back in target/ after one delivery
HELD = f"{Q}/processing/cli~{NAME}"

SENT = [{"op": "create", "path": f"{Q}/working/{NAME}"},
        {"op": "close_write", "path": f"{Q}/working/{NAME}"},
        {"op": "rename", "src": f"{Q}/working/{NAME}", "dst": f"{Q}/target/{NAME}"},
        {"op": "rename", "src": f"{Q}/target/{NAME}", "dst": HELD}]
KILL_CLI = {"op": "kill", "role": "consume", "clients": ["cli"], "actor": "suite: kill -9"}
RECOVERED = {"op": "rename", "src": HELD, "dst": f"{Q}/target/{AGAIN}", "recovery": True}
TAKEN_AGAIN = [{"op": "rename", "src": f"{Q}/target/{AGAIN}", "dst": f"{Q}/processing/{{c}}~{AGAIN}"},
               {"op": "rename", "src": f"{Q}/processing/{{c}}~{AGAIN}", "dst": f"{Q}/processed/{{c}}~{AGAIN}"}]


def again_by(client: str) -> list[dict]:
    return [{k: v.replace("{c}", client) if isinstance(v, str) else v for k, v in r.items()} for r in TAKEN_AGAIN]


#: name -> (trace, the 0-based index of the event both judges must reject; None: accepted)
TRACES: dict[str, tuple[list[dict], int | None]] = {
    # a recovery takes the message while its holder runs: no death recorded
    "sweep_live_holder": (SENT + [RECOVERED] + again_by("two"), 4),
    # another client's death does not make cli dead
    "sweep_after_another_death": (SENT + [dict(KILL_CLI, clients=["other"]), RECOVERED] + again_by("two"), 5),
    # the death recorded, then its message redelivered and consumed by another consumer
    "death_then_redelivered": (SENT + [KILL_CLI, RECOVERED] + again_by("two"), None),
    # ... or by the same client id, restarted
    "death_then_restarted": (SENT + [KILL_CLI, RECOVERED] + again_by("cli"), None),
}


def _seq(recs: list[dict]) -> list[dict]:
    return [dict(r, seq=i) for i, r in enumerate(recs)]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_replay_holds_recoveries_to_the_recorded_deaths(name):
    trace, bad = TRACES[name]
    res = R.replay(_seq(trace), purge=False)
    if bad is None:
        assert res.ok, res.violation and res.violation.as_dict()
    else:
        assert res.violation is not None and res.violation.seq == bad, res.violation
        assert "does not record as dead" in res.violation.reason
        assert not res.violation.by_helper   # the implementation's recovery: charged to it


def test_a_holder_killed_mid_trace_is_dead_only_from_its_kill_on():
    """The same recovery move is legal after the kill, illegal before it."""
    before = SENT + [RECOVERED, KILL_CLI]
    assert R.replay(_seq(before)).violation.seq == 4
    assert R.replay(_seq(SENT + [KILL_CLI, RECOVERED])).ok


#: TLC only: after its recorded death a consumer makes no move of its own (it holds the
#: message, so it cannot have restarted); the replay cannot tell who made an untagged move
DEAD_ACKS = SENT + [KILL_CLI, {"op": "rename", "src": HELD, "dst": f"{Q}/processed/cli~{NAME}"}]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed")
def test_tlc_holds_crashes_and_recoveries_to_the_recorded_deaths(tmp_path):
    cases = dict(TRACES, dead_consumer_acks=(DEAD_ACKS, 5),
                 # without the recovery mark, the holder may have returned it itself: accepted
                 holder_returns_it=(SENT + [dict(RECOVERED, recovery=False)] + again_by("two"), None))
    paths = []
    for name, (trace, _bad) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in trace))
        paths.append(p)
    verdicts = {Path(v.path).stem: v for v in tlc_traces.validate_traces(paths, timeout=300, jobs=2)}
    for name, (_trace, bad) in cases.items():
        v = verdicts[name]
        assert v.decided, v
        assert (v.accepted, v.first_bad) == (bad is None, bad), (name, v)


def test_a_kill_renders_as_the_models_crash_of_that_consumer():
    rt, facts = tlc_traces.render_trace(SENT + [KILL_CLI, RECOVERED])
    kill, rec = rt.events[4], rt.events[5]
    assert (kill["op"], kill["act"], kill["p"]) == ('"kill"', '"Crash"', "c1") and facts["kills"] == 1
    assert rec["rcv"] == "TRUE" and rec["sc"] == "c1"
    # whose private steps may precede each event: the process trace_rules.ACTORS names
    assert [e["who"] for e in rt.events] == ["{Prod}", "{Prod}", "{Prod}", "{c1}", "{}", "{c1}"]
    # a death of a process that never held anything here is none of the model's
    rt, facts = tlc_traces.render_trace(SENT + [dict(KILL_CLI, clients=["nobody"])])
    assert [e["op"] for e in rt.events].count('"kill"') == 0 and facts["kills"] == 0
    # a producer's death is the model's producer's
    rt, _ = tlc_traces.render_trace(SENT[:2] + [{"op": "kill", "role": "produce", "client": "p1"}])
    assert rt.events[-1]["p"] == "Prod"


def test_kill_records_are_read_and_checked(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(KILL_CLI) + "\n" + json.dumps({"op": "kil", "clients": ["x"]}) + "\n")
    with pytest.raises(TraceError, match="unknown op 'kil'"):
        load_trace(p)
    assert death_of(KILL_CLI).clients == ("cli",) and not death_of(KILL_CLI).producer
    assert death_of({"op": "kill", "client": "x", "role": "publish"}).producer


@contextlib.contextmanager
def _watched_sleeper(tmp_path: Path) -> Iterator[tuple[Scenario, Proc]]:
    """A scenario whose watcher records deaths, and a long-sleeping consumer process in it."""
    m = M.load(M.impls_dir() / "shell" / "shell.toml")
    sc = Scenario("deaths", tmp_path / "deaths", m)
    make_layout(sc.root)
    sc.watcher.start()
    try:
        yield sc, Proc(f"{sys.executable} -c 'import time; time.sleep(60)'", {}, sc.dir / "logs", "sleeper",
                       "consume", "impl-9", sc.record_death)
    finally:
        sc.close()


def test_the_suite_records_the_processes_it_kills_and_only_those(tmp_path):
    """A running process the suite kills gets a kill record (its client ids: the one given and
    those of the processing/ names it held); one that exited on its own gets none."""
    with _watched_sleeper(tmp_path) as (sc, sleeper):
        done = Proc("true", {}, sc.dir / "logs", "done", "consume", "impl-8", sc.record_death)
        done.wait(10)
        sleeper.kill(holds=[f"own-id~{NAME}"])
        sleeper.wait(10)
    kills = [r for r in sc.records if r.get("op") == "kill"]
    assert [(k["clients"], k["role"], k["label"]) for k in kills] == [(["impl-9", "own-id"], "consume", "sleeper")]
    assert load_trace(sc.dir / "trace.jsonl")  # the trace file holds it in the documented format


def test_a_process_killed_twice_is_recorded_dead_once(tmp_path, monkeypatch):
    """Proc.wait kills the group's stragglers after a kill; on a loaded machine the killed group
    can still be listed as running then.  A second kill record made TLC reject the suite's own
    trace (a dead process cannot die again)."""
    with _watched_sleeper(tmp_path) as (sc, sleeper):
        monkeypatch.setattr(harness, "group_running", lambda pgid: True)  # not reaped yet, as under load
        sleeper.kill()
        sleeper.wait(10)
    assert [r["clients"] for r in sc.records if r.get("op") == "kill"] == [["impl-9"]]
