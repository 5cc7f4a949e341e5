"""``python -m dropboxmq_stress.crashstates``: every crash state of each library operation, checked."""

from __future__ import annotations

import json
import sys
import time

import click

from .check import ALLOWED, PROMISES
from .explore import DEEP_BOUNDS, DEEP_ENVS, DEFAULT_BOUNDS, DEFAULT_ENVS, SHORT_BOUNDS, Report, explore
from .model import MODELS
from .operations import DEEP_SCALE, DEFAULT_SCALE, OPERATIONS


def _print(report: Report, show: int, err: bool) -> None:
    if report.same_as:
        click.echo(f"{report.operation:16s} {report.environment:13s} syscalls {report.syscalls:4d}  recorded "
                   f"{report.recorded:3d}  the same calls as {report.same_as}: not explored again", err=err)
        return
    broken = sum(report.violations.values())
    allowed = ", ".join(f"{k} {v}" for k, v in sorted(report.allowed.items()))
    click.echo(f"{report.operation:16s} {report.environment:13s} syscalls {report.syscalls:4d}  recorded "
               f"{report.recorded:3d}  states {report.states:6d}{'+' if report.capped else ' '}  "
               f"violations {broken:4d}  {report.seconds:6.1f} s" + (f"  (allowed: {allowed})" if allowed else ""), err=err)
    for finding in report.findings[:show]:
        click.echo(err=err, message=f"  VIOLATION {finding.rule}: {finding.detail}")
        click.echo(err=err, message=f"  crash after call {finding.prefix} (LOST = issued, not persisted):")
        for line in finding.calls:
            click.echo(err=err, message=f"  {line}")
        click.echo(err=err, message="  the crash left:      " + ("; ".join(finding.crash_listing) or "(nothing)"))
        click.echo(err=err, message="  after recovery:      " + ("; ".join(finding.recovered_listing) or "(nothing)"))


@click.command("crashstates")
@click.option("--deep", is_flag=True, help="larger batches, wider reorderings, the no-renameat2 fallback too "
              "(make stress)")
@click.option("--short", "short", is_flag=True, help="the narrow bounds of tests/test_crashstates.py")
@click.option("--op", "ops", multiple=True, type=click.Choice(sorted(OPERATIONS)),
              help="only this operation (repeatable)")
@click.option("--env", "envs", multiple=True, type=click.Choice(sorted(DEEP_ENVS)),
              help="only this environment (repeatable): quiet = batches syncfs, busy = each file's fsync, "
              "no-renameat2 = the link()+unlink() fallback")
@click.option("--model", "model_name", type=click.Choice(sorted(MODELS)), default="abstract", show_default=True,
              help="abstract: ALICE's abstract persistence model; journaled: ext4 data=ordered / xfs")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="also write the full report as JSON to this file ('-': standard output)")
@click.option("--show", type=int, default=1, show_default=True, help="violating states shown per operation")
def main(deep: bool, short: bool, ops: tuple[str, ...], envs: tuple[str, ...], model_name: str,
         json_path: str | None, show: int) -> None:
    """Record each library operation's file-system calls and check every state a crash may leave.

    For each crash point (a prefix of the calls) the persistence model decides which of the
    calls not yet ordered by an fsync may have persisted; each distinct state is written to a
    scratch directory, recovered as the next process would (a new connection as the dead
    client, then recover), and judged by the promises of spec/PROTOCOL.md, section Durability.
    Exit status 1 when a promise is broken.
    """
    bounds = DEEP_BOUNDS if deep else SHORT_BOUNDS if short else DEFAULT_BOUNDS
    scale = DEEP_SCALE if deep else DEFAULT_SCALE
    env_names = envs or (DEEP_ENVS if deep else DEFAULT_ENVS)
    model = MODELS[model_name]
    started = time.monotonic()
    err = json_path == "-"  # the JSON alone on standard output: the progress goes to standard error
    click.echo(f"model {model.name}; bounds {bounds}; {scale}", err=err)
    reports = []
    for name in ops or OPERATIONS:
        explored: dict[tuple[str, ...], str] = {}
        for env in env_names:
            report = explore(OPERATIONS[name], env, model, bounds, scale, explored=explored)
            reports.append(report)
            _print(report, show, err)
    total_states = sum(r.states for r in reports)
    total_violations = sum(sum(r.violations.values()) for r in reports)
    click.echo(f"{len(reports)} recordings, {total_states} crash states, {total_violations} violations "
               f"in {time.monotonic() - started:.0f} s", err=err)
    if json_path:
        doc = {"model": model.name, "bounds": bounds.__dict__, "scale": scale.__dict__,
               "promises": PROMISES, "allowed": ALLOWED, "reports": [r.as_dict() for r in reports]}
        text = json.dumps(doc, indent=1)
        if json_path == "-":
            click.echo(text)
        else:
            with open(json_path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    sys.exit(1 if total_violations else 0)


if __name__ == "__main__":
    main(prog_name="python -m dropboxmq_stress.crashstates")
