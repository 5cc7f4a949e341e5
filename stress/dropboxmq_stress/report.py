"""The HTML report: one page, plots as inline SVG (no plotting dependency)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .checker import TOTAL_QUEUE_KEYS

W, H, PAD = 640, 180, 34


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _axes(title: str, xlabel: str, ylabel: str, xticks: list[tuple[float, str]],
          yticks: list[tuple[float, str]]) -> list[str]:
    """Frame, title, axis labels (the y label rotated) and ticks; positions are pixel coordinates."""
    left, bottom = PAD + 16, H - PAD + 10
    parts = [f'<text x="{left}" y="14" font-size="12">{_esc(title)}</text>',
             f'<line x1="{left}" y1="{bottom}" x2="{W - PAD}" y2="{bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{PAD - 10}" x2="{left}" y2="{bottom}" stroke="#999"/>',
             f'<text x="{(left + W - PAD) / 2:.0f}" y="{H - 2}" font-size="10" text-anchor="middle" class="xlabel">'
             f'{_esc(xlabel)}</text>',
             f'<text x="10" y="{(PAD + bottom) / 2:.0f}" font-size="10" text-anchor="middle" class="ylabel" '
             f'transform="rotate(-90 10 {(PAD + bottom) / 2:.0f})">{_esc(ylabel)}</text>']
    for x, label in xticks:
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 3}" stroke="#999"/>'
                     f'<text x="{x:.1f}" y="{bottom + 12}" font-size="9" text-anchor="middle">{_esc(label)}</text>')
    for y, label in yticks:
        parts.append(f'<line x1="{left - 3}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#999"/>'
                     f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="9" text-anchor="end">{_esc(label)}</text>')
    return parts


def svg_series(series: dict[str, list[float]], bucket: float, events: list[dict] | None = None,
               title: str = "", ylabel: str = "messages per second") -> str:
    """A line chart of one or more series sampled every ``bucket`` seconds; events as ticks."""
    n = max((len(s) for s in series.values()), default=0)
    ymax = max((max(s) for s in series.values() if s), default=0) / bucket or 1
    colours = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"]
    left, span = PAD + 16, W - PAD - (PAD + 16)
    xs = lambda i: left + span * (i / max(1, n - 1))  # noqa: E731
    ys = lambda v: H - PAD + 10 - (H - 2 * PAD) * (v / bucket / ymax)  # noqa: E731
    duration = n * bucket
    xticks = [(left + span * f, f"{duration * f:.3g}") for f in (0, 0.25, 0.5, 0.75, 1)]
    yticks = [(ys(ymax * bucket * f), f"{ymax * f:.3g}") for f in (0, 0.5, 1)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" class="plot">',
             *_axes(title, "time since the start of the run (s)", ylabel, xticks, yticks)]
    for s, col in zip(series.values(), colours, strict=False):  # more colours than series
        if not s:
            continue
        pts = " ".join(f"{xs(i):.1f},{ys(v):.1f}" for i, v in enumerate(s))
        parts.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
    for k, (label, col) in enumerate(zip(series, colours, strict=False)):
        parts.append(f'<text x="{W - 150}" y="{14 + 12 * k}" font-size="11" fill="{col}">{_esc(label)}</text>')
    for e in events or []:
        x = left + span * (e["t"] / max(bucket, duration))
        colour = "#d62728" if e.get("f") in ("kill", "power-loss") else "#8c564b"
        parts.append(f'<line x1="{x:.1f}" y1="{PAD - 10}" x2="{x:.1f}" y2="{H - PAD + 10}" stroke="{colour}" '
                     f'stroke-opacity="0.5"><title>{_esc(e.get("f"))} {_esc(e.get("victim") or e.get("detail") or "")}'
                     f' at {e["t"]:.2f}s</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def svg_histogram(samples: list[float], title: str, bins: int = 40) -> str:
    """Latency distribution on a log10 axis (ms)."""
    import math

    xs = [math.log10(max(s * 1000, 1e-3)) for s in samples if s is not None and s >= 0]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" class="plot">']
    if not xs:
        return "".join(parts + _axes(title, "end-to-end latency (ms, log scale)", "messages", [], [])) + \
            '<text x="80" y="80">no samples</text></svg>'
    lo, hi = min(xs), max(xs)
    hi = hi if hi > lo else lo + 1
    counts = [0] * bins
    for x in xs:
        counts[min(bins - 1, int((x - lo) / (hi - lo) * bins))] += 1
    cmax = max(counts)
    left, span, bottom = PAD + 16, W - PAD - (PAD + 16), H - PAD + 10
    bw = span / bins
    xticks = [(left + f * span, f"{10 ** (lo + f * (hi - lo)):.2g}") for f in (0, 0.25, 0.5, 0.75, 1)]
    yticks = [(bottom - (H - 2 * PAD) * f, f"{cmax * f:.0f}") for f in (0, 0.5, 1)]
    parts += _axes(title, "end-to-end latency (ms, log scale)", "messages", xticks, yticks)
    for i, c in enumerate(counts):
        h = (H - 2 * PAD) * c / cmax
        parts.append(f'<rect x="{left + i * bw:.1f}" y="{bottom - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
                     f'fill="#1f77b4"><title>{10 ** (lo + i * (hi - lo) / bins):.2f} ms: {c}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as (dotted key, value) rows; lists of plain values joined, longer ones counted."""
    if isinstance(value, dict):
        rows: list[tuple[str, Any]] = []
        for k, v in value.items():
            rows += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows or [(prefix, "(none)")]
    if isinstance(value, list):
        if len(value) <= 8 and all(not isinstance(v, (dict, list)) for v in value):
            return [(prefix, ", ".join(str(v) for v in value) or "(none)")]
        return [(prefix, f"{len(value)} entries")]
    if isinstance(value, float):
        return [(prefix, f"{value:.6g}")]
    return [(prefix, value)]


def kv_table(data: dict) -> str:
    """A two-column HTML table of a (nested) dict, instead of raw JSON."""
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in _flatten(data))
    return f'<table class="kv">{rows}</table>'


def write_html(report: dict, path: Path) -> None:
    rows = []
    for name, r in report["cases"].items():
        status = {True: "valid", False: "INVALID", None: "SKIPPED"}[r.get("valid")]
        cells = "".join(f"<td>{_esc(r.get(k, ''))}</td>" for k in TOTAL_QUEUE_KEYS)
        rows.append(f'<tr class="{status}"><td>{_esc(name)}</td><td>{status}</td>{cells}</tr>')
    body = [f"<h1>dropboxmq stress report</h1><p>overall: <b>{'valid' if report['valid'] else 'INVALID'}</b>,"
            f" wall {report['wall']:.1f} s</p>"]
    if report.get("skipped"):
        body.append("<h2>Skipped or degraded nemeses</h2>" + kv_table(report["skipped"]))
    body.append("<h2>Total-queue figures</h2><table><tr><th>case</th><th>status</th>"
                + "".join(f"<th>{_esc(k)}</th>" for k in TOTAL_QUEUE_KEYS) + "</tr>" + "".join(rows) + "</table>")
    for name, r in report["cases"].items():
        body.append(f"<h2>{_esc(name)}</h2>")
        if "throughput" in r:
            tp = r["throughput"]
            body.append(svg_series({"sent": tp["send_series"], "delivered": tp["deliver_series"]}, tp["bucket"],
                                   r.get("timeline"), "throughput; nemesis events as vertical ticks"))
            body.append(svg_histogram(r.get("e2e_latency_samples", []), "end-to-end latency distribution"))
            lat = r["latency"]
            body.append(kv_table({"latency (s)": lat, "duplicates": r.get("duplicates"), "lost": r.get("lost"),
                                  "skipped": r.get("skipped")}))
        else:
            body.append(kv_table({k: v for k, v in r.items() if k not in ("trials",)}))
            if r.get("trials"):
                trs = "".join(
                    f"<tr class=\"{'valid' if t.get('valid') else 'INVALID'}\"><td>{_esc(t['op'])}</td>"
                    f"<td>{_esc(t['rename_path'])}</td><td>{_esc(t['action'])}</td><td>{t['n']}</td>"
                    f"<td>{_esc(t.get('kind'))}</td><td>{_esc(t.get('outcome'))}</td><td>{t.get('valid')}</td>"
                    f"<td>{_esc(t.get('note', ''))}</td></tr>" for t in r["trials"])
                body.append("<table><tr><th>op</th><th>rename</th><th>action</th><th>N</th><th>call</th>"
                            "<th>outcome</th><th>valid</th><th>note</th></tr>" + trs + "</table>")
    page = ("<!doctype html><meta charset='utf-8'><title>dropboxmq stress</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:2px 5px}tr.INVALID{background:#fdd}tr.SKIPPED{background:#eee}"
            ".plot{display:block;margin:8px 0;border:1px solid #eee}table.kv th{text-align:left;font-weight:normal;"
            "background:#f7f7f7}"
            "</style>" + "\n".join(body))
    Path(path).write_text(page)
