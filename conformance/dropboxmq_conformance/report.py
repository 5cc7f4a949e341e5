"""Reports: an HTML page a person can read, JUnit XML for CI, and a JSON dump."""

from __future__ import annotations

import html
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from . import checks as C
from . import protocol
from .checks import BY_ID
from .findings import findings
from .runner import RunSummary

_COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "inconclusive": "#9a6700", "skipped": "#6e7781",
           "non-strict": "#bf8700", "informational": "#0969da"}
_STATE_COLORS = {"ABSENT": "#d0d7de", "NOT_COMMITTED": "#ddf4ff", "NEW": "#b6e3ff", "DELIVERED": "#fff8c5",
                 "ACKNOWLEDGED": "#aceebb", "EXPIRED": "#eaeef2", "DEAD_LETTER": "#ffd8b5", "ILLEGAL": "#ff8182"}


def _e(s) -> str:
    return html.escape(str(s))


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{_COLORS.get(status, "#6e7781")}">{_e(status)}</span>'


def _timeline(steps: list[dict]) -> str:
    """The counterexample: one message's states, event by event."""
    cells = []
    for s in steps:
        color = _STATE_COLORS.get(s.get("state", ""), "#eee")
        label = s.get("move") or s.get("op")
        note = f'<div class="note">{_e(s.get("note"))}</div>' if s.get("note") else ""
        if s.get("actor") and s["actor"] != "implementation":  # the suite's own helper moved it
            note += f'<div class="by">by {_e(s["actor"])}</div>'

        cells.append(f'<div class="step" style="background:{color}"><div class="seq">#{_e(s.get("seq"))} '
                     f't={float(s.get("t") or 0):.3f}s</div><div class="mv">{_e(label)}</div>'
                     f'<div class="st">{_e(s.get("state"))}</div><div class="path">{_e(s.get("path"))}</div>{note}</div>')
    return '<div class="timeline">' + '<div class="arrow">&rarr;</div>'.join(cells) + "</div>"


def _evidence(r: C.Result) -> str:
    ev = r.evidence or {}
    parts = []
    if ev.get("scenario"):
        parts.append(f'<div class="scn">scenario: <code>{_e(ev["scenario"])}</code></div>')
    for rj in ev.get("rejections") or []:
        parts.append(f'<h4>rejected trace <code>{_e(rj["scenario"])}</code>: {_e(rj["detail"])}</h4>'
                     + (_timeline(rj["timeline"]) if rj.get("timeline") else ""))
    if ev.get("timeline"):
        parts.append("<h4>counterexample: the message's states</h4>" + _timeline(ev["timeline"]))
    if ev.get("record"):
        parts.append(f'<div>first rejected event: <code>{_e(json.dumps(ev["record"]))}</code></div>')
    if ev.get("files"):
        parts.append("<div>files:</div><ul>" + "".join(f"<li><code>{_e(f)}</code></li>" for f in ev["files"]) + "</ul>")
    if ev.get("trace"):
        parts.append("<div>trace excerpt:</div><pre>" + "\n".join(_e(json.dumps(x)) for x in ev["trace"]) + "</pre>")
    if ev.get("text"):
        parts.append(f"<pre>{_e(ev['text'])}</pre>")
    return "".join(parts)


_MARKS = {"pass": "&#10003;", "fail": "&#10007;", "inconclusive": "?", "skipped": "&ndash;", "non-strict": "!",
          "informational": "i"}


def _matrix(summary: RunSummary) -> str:
    """Implementations down, checks across: one coloured cell per result, the whole run at a glance."""
    checks = list(dict.fromkeys(r.check for rep in summary.reports for r in rep.results))
    head = "".join(f'<th class="chk"><div title="{_e(BY_ID[c].rule if c in BY_ID else c)}">{_e(c)}</div></th>'
                   for c in checks)
    rows = []
    for rep in summary.reports:
        by_check = {r.check: r for r in rep.results}
        cells = []
        for c in checks:
            r = by_check.get(c)
            if r is None:
                cells.append('<td class="cell"></td>')
                continue
            cells.append(f'<td class="cell" style="background:{_COLORS.get(r.status, "#6e7781")}" '
                         f'title="{_e(r.status)}: {_e(r.summary)}">{_MARKS.get(r.status, "")}</td>')
        rows.append(f'<tr><th><a href="#impl-{_e(rep.name)}">{_e(rep.name)}</a> <small>({_e(rep.expect)} '
                    f'expected)</small></th>{"".join(cells)}</tr>')
    return (f'<table class="matrix"><tr><th>implementation \\ check</th>{head}</tr>{"".join(rows)}</table>'
            '<p><small>&#10003; pass &middot; &#10007; fail (a MUST broken) &middot; ! non-strict (a SHOULD broken) '
            "&middot; i informational (a MAY absent) &middot; ? inconclusive &middot; &ndash; skipped; "
            "hover a cell for its summary.</small></p>")


def write_html(summary: RunSummary, path: Path) -> None:
    rows = []
    for rep in summary.reports:
        ok_style = "ok" if rep.ok else "bad"
        rows.append(
            f'<tr class="{ok_style}"><td><a href="#impl-{_e(rep.name)}">{_e(rep.name)}</a></td>'
            f"<td>{_e(rep.expect)}</td><td><b>{_e(rep.verdict)}</b></td>"
            + "".join(f"<td>{_e(lv)}</td>" for lv in rep.levels.values())
            + "".join(f"<td>{rep.count(s)}</td>" for s in ("pass", "fail", "non-strict", "inconclusive", "skipped"))
            + f"<td>{_e(', '.join(rep.caught_by) if rep.expect == 'fail' else '')}</td><td>{rep.seconds:.1f}s</td></tr>")
    rate = summary.catch_rate
    rate_txt = "n/a" if rate is None else f"{rate * 100:.0f} % ({sum(r.ok for r in summary.broken)}/{len(summary.broken)})"
    sections = []
    for rep in summary.reports:
        items = []
        for r in rep.results:
            chk = BY_ID[r.check]
            open_attr = " open" if r.status == "fail" else ""
            body = _evidence(r)
            items.append(
                f'<details class="check"{open_attr}><summary>{_badge(r.status)} <code>{_e(r.check)}</code> '
                f"&mdash; {_e(r.summary)}</summary><div class=\"rule\"><b>rule:</b> {_e(chk.rule)}<br>"
                f"<b>enforces:</b> {_e(chk.ref)}</div>{body}</details>")
        err = f'<p class="bad">run error: {_e(rep.error)}</p>' if rep.error else ""
        heads = findings(rep.results)
        if heads:
            err += "<h3>findings</h3><ol>" + "".join(
                f'<li><b style="color:{_COLORS.get(f.status)}">{_e(f.word)}</b> <b>{_e(f.rule)}</b> ({_e(f.level)}) '
                f"{_e(f.rule_text)}<br><small>evidence: {_e('; '.join(f.evidence))}</small><br>"
                f"<b>what to change:</b> {_e(f.fix)}</li>" for f in heads) + "</ol>"
        if rep.manifest.waivers:
            err += "<p><b>waivers</b> (the manifest declares it cannot honour these):</p><ul>" + "".join(
                f"<li><code>{_e(c)}</code>: {_e(why)}</li>" for c, why in rep.manifest.waivers.items()) + "</ul>"
        sections.append(f'<section id="impl-{_e(rep.name)}"><h2>{_e(rep.name)} <small>({_e(rep.expect)} expected, '
                        f"{_e(rep.verdict)})</small></h2><p>{_e(rep.manifest.description)}<br><small>manifest: "
                        f"<code>{_e(rep.manifest.path)}</code></small></p>{err}{''.join(items)}</section>")
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>dropboxmq conformance</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #d0d7de;padding:4px 8px;text-align:left}} tr.bad td{{background:#ffebe9}}
.badge{{color:#fff;border-radius:4px;padding:1px 6px;font-size:85%}} details.check{{margin:4px 0;padding:2px 6px;border-left:3px solid #d0d7de}}
.rule{{color:#57606a;margin:4px 0}} pre{{background:#f6f8fa;padding:6px;overflow:auto;font-size:80%}}
.timeline{{display:flex;flex-wrap:wrap;align-items:center;gap:2px}} .step{{border:1px solid #8c959f;border-radius:6px;padding:4px;font-size:75%;max-width:260px}}
.step .by{{color:#8250df}} .step .mv{{font-weight:bold}} .step .path{{word-break:break-all;color:#57606a}} .arrow{{font-size:150%}} .note{{color:#cf222e}}
.bad{{color:#cf222e}} table.matrix td.cell{{color:#fff;text-align:center;min-width:1.2em;padding:2px}}
table.matrix th.chk{{vertical-align:bottom;padding:2px}} table.matrix th.chk div{{writing-mode:vertical-rl;transform:rotate(180deg);font-size:75%;font-weight:normal}}
</style></head><body>
<h1>dropboxmq conformance report</h1>
<p>{time.strftime("%Y-%m-%d %H:%M:%S")} &middot; wall time {summary.seconds:.1f} s &middot; catch rate of the broken examples:
<b>{_e(rate_txt)}</b> &middot; overall: <b class="{'ok' if summary.ok else 'bad'}">{_e(summary.overall)}</b></p>
{_matrix(summary)}
<table><tr><th>implementation</th><th>expected</th><th>verdict</th><th>default profile</th><th>strict profile</th>
<th>pass</th><th>fail</th><th>non-strict</th><th>inconclusive</th>
<th>skipped</th><th>caught by</th><th>time</th></tr>{''.join(rows)}</table>
<p><small>Judged by {_e(protocol.version())} (spec/PROTOCOL.md). Not checked, never counted as passed:
{_e("; ".join(f"{r}: {why}" for r, why in protocol.NOT_CHECKED.items()))}</small></p>
<p><small>pass / fail / inconclusive (the suite could not decide, says why) / skipped (role not played or property
waived by the manifest). A broken example is <i>caught</i> only by a check named in its <code>caught_by</code>
that every pass-expected implementation of this run passes.</small></p>
{''.join(sections)}
</body></html>"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")


def write_junit(summary: RunSummary, path: Path) -> None:
    """One testsuite per implementation, one testcase per check.  For a broken example,
    its own failures are expected (reported as output) and the test is 'caught'."""
    suites = ET.Element("testsuites", name="dropboxmq-conformance", time=f"{summary.seconds:.3f}")
    for rep in summary.reports:
        ts = ET.SubElement(suites, "testsuite", name=f"conformance.{rep.name}", time=f"{rep.seconds:.3f}")
        n = fails = skips = 0
        for r in rep.results:
            n += 1
            tc = ET.SubElement(ts, "testcase", classname=f"conformance.{rep.name}", name=r.check)
            text = f"{r.summary}\n{json.dumps(r.evidence, default=str)[:4000]}"
            if r.status == "fail" and rep.expect == "pass":
                fails += 1
                ET.SubElement(tc, "failure", message=r.summary[:500]).text = text
            elif r.status in (C.NON_STRICT, C.INFORMATIONAL):  # a pass, with the rule broken and the evidence
                ET.SubElement(tc, "system-out").text = f"{r.status} ({r.evidence.get('rule')}): {text}"
            elif r.status in ("inconclusive", "skipped"):
                skips += 1
                ET.SubElement(tc, "skipped", message=f"{r.status}: {r.summary}"[:500])
            else:
                ET.SubElement(tc, "system-out").text = f"{r.status}: {text}"
        if rep.expect == "fail":
            n += 1
            tc = ET.SubElement(ts, "testcase", classname=f"conformance.{rep.name}", name="caught-by-a-named-check")
            if not rep.ok:
                fails += 1
                ET.SubElement(tc, "failure", message="broken example not caught by any named check"
                              + (f" (expected {', '.join(rep.manifest.caught_by)})" if rep.manifest.caught_by else ""))
            else:
                ET.SubElement(tc, "system-out").text = "caught by " + ", ".join(rep.caught_by)
        if rep.error:
            n += 1
            fails += 1
            tc = ET.SubElement(ts, "testcase", classname=f"conformance.{rep.name}", name="run")
            ET.SubElement(tc, "error", message=rep.error[:500])
        ts.set("tests", str(n))
        ts.set("failures", str(fails))
        ts.set("skipped", str(skips))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def write_json(summary: RunSummary, path: Path) -> None:
    data = {"seconds": summary.seconds, "catch_rate": summary.catch_rate, "ok": summary.ok,
            "overall": summary.overall, "inconclusive": summary.inconclusive, "protocol": protocol.version(),
            "not_checked": protocol.NOT_CHECKED,
            "implementations": [{"name": r.name, "expect": r.expect, "verdict": r.verdict, "ok": r.ok,
                                 "profile": r.profile, "levels": r.levels,
                                 "findings": [f.as_dict() for f in findings(r.results)],
                                 "seconds": r.seconds, "error": r.error,
                                 "results": [x.as_dict() for x in r.results]} for r in summary.reports]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
