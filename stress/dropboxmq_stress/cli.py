"""``dropboxmq stress``: run, check and compare stress runs."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from dropboxmq.extras import require

SUMMARY_KEYS = ("valid", "attempt-count", "acknowledged-count", "ok-count", "lost-count", "duplicated-count",
                "unexpected-count", "recovered-count", "in-doubt-count", "quarantined-count",
                "duplicates-explained", "duplicates-unexplained", "corrupt-count", "acked-unobserved-count",
                "kills", "faults-injected", "trials-run", "trials-invalid")


def _print_case(name: str, r: dict) -> None:
    figs = " ".join(f"{k}={r[k]}" for k in SUMMARY_KEYS if k in r)
    click.echo(f"{name}: {figs}")
    if r.get("throughput"):
        t, lat = r["throughput"], r["latency"]
        p50, p99 = lat["send"]["p50"], lat["send"]["p99"]
        click.echo(f"  throughput send {t['send_per_s']:.1f}/s deliver {t['deliver_per_s']:.1f}/s; send latency "
                   f"p50 {p50 if p50 is None else round(p50 * 1000, 2)} ms p99 "
                   f"{p99 if p99 is None else round(p99 * 1000, 2)} ms")
    if r.get("skipped"):
        click.echo(f"  SKIPPED/DEGRADED: {json.dumps(r['skipped'])}")
    for d in (r.get("duplicates") or {}).get("unexplained", [])[:5]:
        click.echo(f"  UNEXPLAINED DUPLICATE {d}")
    for v in (r.get("lost") or [])[:5]:
        click.echo(f"  LOST {v}")
    for t in (r.get("invalid") or [])[:10]:
        click.echo(f"  INVALID TRIAL {t['op']}/{t['rename_path']} {t['action']} at call {t['n']} ({t['kind']}): "
                   f"{t['outcome']}; {t['note']}")


@click.group("stress")
def stress() -> None:
    """Stress and fault runs with Jepsen-style (total-queue) accounting."""


@stress.command("run")
@click.option("--profile", "profile_name", default="smoke", show_default=True,
              type=click.Choice(["ci", "smoke", "long"]), help="ci: reduced smoke; smoke: <= 3 min; long: every nemesis")
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports/stress"), show_default=True)
@click.option("--seed", type=int, default=None, help="random schedule seed (default: time-based)")
@click.option("--only", multiple=True, help="only cases with this name or nemesis (repeatable)")
@click.option("--duration-scale", type=float, default=1.0, show_default=True)
@click.option("--baseline", type=click.Path(exists=True, path_type=Path), default=None,
              help="compare with this baseline report (fails on regression)")
@click.option("--tolerance", type=float, default=0.5, show_default=True)
def run_cmd(profile_name: str, out: Path, seed: int | None, only: tuple[str, ...], duration_scale: float,
            baseline: Path | None, tolerance: float) -> None:
    """Run a profile; write OUT/report.json, OUT/report.html and OUT/<case>/history/*.jsonl."""
    require("dropboxmq stress run", "stress", "multiprocess")
    from . import checker, faults, run

    cases = run.with_overrides(run.profile(profile_name, seed), duration_scale, only)
    if run.needs_fiu(cases) and not faults.fiu_available() and os.path.exists(faults.PRELOAD):
        click.echo(f"re-executing with LD_PRELOAD={faults.PRELOAD} (libfiu POSIX fault points)", err=True)
        sys.stdout.flush()
        faults.ensure_preloaded([sys.executable, "-m", "dropboxmq.cli"] + sys.argv[1:])
    started = time.perf_counter()
    interactive = sys.stdout.isatty()

    def progress(i: int, case, result: dict | None) -> None:
        """Each case's figures as soon as it ends; on a terminal, which case runs now."""
        if result is None:
            if interactive:
                click.echo(f"[{i + 1}/{len(cases)}] {case.name} (workload {case.workload.duration:g} s, "
                           f"{time.perf_counter() - started:.0f} s elapsed) ...", err=True)
        else:
            _print_case(case.name, result)

    report = run.run_profile(cases, out, on_case=progress)
    f = report["figures"]
    click.echo("total-queue: " + " ".join(f"{k}={f[k]}" for k in checker.TOTAL_QUEUE_KEYS))
    click.echo(f"report: {out / 'report.json'}  {out / 'report.html'}  wall {report['wall']:.1f}s  "
               f"{'VALID' if report['valid'] else 'INVALID'}")
    ok = report["valid"]
    if baseline is not None:
        from .compare import compare

        good, rows = compare(json.loads(baseline.read_text()), report, tolerance)
        for row in rows:
            click.echo(f"  {row}")
        ok &= good
    sys.exit(0 if ok else 1)


@stress.command("check")
@click.argument("history_dir", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print every figure as JSON")
def check_cmd(history_dir: Path, as_json: bool) -> None:
    """Check one case directory (or a bare history directory); exit 1 when invalid."""
    from .checker import check_dir

    r = check_dir(history_dir)
    if as_json:
        click.echo(json.dumps(r, indent=1))
    else:
        _print_case(str(history_dir), r)
    sys.exit(0 if r["valid"] else 1)


@stress.command("compare")
@click.argument("baseline", type=click.Path(exists=True, path_type=Path))
@click.argument("run_report", metavar="RUN", type=click.Path(exists=True, path_type=Path))
@click.option("--tolerance", type=float, default=0.5, show_default=True,
              help="worst acceptable ratio (run/baseline for rates, baseline/run for latencies)")
def compare_cmd(baseline: Path, run_report: Path, tolerance: float) -> None:
    """Compare RUN's report.json with BASELINE's; exit 1 on a regression."""
    from .compare import compare_files

    ok, rows = compare_files(baseline, run_report, tolerance)
    for row in rows:
        click.echo(" ".join(f"{k}={v}" for k, v in row.items()))
    click.echo("OK" if ok else "REGRESSION")
    sys.exit(0 if ok else 1)
