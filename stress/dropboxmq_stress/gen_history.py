"""Generate a large synthetic history for ``dropboxmq audit`` (flat format, see dropboxmq_stress.audit).

    python -m dropboxmq_stress.gen_history OUT_DIR --rows 10000000 [--format parquet|jsonl] [--files 4]

About four rows per message (send invoke, send ok, receive ok, ack ok), with known anomalies mixed
in: lost sends, explained non-losses (acked-unobserved by a killed consumer, quarantined), values
delivered twice, unexpected deliveries, recovered sends (info, then delivered) and in-doubt files in
``final-state.json``.  ``expected.json`` holds the figures the checker must find.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from dropboxmq.extras import require_or_exit


def generate(out: str | Path, rows: int, fmt: str = "parquet", files: int = 1, seed: int = 7) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from dropboxmq_stress.audit import flat_schema

    out = Path(out)
    hist = out / "history"
    hist.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    m = max(100, rows // 4)  # messages
    k = max(1, m // 10000)  # size of each anomaly class
    ids = np.arange(m)
    recovered = ids[:k]  # send ended in info, yet delivered
    lost = ids[k:2 * k]  # acknowledged, never delivered: really lost
    unobserved = ids[2 * k:3 * k]  # acknowledged, in processed/ by the killed consumer c0
    quarantined = ids[3 * k:4 * k]  # acknowledged, in error/
    duplicated = ids[4 * k:5 * k]  # delivered twice
    not_delivered = np.concatenate([lost, unobserved, quarantined])
    acked = ids[k:]
    delivered = np.setdiff1d(ids, not_delivered)
    t0 = 1.7e9

    def part(values, typ, f, dt, procs, extra=None):
        n = len(values)
        vals = pc.binary_join_element_wise("v", pa.array(values, pa.int64()).cast(pa.string()), "")
        p = pc.binary_join_element_wise(procs, pa.array(values % 8, pa.int64()).cast(pa.string()), "")
        cols = {"t": pa.array(t0 + values * 1e-4 + dt + rng.random(n) * 1e-5), "p": p,
                "type": pa.array([typ] * n if n < 2 else np.full(n, typ, dtype=object)),
                "f": pa.array(np.full(n, f, dtype=object)), "value": vals,
                "victim": pa.nulls(n, pa.string()), "persistent": pa.array(np.ones(n, dtype=bool)),
                "foreign": pa.array(np.zeros(n, dtype=bool))}
        if extra:
            cols.update(extra(n))
        return pa.table(cols).cast(flat_schema())

    parts = [
        part(ids, "invoke", "send", 0.0, "p"),
        part(acked, "ok", "send", 0.001, "p"),
        part(recovered, "info", "send", 0.001, "p"),
        part(delivered, "ok", "receive", 0.002, "c"),
        part(duplicated, "ok", "receive", 0.003, "c"),
        part(delivered, "ok", "ack", 0.0025, "c"),
    ]
    u = np.arange(k)
    unexpected = part(u, "ok", "receive", 0.002, "c")
    unexpected = unexpected.set_column(4, "value", pc.binary_join_element_wise(
        "u", pa.array(u, pa.int64()).cast(pa.string()), ""))
    parts.append(unexpected)
    kill = pa.table({"t": [t0 + m * 5e-5], "p": ["nemesis"], "type": ["info"], "f": ["kill"], "value": [None],
                     "victim": ["c0"], "persistent": [None], "foreign": [None]}).cast(flat_schema())
    parts.append(kill)
    table = pa.concat_tables(parts)
    # interleave like real processes: shuffle row order (the checker sorts by t)
    table = table.take(pa.array(rng.permutation(table.num_rows)))
    chunks = np.array_split(np.arange(table.num_rows), files)
    for i, idx in enumerate(chunks):
        piece = table.slice(int(idx[0]), len(idx)) if len(idx) else table.slice(0, 0)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(piece, hist / f"part-{i:03d}.parquet")
        else:
            piece.to_pandas().to_json(hist / f"part-{i:03d}.jsonl", orient="records", lines=True)
    final = {
        "working": [{"name": f"w{i}", "value": None} for i in range(3)],
        "processing": [{"name": f"x{i}", "value": None} for i in range(2)],
        "processed": [{"value": f"v{v}", "client": "c0"} for v in unobserved],
        "error": [{"value": f"v{v}"} for v in quarantined],
    }
    (out / "final-state.json").write_text(json.dumps(final))
    (out / "case.json").write_text(json.dumps({"nemeses": ["kill"]}))
    (out / "flat-history").write_text("flat\n")
    expected = {
        "rows": table.num_rows, "attempt-count": m, "acknowledged-count": len(acked),
        "ok-count": len(np.intersect1d(delivered, acked)), "lost-count": len(lost),
        "duplicated-count": len(duplicated), "unexpected-count": k, "recovered-count": len(recovered),
        "in-doubt-count": 5,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    return expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    require_or_exit("python -m dropboxmq_stress.gen_history", "stress", "pyarrow", "numpy")
    t = time.perf_counter()
    exp = generate(a.out, a.rows, a.format, a.files, a.seed)
    print(json.dumps(exp), f"({time.perf_counter() - t:.1f} s, {sum(f.stat().st_size for f in Path(a.out).rglob('*') if f.is_file()) / 1e6:.0f} MB)")


if __name__ == "__main__":
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    main()
