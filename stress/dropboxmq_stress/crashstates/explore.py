"""Record an operation (in a forked child), enumerate its crash states, recover and judge each."""

from __future__ import annotations

import os
import pickle
import re
import select
import shutil
import signal
import tempfile
import time
import traceback
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .check import ALLOWED, Violation, census, judge, recover_state
from .model import MODELS, Bounds, CrashState, Mark, Model, Trace, crash_states, describe, materialise
from .operations import DEFAULT_SCALE, Expect, Operation, Scale
from .record import ENVIRONMENTS, Environment, Recorder

__all__ = ["Finding", "Report", "record", "explore", "scratch", "SHORT_BOUNDS", "DEFAULT_BOUNDS", "DEEP_BOUNDS", "DEFAULT_ENVS", "DEEP_ENVS"]

SHORT_BOUNDS = Bounds(full_subsets=4, few=1, full_data=4, max_states=400)
DEFAULT_BOUNDS = Bounds(full_subsets=8, few=1, full_data=64, max_states=3000)
DEEP_BOUNDS = Bounds(full_subsets=8, few=2, full_data=64, max_states=20000)
DEFAULT_ENVS = ("quiet", "busy")
DEEP_ENVS = ("quiet", "busy", "no-renameat2")


@dataclass
class Finding:
    rule: str
    detail: str
    prefix: int
    calls: list[str]  # the syscall prefix, each marked persisted or LOST
    crash_listing: list[str]  # the tree the crash left
    recovered_listing: list[str]  # the tree after recovery

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Report:
    operation: str
    environment: str
    model: str
    syscalls: int  # calls under the root while recording
    recorded: int  # of which change the file system or order it (the trace)
    states: int  # distinct crash states explored
    capped: bool  # max_states reached
    seconds: float
    same_as: str | None = None  # the environment whose recording made the very same calls (not explored again)
    violations: dict[str, int] = field(default_factory=dict)  # rule -> states that break it
    allowed: dict[str, int] = field(default_factory=dict)  # weaker promise -> states that use it
    findings: list[Finding] = field(default_factory=list)  # the first state of each rule

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["findings"] = [f.as_dict() for f in self.findings]
        return d


def scratch() -> str | None:
    """Where crash states are written and recovered: memory (tmpfs) when there is some, as
    thousands of small trees are made and removed; recovery's outcome does not depend on it."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


RECORDING_TIMEOUT = 600.0  # s: a recording child that hangs is killed, not waited for forever


def _in_child(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child; its result (pickled) or its traceback as RuntimeError.
    A child keeps what the operation patches, opens or leaves running (threads, fds, the
    library's own notes such as "renameat2 is unsupported") away from this process."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            try:
                payload = pickle.dumps(("ok", work()))
            except BaseException:
                payload = pickle.dumps(("error", traceback.format_exc()))
            with os.fdopen(write_end, "wb") as f:
                f.write(payload)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + RECORDING_TIMEOUT
    chunks = []
    with os.fdopen(read_end, "rb", buffering=0) as f:
        while True:
            ready, _, _ = select.select([f], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RuntimeError(f"the recording child gave no answer in {RECORDING_TIMEOUT:.0f} s: killed")
            chunk = f.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    payload = b"".join(chunks)
    os.waitpid(pid, 0)
    if not payload:
        raise RuntimeError("the recording child died without a word")
    status, value = pickle.loads(payload)
    if status != "ok":
        raise RuntimeError(f"recording failed:\n{value}")
    return value


def record(operation: Operation, env: Environment, scale: Scale = DEFAULT_SCALE,
           setup_patch: Callable[[], None] | None = None) -> tuple[Trace, Expect, int]:
    """Run ``operation`` in a fresh root in a child process and record it.  ``setup_patch``
    runs in the child first (the self-test's broken variants patch the library there)."""

    def work() -> tuple[Trace, Expect, int]:
        if setup_patch is not None:
            setup_patch()
        root = Path(tempfile.mkdtemp(prefix=f"crashstates-{operation.name}-", dir=scratch()))
        try:
            recorders: list[Recorder] = []

            def start() -> AbstractContextManager[Recorder]:
                rec = Recorder(root, env)
                recorders.append(rec)
                return rec

            expect = operation.run(root, scale, start)
            (rec,) = recorders
            return rec.trace, expect, rec.calls
        finally:
            shutil.rmtree(root, ignore_errors=True)

    result: tuple[Trace, Expect, int] = _in_child(work)
    return result


def _listing(tree: dict[str, bytes | None]) -> list[str]:
    out = []
    for path in sorted(tree):
        content = tree[path]
        if content is None:
            continue
        out.append(f"{path}  [{len(content)} B]")
    return out


def signature(trace: Trace) -> tuple[str, ...]:
    """The calls of a trace with generated names (message ids, uuids, counters) blotted out:
    two environments that made the same calls give the same crash states."""
    return tuple(re.sub(r"[0-9a-f]{8,}|\d+", "#", op.call) for op in trace.ops)


def explore(operation: Operation, env_name: str = "quiet", model: Model = MODELS["abstract"],
            bounds: Bounds = DEFAULT_BOUNDS, scale: Scale = DEFAULT_SCALE,
            setup_patch: Callable[[], None] | None = None, stop_at_first: bool = False,
            explored: dict[tuple[str, ...], str] | None = None) -> Report:
    """Record ``operation``, then recover and judge every crash state of it.  ``explored``
    (signature -> environment), when given, skips a recording whose calls were explored already."""
    started = time.monotonic()
    trace, expect, syscalls = record(operation, ENVIRONMENTS[env_name], scale, setup_patch)
    recorded = sum(1 for op in trace.ops if not isinstance(op, Mark))
    report = Report(operation.name, env_name, model.name, syscalls, recorded, 0, False, 0.0)
    if explored is not None:
        sig = signature(trace)
        if sig in explored:
            report.same_as = explored[sig]
            report.seconds = round(time.monotonic() - started, 2)
            return report
        explored[sig] = env_name
    baseline_tree = materialise(trace.baseline.root, trace.baseline.dirs, trace.baseline.files)
    initial = census(baseline_tree)
    work = Path(tempfile.mkdtemp(prefix="crashstates-check-", dir=scratch()))
    try:
        state: CrashState
        for state in crash_states(trace, model, bounds):
            report.states += 1
            recovered = recover_state(state.tree, work / "root", expect, state.links)
            violations = judge(initial, census(recovered), state.marks, expect)
            for v in violations:
                _note(report, trace, state, v, recovered)
            if stop_at_first and report.violations:
                break
        report.capped = report.states >= bounds.max_states
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = round(time.monotonic() - started, 2)
    return report


def _note(report: Report, trace: Trace, state: CrashState, v: Violation, recovered: dict[str, bytes | None]) -> None:
    if v.rule in ALLOWED:
        report.allowed[v.rule] = report.allowed.get(v.rule, 0) + 1
        return
    first = v.rule not in report.violations
    report.violations[v.rule] = report.violations.get(v.rule, 0) + 1
    if first:
        report.findings.append(Finding(v.rule, v.detail, state.prefix, describe(trace, state),
                                       _listing(state.tree), _listing(recovered)))
