"""Stress runs: cases, profiles, the worker cluster, final recovery + drain, the report.

A *profile* is a list of *cases*; each case has a fresh root (a plain
directory, a small tmpfs, or a loop-mounted xfs image), a workload
(:class:`workload.Workload`), a set of nemeses, and its own output directory
``<out>/<case>/`` with ``history/*.jsonl``, ``final-state.json``,
``case.json`` and ``figures.json``.  The profile writes ``<out>/report.json``
and ``<out>/report.html``.

After the workers stop (or are killed), every case ends the same way:
recover the root (``dropboxmq.recovery.recover``), snapshot where every file
is (``final-state.json``: in-doubt = working/ + processing/, quarantined =
error/), drain the queue with a recording consumer, and run the checker.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import checker, final_state, nemesis
from .history import History
from .workload import Workload, WorkerSpec, drain, worker_main

ALL_NEMESES = ("kill", "faults", "full-disk", "power-loss", "bad-input", "fail-at-n")


@dataclass
class Case:
    name: str
    workload: Workload
    nemeses: tuple[str, ...] = ()
    kill_interval: float = 2.0
    fault_probability: float = 0.02
    fault_actions: tuple[str, ...] = ("errno:ENOSPC", "errno:EIO", "errno:EACCES", "short")
    tmpfs_size: str = "1m"
    power_loss_at: float = 0.6  # fraction of the duration
    bad_input_interval: float = 0.25
    failn: dict = field(default_factory=dict)  # options for the fail-at-N driver
    seed: int = 1

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "workload"}
        d["workload"] = self.workload.to_dict()
        d["allow_quarantined"] = "faults" in self.nemeses or "bad-input" in self.nemeses
        return d


# ---------------------------------------------------------------- profiles


def profile(name: str, seed: int | None = None) -> list[Case]:
    seed = int(time.time()) % 100000 if seed is None else seed
    if name == "ci":  # reduced smoke for pytest: kills + contention + a full disk, ~40 s on 2 cores
        return [
            Case("kills", Workload(duration=12, producers=2, consumers=3, max_size=1024), ("kill",),
                 kill_interval=1.0, seed=seed),
            Case("full-disk", Workload(duration=6, producers=2, consumers=1, min_size=2048, max_size=8192,
                                       ack_modes=("client",)), ("full-disk",), tmpfs_size="256k", seed=seed + 1),
        ]
    if name == "smoke":  # <= 3 minutes: kills + contention + one full-disk case + a quick fail-at-N
        return [
            Case("kills", Workload(duration=45, producers=3, consumers=4), ("kill",), kill_interval=1.0,
                 seed=seed),
            Case("full-disk", Workload(duration=20, producers=2, consumers=2, min_size=2048, max_size=8192,
                                       ack_modes=("client", "auto")), ("full-disk",), tmpfs_size="512k",
                 seed=seed + 1),
            Case("fail-at-n", Workload(), ("fail-at-n",),
                 failn={"ops": ["send", "claim", "client_ack", "tx_commit"], "actions": ["errno:EIO", "kill-after"],
                        "rename_paths": ["renameat2"]}, seed=seed + 2),
        ]
    if name == "long":
        return [
            Case("kills", Workload(duration=120, producers=3, consumers=4), ("kill",), kill_interval=1.0,
                 seed=seed),
            Case("faults", Workload(duration=60, producers=2, consumers=3), ("faults", "kill"),
                 kill_interval=3.0, fault_probability=0.02, seed=seed + 1),
            Case("full-disk", Workload(duration=45, producers=3, consumers=2, min_size=2048, max_size=16384,
                                       ack_modes=("client", "auto", "transacted")), ("full-disk",),
                 tmpfs_size="1m", seed=seed + 2),
            Case("power-loss", Workload(duration=20, producers=3, consumers=2), ("power-loss",), seed=seed + 3),
            Case("power-loss-kills", Workload(duration=20, producers=2, consumers=2), ("power-loss", "kill"),
                 kill_interval=1.0, seed=seed + 4),
            Case("bad-input", Workload(duration=30, producers=2, consumers=3), ("bad-input",),
                 bad_input_interval=0.2, seed=seed + 5),
            Case("fail-at-n", Workload(), ("fail-at-n",),
                 failn={"ops": ["send", "send_np", "send_many", "tx_send", "claim", "client_ack", "tx_commit"],
                        "actions": ["errno:EIO", "errno:ENOSPC", "short", "kill-before", "kill-after"],
                        "rename_paths": ["renameat2", "link"]}, seed=seed + 6),
        ]
    raise ValueError(f"unknown profile {name!r} (ci, smoke, long)")


def needs_fiu(cases: list[Case]) -> bool:
    return any(n in c.nemeses for c in cases for n in ("faults", "fail-at-n"))


# ---------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self, case: Case, root: Path, hist_dir: Path, deadline: float):
        import multiprocess

        self.ctx = multiprocess.get_context("fork")
        self.case, self.root, self.hist_dir, self.deadline = case, root, hist_dir, deadline
        self.w = case.workload
        self.incarnations: dict[tuple[str, int], int] = {}
        self.live: dict[tuple[str, int], tuple[WorkerSpec, Any]] = {}
        self.rng = random.Random(case.seed)

    def spawn(self, role: str, index: int) -> None:
        key = (role, index)
        inc = self.incarnations.get(key, 0) + 1
        self.incarnations[key] = inc
        ack_mode = self.w.ack_modes[index % len(self.w.ack_modes)] if role == "consumer" else ""
        faulty = "faults" in self.case.nemeses
        spec = WorkerSpec(role, index, inc, ack_mode=ack_mode, seed=self.rng.randrange(1 << 30),
                          fault_probability=self.case.fault_probability if faulty else 0.0,
                          fault_actions=self.case.fault_actions)
        proc = self.ctx.Process(target=worker_main, args=(spec, self.w, str(self.root), str(self.hist_dir),
                                                         self.deadline), name=spec.name)
        proc.start()
        self.live[key] = (spec, proc)

    def start(self) -> None:
        for i in range(self.w.consumers):
            self.spawn("consumer", i)
        for i in range(self.w.producers):
            self.spawn("producer", i)

    def kill_random(self, rng: random.Random, hist: History, restart: bool) -> bool:
        alive = [k for k, (_, p) in self.live.items() if p.is_alive()]
        if not alive:
            return False
        key = rng.choice(sorted(alive))
        spec, proc = self.live[key]
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        proc.join()
        # recorded after the victim is dead: all its records are earlier than this one
        hist.record("info", "kill", victim=spec.name, nemesis=True, detail=f"SIGKILL {spec.name}")
        if restart and time.time() < self.deadline - 0.3:
            self.spawn(*key)
        return True

    def join(self, grace: float, hist: History) -> None:
        """Wait for every worker (including incarnations restarted meanwhile) to exit."""
        end = time.time() + grace
        while time.time() < end:
            alive = [p for _, p in list(self.live.values()) if p.is_alive()]
            if not alive:
                break
            alive[0].join(max(0.0, min(0.5, end - time.time())))
        stragglers = [(s, p) for s, p in self.live.values() if p.is_alive()]
        nemesis.kill_all(stragglers, hist, "straggler past the deadline")

    def kill_all(self, hist: History, reason: str) -> None:
        nemesis.kill_all(list(self.live.values()), hist, reason)


# ---------------------------------------------------------------- final state


def finish(root: Path, case: Case, out: Path, hist: History) -> dict:
    """Recover, snapshot, drain. Returns the recovery report."""
    from dropboxmq.recovery import recover

    t0 = time.time()
    rep = recover(root)
    hist.record("info", "recover", detail=json.dumps(rep.as_dict())[:500], secs=time.time() - t0)
    state = final_state.snapshot(root, case.workload.queue)
    (out / "final-state.json").write_text(json.dumps(state))
    n = drain(root, case.workload.queue, out / "history")
    hist.record("info", "drain", drained=n)
    return rep.as_dict()


# ---------------------------------------------------------------- one case


def run_case(case: Case, out: Path, scratch: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    hist_dir = out / "history"
    # a history left by an earlier run into the same --out would be counted with this one's
    # (seen: "lost 3" and thousands of unexplained duplicates from two make stress-smoke runs)
    shutil.rmtree(hist_dir, ignore_errors=True)
    hist_dir.mkdir()
    (out / "case.json").write_text(json.dumps(case.to_dict(), indent=1, default=list))
    started = time.time()
    if "fail-at-n" in case.nemeses:
        from . import failn

        result = failn.run(case, out, scratch)
        result["wall"] = time.time() - started
        (out / "figures.json").write_text(json.dumps(result, indent=1))
        return result
    skipped: dict[str, str] = {}
    hist = History(hist_dir, "nemesis")
    work = scratch / case.name
    work.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {}
    if "faults" in case.nemeses:
        from . import faults

        if not faults.fiu_available():
            skipped["faults(libfiu)"] = ("libfiu preload not active: open/write/fsync/rename/unlink faults "
                                         "raised at the Python boundary instead")
    if "full-disk" in case.nemeses:
        ok, why = nemesis.can_mount_tmpfs(scratch)
        if not ok:
            return _skipped(case, out, {"full-disk": why})
        with nemesis.tmpfs_mount(work / "tmpfs", case.tmpfs_size) as mnt:
            extra = _run_workload(case, mnt / "root", out, hist, scratch)
    elif "power-loss" in case.nemeses:
        ok, why = nemesis.can_power_loss(scratch)
        if not ok:
            return _skipped(case, out, {"power-loss": why})
        with nemesis.xfs_mount(work / "xfs") as mnt:
            extra = _run_workload(case, mnt / "root", out, hist, scratch, xfs=(mnt, work / "xfs" / "xfs.img"))
    else:
        extra = _run_workload(case, work / "root", out, hist, scratch)
    hist.close()
    figures = checker.check_dir(out)
    figures.update(extra)
    figures["skipped"] = skipped | extra.get("skipped", {})
    figures["case"] = case.name
    figures["nemeses"] = list(case.nemeses)
    figures["wall"] = time.time() - started
    if extra.get("problems"):
        figures["valid"] = False
    (out / "figures.json").write_text(json.dumps(figures, indent=1))
    return figures


def _skipped(case: Case, out: Path, why: dict) -> dict:
    fig = {"case": case.name, "nemeses": list(case.nemeses), "valid": None, "skipped": why}
    (out / "figures.json").write_text(json.dumps(fig, indent=1))
    return fig


def _run_workload(case: Case, root: Path, out: Path, hist: History, scratch: Path,
                  xfs: tuple[Path, Path] | None = None) -> dict:
    from dropboxmq.message import Queue
    w = case.workload
    root.mkdir(parents=True, exist_ok=True)
    from dropboxmq import layout
    from dropboxmq.making import ensure_dropbox
    from dropboxmq.dirs import ensure_layout

    ensure_layout(root)
    ensure_dropbox(layout.queue_box(root, Queue(w.queue)))
    t_start = time.time()
    deadline = t_start + w.duration
    cluster = Cluster(case, root, out / "history", deadline)
    cluster.start()
    threads: list = []
    extra: dict[str, Any] = {"problems": []}
    if "kill" in case.nemeses:
        k = nemesis.KillNemesis(cluster, hist, case.kill_interval, deadline - 0.5, case.seed)
        k.start()
        threads.append(k)
    janitor = None
    if "full-disk" in case.nemeses:
        janitor = nemesis.Janitor(root / w.queue / "incoming", hist)
        janitor.start()
        threads.append(janitor)
    bad = None
    if "bad-input" in case.nemeses:
        bad = nemesis.BadInput(root / w.queue / "incoming" / "target", scratch / case.name / "outside", hist,
                               case.bad_input_interval, deadline - 1.0, case.seed)
        bad.start()
        threads.append(bad)
    if xfs is not None:
        mnt, img = xfs
        at = t_start + case.power_loss_at * w.duration
        while time.time() < at:
            time.sleep(0.05)  # the schedule, not synchronisation
        for t in threads:  # no kill/restart from here on: every worker is frozen at once
            t.stop.set()
            t.join()
        # The instant of the power loss: every worker stops (SIGSTOP, all threads in state T)
        # BEFORE the shutdown, as a real power loss stops them.  Shutting down under running
        # workers let calls straddling the shutdown report success for discarded work (issue 6).
        pids = [p.pid for _, p in cluster.live.values() if p.is_alive()]
        stuck = nemesis.freeze(pids)
        hist.record("info", "power-loss", nemesis=True, frozen=len(pids), stuck=len(stuck),
                    detail="workers frozen, then xfs_io -x -c shutdown (log not flushed)")
        nemesis.shutdown_xfs(mnt)
        if stuck:
            extra["problems"].append(f"power loss: {len(stuck)} worker(s) did not stop before the shutdown")
        cluster.kill_all(hist, "power loss")
        nemesis.remount(mnt, img)
        hist.record("info", "remount", nemesis=True, detail="mounted again after the shutdown")
    else:
        while time.time() < deadline:
            time.sleep(0.1)  # the schedule, not synchronisation: workers stop at the deadline
        for t in threads:  # no kill (and so no restart) once the workers are winding down
            t.stop.set()
            t.join()
        cluster.join(w.duration + 30.0 - (time.time() - t_start), hist)
    for t in threads:
        t.stop.set()
        t.join()
    if janitor is not None:
        janitor.sweep()
    if bad is not None:
        extra["problems"] += bad.check_outside()
        extra["injected"] = bad.n
        extra["skipped"] = dict(bad.skipped)
        bad.release_immutable(root)
        left = [p for p in bad.immutable if p.exists()]
        extra["immutable-left-in-target"] = len(left)
    extra["recovery"] = finish(root, case, out, hist)
    if bad is not None:
        # consumers kept delivering good messages while garbage arrived
        extra["problems"] += _liveness(out / "history", deadline)
    if not extra["problems"]:
        del extra["problems"]
    return extra


def _liveness(hist_dir: Path, deadline: float) -> list[str]:
    from .history import read_history

    recs = [r for r in read_history(hist_dir) if r.get("f") == "receive" and r.get("type") == "ok"
            and r.get("value") and not r.get("foreign") and r.get("mode") != "drain"]
    if not recs:
        return ["consumers delivered no good message at all"]
    last = max(r["t"] for r in recs)
    if last < deadline - 5.0:
        return [f"consumers stopped delivering good messages {deadline - last:.1f}s before the end"]
    return []


# ---------------------------------------------------------------- a profile


def run_profile(cases: list[Case], out: Path, scratch: Path | None = None, html: bool = True,
                on_case: Callable[[int, Case, dict | None], None] | None = None) -> dict:
    """Run every case; ``on_case(i, case, None)`` as case i starts, ``(i, case, result)`` when it ends."""
    import tempfile

    # import the library once, up front: workers are forked from here, and a tree being
    # edited while a long run goes on must not change the code under test half-way
    import dropboxmq.recovery  # noqa: F401
    import dropboxmq.connection  # noqa: F401 (and the session, producer and consumer)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own_scratch = scratch is None
    scratch = Path(scratch or tempfile.mkdtemp(prefix="dmq-stress-"))
    started = time.time()
    results = {}
    try:
        for i, case in enumerate(cases):
            if on_case is not None:
                on_case(i, case, None)
            results[case.name] = run_case(case, out / case.name, scratch)
            if on_case is not None:
                on_case(i, case, results[case.name])
    finally:
        if own_scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "valid": all(r.get("valid") is not False for r in results.values()),
        "skipped": {k: r["skipped"] for k, r in results.items() if r.get("skipped")},
        "wall": time.time() - started,
        "cases": results,
        "figures": summary(results),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    if html:
        from .report import write_html

        write_html(report, out / "report.html")
    return report


def summary(results: dict) -> dict:
    """Totals over the cases, plus the per-case throughput and latency the comparator uses."""
    tot: dict[str, Any] = {k: 0 for k in checker.TOTAL_QUEUE_KEYS}
    for r in results.values():
        for k in checker.TOTAL_QUEUE_KEYS:
            tot[k] += r.get(k) or 0
    for name, r in results.items():
        if "throughput" in r:
            tot[f"{name}.deliver_per_s"] = r["throughput"]["deliver_per_s"]
            tot[f"{name}.send_per_s"] = r["throughput"]["send_per_s"]
            tot[f"{name}.send_p50"] = r["latency"]["send"]["p50"]
            tot[f"{name}.send_p99"] = r["latency"]["send"]["p99"]
    return tot


def with_overrides(cases: list[Case], duration_scale: float = 1.0, only: tuple[str, ...] = ()) -> list[Case]:
    out = []
    for c in cases:
        if only and not set(c.nemeses) & set(only) and c.name not in only:
            continue
        out.append(replace(c, workload=replace(c.workload, duration=c.workload.duration * duration_scale)))
    return out
