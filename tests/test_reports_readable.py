"""The HTML reports people read (issue 17): stress plots with labelled axes and units,
tables instead of raw JSON; parsed here with the standard library's own HTML/XML parsers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from dropboxmq_stress.report import write_html

SVG = "{http://www.w3.org/2000/svg}"


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)


def test_stress_report_plots_have_labelled_axes_and_tables_not_json(tmp_path: Path) -> None:
    case = {"valid": True, "attempt-count": 10, "ok-count": 10,
            "throughput": {"bucket": 0.5, "send_series": [1, 4, 6, 2], "deliver_series": [0, 3, 6, 3]},
            "timeline": [{"t": 0.7, "f": "kill", "victim": "consumer-1"}],
            "e2e_latency_samples": [0.001, 0.002, 0.01, 0.2],
            "latency": {"p50": 0.002, "p99": 0.2, "by_phase": {"claim": 0.0001}}, "duplicates": [], "lost": []}
    other = {"valid": False, "attempt-count": 3, "fsync": {"calls": 7}, "note": "power loss"}
    report = {"valid": False, "wall": 1.5, "cases": {"run": case, "faults": other},
              "skipped": {"nemesis-x": {"reason": "needs root"}}}
    write_html(report, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed SVG
        labels = {t.get("class"): "".join(t.itertext()) for t in root.iter(f"{SVG}text") if t.get("class")}
        assert set(labels) == {"xlabel", "ylabel"}, labels
        assert re.search(r"\((s|ms)\b", labels["xlabel"]), labels  # a unit on the x axis
        ticks = [t for t in root.iter(f"{SVG}text") if t.get("text-anchor") in ("middle", "end") and not t.get("class")]
        assert len(ticks) >= 5
    throughput, latency = svgs
    assert "messages per second" in throughput and "time since the start of the run (s)" in throughput
    assert "latency (ms, log scale)" in latency
    collected = _Collect()
    collected.feed(page)
    assert "pre" not in collected.tags and "{" not in re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    assert "<th>latency (s).p99</th><td>0.2</td>" in page and "<th>fsync.calls</th><td>7</td>" in page
    assert "<th>nemesis-x.reason</th><td>needs root</td>" in page


def test_conformance_report_opens_with_an_implementation_by_check_matrix(tmp_path: Path) -> None:
    from dropboxmq_conformance import checks as C
    from dropboxmq_conformance.manifest import default_manifests, load
    from dropboxmq_conformance.report import write_html as conformance_html
    from dropboxmq_conformance.runner import ImplReport, RunSummary

    manifests = [load(p) for p in default_manifests()[:2]]
    ids = [c.id for c in C.CHECKS][:3] if hasattr(C, "CHECKS") else list(C.BY_ID)[:3]
    statuses = [[C.PASS, C.FAIL, C.SKIPPED], [C.PASS, C.INCONCLUSIVE]]
    reports = [ImplReport(m, [C.Result(i, st, f"{st} because") for i, st in zip(ids, sts, strict=False)])  # the 2nd plays 2 of 3
               for m, sts in zip(manifests, statuses, strict=True)]
    conformance_html(RunSummary(reports, 1.0), tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text()
    matrix = re.search(r'<table class="matrix">(.*?)</table>', page, re.S)
    assert matrix is not None and page.index('class="matrix"') < page.index("<th>implementation</th><th>expected")
    rows = re.findall(r"<tr>(.*?)</tr>", matrix.group(1), re.S)
    assert len(rows) == 1 + len(manifests)  # the header, then one row per implementation
    assert all(i in rows[0] for i in ids)
    for m, sts, row in zip(manifests, statuses, rows[1:], strict=True):
        assert m.name in row
        cells = re.findall(r'<td class="cell"[^>]*?(?:title="(\w+):[^"]*")?>', row)
        assert cells == sts + [""] * (len(ids) - len(sts))
