"""The HTML report: one page, plots as inline SVG (no plotting dependency)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .run import KEYS

W, H, PAD = 640, 180, 34


def _esc(x: Any) -> str:
    return html.escape(str(x))


def svg_series(series: dict[str, list[float]], bucket: float, events: list[dict] | None = None,
               title: str = "", ylabel: str = "per s") -> str:
    """A line chart of one or more series sampled every ``bucket`` seconds; events as red ticks."""
    n = max((len(s) for s in series.values()), default=0)
    ymax = max((max(s) for s in series.values() if s), default=0) / bucket or 1
    colours = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"]
    xs = lambda i: PAD + (W - 2 * PAD) * (i / max(1, n - 1))  # noqa: E731
    ys = lambda v: H - PAD + 10 - (H - 2 * PAD) * (v / bucket / ymax)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" class="plot">',
             f'<text x="{PAD}" y="14" font-size="12">{_esc(title)}</text>',
             f'<line x1="{PAD}" y1="{H - PAD + 10}" x2="{W - PAD}" y2="{H - PAD + 10}" stroke="#999"/>',
             f'<line x1="{PAD}" y1="{PAD - 10}" x2="{PAD}" y2="{H - PAD + 10}" stroke="#999"/>',
             f'<text x="2" y="{PAD}" font-size="10">{ymax:.0f}</text>',
             f'<text x="2" y="{H - PAD + 10}" font-size="10">0 {_esc(ylabel)}</text>',
             f'<text x="{W - PAD - 30}" y="{H - 4}" font-size="10">{n * bucket:.0f} s</text>']
    for (label, s), col in zip(series.items(), colours):
        if not s:
            continue
        pts = " ".join(f"{xs(i):.1f},{ys(v):.1f}" for i, v in enumerate(s))
        parts.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
    for k, (label, col) in enumerate(zip(series, colours)):
        parts.append(f'<text x="{W - 150}" y="{14 + 12 * k}" font-size="11" fill="{col}">{_esc(label)}</text>')
    for e in events or []:
        x = PAD + (W - 2 * PAD) * (e["t"] / max(bucket, n * bucket))
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
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" class="plot">',
             f'<text x="{PAD}" y="14" font-size="12">{_esc(title)}</text>']
    if not xs:
        return "".join(parts) + '<text x="40" y="80">no samples</text></svg>'
    lo, hi = min(xs), max(xs)
    hi = hi if hi > lo else lo + 1
    counts = [0] * bins
    for x in xs:
        counts[min(bins - 1, int((x - lo) / (hi - lo) * bins))] += 1
    cmax = max(counts)
    bw = (W - 2 * PAD) / bins
    for i, c in enumerate(counts):
        h = (H - 2 * PAD) * c / cmax
        parts.append(f'<rect x="{PAD + i * bw:.1f}" y="{H - PAD + 10 - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
                     f'fill="#1f77b4"><title>{10 ** (lo + i * (hi - lo) / bins):.2f} ms: {c}</title></rect>')
    for frac in (0, 0.5, 1):
        v = 10 ** (lo + frac * (hi - lo))
        parts.append(f'<text x="{PAD + frac * (W - 2 * PAD) - 10:.0f}" y="{H - 4}" font-size="10">{v:.2g} ms</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_html(report: dict, path: Path) -> None:
    rows = []
    for name, r in report["cases"].items():
        status = {True: "valid", False: "INVALID", None: "SKIPPED"}[r.get("valid")]
        cells = "".join(f"<td>{_esc(r.get(k, ''))}</td>" for k in KEYS)
        rows.append(f'<tr class="{status}"><td>{_esc(name)}</td><td>{status}</td>{cells}</tr>')
    body = [f"<h1>dropboxmq stress report</h1><p>overall: <b>{'valid' if report['valid'] else 'INVALID'}</b>,"
            f" wall {report['wall']:.1f} s</p>"]
    if report.get("skipped"):
        body.append("<h2>Skipped or degraded nemeses</h2><ul>" + "".join(
            f"<li>{_esc(c)}: {_esc(json.dumps(s))}</li>" for c, s in report["skipped"].items()) + "</ul>")
    body.append("<h2>Total-queue figures</h2><table><tr><th>case</th><th>status</th>"
                + "".join(f"<th>{_esc(k)}</th>" for k in KEYS) + "</tr>" + "".join(rows) + "</table>")
    for name, r in report["cases"].items():
        body.append(f"<h2>{_esc(name)}</h2>")
        if "throughput" in r:
            tp = r["throughput"]
            body.append(svg_series({"sent": tp["send_series"], "delivered": tp["deliver_series"]}, tp["bucket"],
                                   r.get("timeline"), f"throughput (messages/s), nemesis events as ticks"))
            body.append(svg_histogram(r.get("e2e_latency_samples", []), "end-to-end latency distribution"))
            lat = r["latency"]
            body.append("<pre>" + _esc(json.dumps({"latency": lat, "duplicates": r.get("duplicates"),
                                                   "lost": r.get("lost"), "skipped": r.get("skipped")},
                                                  indent=1)[:20000]) + "</pre>")
        else:
            extra = {k: v for k, v in r.items() if k not in ("trials",)}
            body.append("<pre>" + _esc(json.dumps(extra, indent=1)[:20000]) + "</pre>")
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
            ".plot{display:block;margin:8px 0;border:1px solid #eee}pre{font-size:11px;background:#f7f7f7}"
            "</style>" + "\n".join(body))
    Path(path).write_text(page)
