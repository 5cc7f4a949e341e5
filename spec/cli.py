"""``dropboxmq spec``: model-check the TLA+ specification in ``spec/`` with TLC, and validate traces.

``dropboxmq spec check`` (or ``python -m dropboxmq_spec.cli check``) runs SANY on
every module, the CI models, every mutant and witness, and checks coverage
(``tlc_models``); it prints a table and a last line ``N passed, N failed`` and
exits 1 on any surprise.

``dropboxmq spec validate-trace TRACE.jsonl...`` checks recorded traces with TLC
(``tlc_traces``).  TLC itself is run by ``tlc``.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import click

from dropboxmq.extras import require_tlc
from .tlc_models import Outcome, missing_coverage, models, run_model, sany_all
from .tlc_traces import validate_traces
from .tlc import TlcResult, spec_dir

__all__ = ["spec"]


def _states_cell(r: TlcResult | None) -> str:
    """Distinct states found (BFS), or states checked by a simulation."""
    if r is None:
        return ""
    if r.distinct is not None:
        return f"{r.distinct:,}"
    return "" if r.generated is None else f"{r.generated:,} simulated"


def _tlc_workers(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value != "auto" and not (value.isdigit() and int(value) > 0):
        raise click.BadParameter(f"{value!r}: a positive number or 'auto'")
    return value


@click.group(name="spec")
def spec() -> None:
    """The TLA+ specification (spec/): model checking and trace validation with TLC."""


@spec.command("check")
@click.option("--deep", is_flag=True, help="also run the larger models (make spec-deep)")
@click.option("--only", "only", multiple=True, help="run only models whose name contains NAME")
@click.option("--workers", default="1", show_default=True, callback=_tlc_workers,
              help="TLC -workers per run: a positive number or 'auto'")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(1), help="TLC runs at a time")
def check_cmd(deep: bool, only: tuple[str, ...], workers: str, jobs: int) -> None:
    """SANY, CI models, mutants, witnesses, coverage; exit 1 on any surprise."""
    if only:  # a filter that matches nothing would run nothing and pass
        names = [m.name for m in models(deep, spec_dir())]
        unmatched = [o for o in only if not any(o in name for name in names)]
        if unmatched:
            raise click.BadParameter(f"{unmatched[0]!r} matches no model (models: {', '.join(names)})",
                                     param_hint="--only")
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


@spec.command("validate-trace")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--timeout", default=600.0, show_default=True, help="seconds per TLC run")
@click.option("--workers", default="1", show_default=True, help="TLC -workers")
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 16),
              help="TLC runs at a time (traces with different constants need separate runs)")
def validate_trace_cmd(traces: tuple[str, ...], timeout: float, workers: str, jobs: int) -> None:
    """Check with TLC that each JSONL trace is a behaviour of Dropbox.

    A line {"op": "kill", "role": ..., "clients": [...]} is a process death: the only
    place a process dies in the model; a move with "recovery": true must find the
    holder dead (spec/README.md, "Trace validation").

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


if __name__ == "__main__":  # python -m dropboxmq_spec.cli check
    spec()
