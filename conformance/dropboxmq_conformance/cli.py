"""``dropboxmq conformance run|list``: judge implementations black-box through the file system."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dropboxmq.extras import require

from .checks import CHECKS, FIX
from .replay import TLC_MAX_EVENTS

_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow", "skipped": "dim", "non-strict": "yellow",
          "informational": "cyan"}


@click.group("conformance")
def conformance() -> None:
    """The conformance suite: run producers, consumers, topic publishers and subscribers,
    and session adapters (any JMS provider, through adapters/java) named in manifests
    (TOML), watch the dropbox with inotify, and judge files, names and the recorded event
    trace against the lifecycle table and the spec."""


@conformance.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the checks (and the rules not checked) as JSON.")
def list_checks(as_json: bool) -> None:
    """Every check: its level per profile, the PROTOCOL.md rules it enforces, what it judges;
    then the MUST rules no check can observe from outside."""
    from . import protocol

    if as_json:
        rules = protocol.rules()
        click.echo(json.dumps({
            "protocol": protocol.version(),
            "checks": [{"id": c.id, "role": c.role, "rule": c.rule, "fix": FIX.get(c.id, ""),
                        "level": {p: c.level(p) for p in protocol.PROFILES},
                        "enforces": [{"id": r, "level": rules[r].level, "strict_level": rules[r].strict_level,
                                      "text": rules[r].text} for r in c.rules]} for c in CHECKS],
            "not_checked": [{"id": r, "level": rules[r].level, "why": why}
                            for r, why in protocol.NOT_CHECKED.items()]}, indent=1))
        return
    width = min(shutil.get_terminal_size((80, 24)).columns, 100)
    for line in textwrap.wrap(f"{len(CHECKS)} checks of {protocol.version()}, spec/PROTOCOL.md. Level: in the "
                              "default profile / in the strict one.", width):
        click.echo(line)
    for c in CHECKS:
        lv = c.level()
        strict = c.level(protocol.STRICT)
        click.echo("")
        click.echo(f"{c.id}  [{c.role}]  {lv}" + (f" / strict {strict}" if strict != lv else ""))
        for line in textwrap.wrap(c.rule, width - 4):
            click.echo("    " + line)
        for line in textwrap.wrap("enforces " + c.ref.removeprefix("PROTOCOL.md "), width - 4):
            click.echo("    " + line)
    click.echo("")
    click.echo("Not checked (not observable from outside; never counted as passed):")
    for r, why in protocol.NOT_CHECKED.items():
        for i, line in enumerate(textwrap.wrap(f"{r} ({protocol.rules()[r].level}): {why}", width - 4)):
            click.echo(("  " if i == 0 else "    ") + line)


@conformance.command("run")
@click.option("--impl", "impls", multiple=True, metavar="MANIFEST",
              help="A manifest (path, or the name of a shipped one); repeatable. Default: the embedded set "
                   "(reference, shell, every broken example).")
@click.option("--only", "only", multiple=True, metavar="CHECK", help="Run only this check (or prefix, e.g. producer, subscriber); repeatable.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the HTML report here.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/conformance"),
              show_default=True, help="Work directory: roots, traces, logs, report.json.")
@click.option("--jobs", "-j", default=3, show_default=True, type=click.IntRange(1, 16),
              help="Implementations judged in parallel.")
@click.option("--no-tlc", is_flag=True, help="Skip TLC trace validation (model.tlc is then inconclusive).")
@click.option("--tlc-max-events", default=TLC_MAX_EVENTS, show_default=True, type=click.IntRange(1),
              help="Traces with more message events than this are judged by the fast replay only "
                   "(the 1,500-event contention trace takes TLC ~40 s).")
@click.option("--profile", type=click.Choice(["default", "strict"]), default="default", show_default=True,
              help="default: the 1.2 protocol with JMS 1.1 semantics (delivery count optional); strict: JMS 2.0 "
                   "on top (JMSXDeliveryCount required, shared subscriptions). The summary shows both levels.")
def run(impls, only, junit, html_path, out, jobs, no_tlc, tlc_max_events, profile) -> None:
    """Run the suite; exit 1 if an implementation expected to pass fails a check, a
    broken example is not caught by a check named in its caught_by that every
    pass-expected implementation passes (catch rate below 100 %), or TLC could not
    judge (missing, crashed, timed out: overall INCONCLUSIVE; --no-tlc skips TLC)."""
    require("conformance run", "conformance", "jsonschema", "inotify_simple")  # manifests: a schema; the watcher: inotify
    from . import manifest as M
    from . import report, runner

    console = Console(stderr=True)
    try:
        paths = [M.find(s) for s in impls] if impls else M.default_manifests()
        manifests = [M.load(p) for p in paths]
        wanted = runner.wanted_checks(list(only))
    except (M.ManifestError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if len({m.name for m in manifests}) != len(manifests):
        raise click.ClickException("two manifests have the same name")
    for m in manifests:
        if m.extra:
            require(f"--impl {m.name}", m.extra)
    out = out.resolve()
    with Progress(TextColumn("[bold]conformance"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=not console.is_terminal) as progress:
        # one step per scenario of every implementation, and one for the TLC batch
        steps = sum(len(runner.planned_scenarios(m, wanted)) for m in manifests) + (0 if no_tlc else 1)
        task = progress.add_task("starting", total=steps)

        def tick(what: str) -> None:
            progress.update(task, description=what)

        def stepped() -> None:
            progress.advance(task)

        def done(rep) -> None:
            progress.update(task, description=f"{rep.name}: {rep.verdict}")

        summary = runner.run_all(manifests, out, wanted, tlc=not no_tlc, jobs=jobs, tick=tick, done=done,
                                 tlc_max_events=tlc_max_events, stepped=stepped, profile=profile)

    report.write_json(summary, out / "report.json")
    if html_path:
        report.write_html(summary, html_path)
    if junit:
        report.write_junit(summary, junit)
    stdout = Console()
    _print_summary(summary, stdout if stdout.is_terminal else Console(width=150), tlc=not no_tlc)
    if html_path:
        console.print(f"HTML report: {html_path}")
    if junit:
        console.print(f"JUnit XML:   {junit}")
    sys.exit(0 if summary.ok else 1)


def _print_summary(summary, console: Console, tlc: bool) -> None:
    from .findings import findings

    table = Table(title="conformance summary")
    for col in ("implementation", "expected", "verdict", "default", "strict", "pass", "fail", "non-strict",
                "inconcl.", "caught by / failed rules", "time"):
        table.add_column(col, no_wrap=col not in ("caught by / failed rules",))
    for rep in summary.reports:
        style = "green" if rep.ok else "bold red"
        if rep.expect == "fail":
            named = ", ".join(rep.caught_by)
        else:  # a pass-expected implementation: the rules it broke, worst first
            named = ", ".join(f"{f.rule} ({f.word.lower()})" for f in findings(rep.results)
                              if f.status != "informational")
        levels = rep.levels
        table.add_row(rep.name, rep.expect, Text(rep.verdict, style=style), levels["default"], levels["strict"],
                      str(rep.count("pass")), str(rep.count("fail")), str(rep.count("non-strict")),
                      str(rep.count("inconclusive")), Text(named), f"{rep.seconds:.1f}s")
    console.print(table)
    for rep in summary.reports:
        if rep.expect == "pass":
            for f in findings(rep.results):
                console.print(Text.assemble((f"  {rep.name} ", "bold"), (f.word, _STYLE.get(f.status, "yellow")),
                                            f" {f.rule} ({f.level}) {f.rule_text}"), soft_wrap=True)
                for line in f.evidence[:3]:
                    console.print(Text(f"      evidence: {line}"), soft_wrap=True)
                console.print(Text(f"      what to change: {f.fix}"), soft_wrap=True)
            for r in rep.results:
                if r.status == "inconclusive":
                    console.print(Text.assemble((f"  {rep.name} ", "bold"), ("inconclusive", "yellow"),
                                                f" {r.check}: {r.summary}"), soft_wrap=True)
        if rep.error:
            console.print(Text(f"  {rep.name}: run error: {rep.error}", style="red"))
    rate = summary.catch_rate
    if rate is not None:
        caught = sum(1 for r in summary.broken if r.ok)
        console.print(Text(f"catch rate: {rate * 100:.0f} % ({caught}/{len(summary.broken)} broken examples caught "
                           "by a named check)", style="green" if rate == 1.0 else "bold red"))
    for why in summary.inconclusive:
        console.print(Text(f"  inconclusive: {why}", style="yellow"), soft_wrap=True)
    if summary.inconclusive:
        console.print(Text(f"  model.tlc needs {TLC_NEEDS}; --no-tlc runs without it", style="yellow"),
                      soft_wrap=True)
    console.print(f"wall time: {summary.seconds:.1f} s (TLC batch {summary.tlc_seconds:.1f} s); overall: "
                  + _overall(summary, tlc))


#: what TLC trace validation needs from an installation
TLC_NEEDS = "TLC: the spec (package data), tla2tools.jar (pip install 'dropboxmq[conformance]') and java 17+"


def _overall(summary, tlc: bool) -> str:
    if summary.overall == "OK" and not tlc:
        return "[green]OK[/green] [yellow](without TLC: --no-tlc)[/yellow]"
    return {"OK": "[green]OK[/green]", "INCONCLUSIVE": "[yellow]INCONCLUSIVE[/yellow] (TLC could not judge; exit 1)"}.get(
        summary.overall, "[bold red]FAILED[/bold red]")


if __name__ == "__main__":
    conformance()
