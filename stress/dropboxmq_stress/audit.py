"""``dropboxmq audit``: the stress checker's total-queue figures at scale, and a root-wide audit.

Two audits:

* **History figures** (``--history PATH``): Jepsen's total-queue figures -- lost, duplicated,
  unexpected, recovered, in-doubt (plus attempted, acknowledged, ok) -- computed by the stress
  checker's own ``checker.total_queue`` from per-value facts the engines gather column-wise
  (values alike grouped), so they scale to histories of tens of millions of records.  PATH is a stress case directory (``history/*.jsonl`` +
  ``final-state.json`` + ``case.json``), a directory of Parquet or flat JSON-lines files, or one
  such file.  Two engines give identical figures:

  - ``python`` (default): pyarrow in-process (Parquet / flat JSON-lines are read natively,
    multi-threaded; the stress checker's own per-process JSON-lines are parsed and flattened);
  - ``spark``: the same plan as Spark DataFrame operations (``local[*]`` unless
    ``--master``): for histories larger than one machine's memory, or already on a cluster.

* **Consistency** (``--root``, the default when no history is given): every message in exactly
  one state, every name decodable, no orphans (processing/ entries of dead owners, working/
  files no transaction log names, transaction logs of dead owners, non-regular files).

The *flat history* is one row per (record, value): ``t`` (double), ``p``, ``type``, ``f``,
``value`` (string), ``victim``, ``persistent`` (bool), ``foreign`` (bool).  A stress record whose
``value`` is a list becomes one row per element, which is all the checker's figures look at.

Figures (``stress/dropboxmq_stress/checker.py``; values are the test's message ids):

* attempted = values of ``send invoke``; acknowledged = values of ``send ok``;
  delivered = values of ``receive ok`` (not ``foreign``);
* unexpected = delivered - attempted; recovered = (delivered & attempted) - acknowledged;
  duplicated = values delivered twice or more; ok = delivered & acknowledged;
* lost = acknowledged - delivered, except values the final state shows in processed/ by a
  client that was killed (acked-unobserved), values in error/ (quarantined), and -- in a power-loss
  case -- non-persistent sends (by the last ``send ok`` record of the value);
* in-doubt = files left in working/ + processing/ by the final state.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import click

from dropboxmq.extras import require

from .checker import Facts, total_queue

__all__ = [
    "FIGURES", "FLAT_COLUMNS", "HistorySource", "flat_schema", "locate", "read_table", "figures_python",
    "figures_spark", "figures", "consistency", "audit",
]

FIGURES = ("attempt-count", "acknowledged-count", "ok-count", "lost-count", "duplicated-count",
           "unexpected-count", "recovered-count", "in-doubt-count")
FLAT_COLUMNS = ("t", "p", "type", "f", "value", "victim", "persistent", "foreign")


# ---------------------------------------------------------------- inputs


@dataclass
class HistorySource:
    """Where a history lives and what comes with it."""

    files: list[Path]
    fmt: str  # "parquet" | "flat-jsonl" | "stress-jsonl"
    final_state: dict = field(default_factory=dict)
    power_loss: bool = False


def flat_schema():
    import pyarrow as pa

    return pa.schema([("t", pa.float64()), ("p", pa.string()), ("type", pa.string()), ("f", pa.string()),
                      ("value", pa.string()), ("victim", pa.string()), ("persistent", pa.bool_()),
                      ("foreign", pa.bool_())])


def locate(path: str | Path) -> HistorySource:
    """Find the history files under ``path`` and the case's final state."""
    path = Path(path)
    if path.is_file():
        files, base = [path], path.parent
    else:
        base = path
        hist = path / "history" if (path / "history").is_dir() else path
        files = sorted(hist.rglob("*.parquet")) or sorted(hist.rglob("*.jsonl"))
    if not files:
        raise click.ClickException(f"no history (*.parquet or *.jsonl) under {path}")
    if files[0].suffix == ".parquet":
        fmt = "parquet"
    else:
        fmt = "flat-jsonl" if (base / "flat-history").exists() or _looks_flat(files[0]) else "stress-jsonl"
    final: dict[str, Any] = {}
    case: dict[str, Any] = {}
    for d in (base, base / "history"):
        if not final and (d / "final-state.json").exists():
            final = json.loads((d / "final-state.json").read_text())
        if not case and (d / "case.json").exists():
            case = json.loads((d / "case.json").read_text())
    return HistorySource(files, fmt, final, "power-loss" in case.get("nemeses", []))


def _looks_flat(path: Path) -> bool:
    """Flat JSON-lines: every value a string (never a list): decided on the first records."""
    with open(path, "rb") as f:
        for line in itertools.islice(f, 200):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec.get("value"), list) or not set(rec) <= set(FLAT_COLUMNS):
                return False
    return True


def _flatten_stress(files: list[Path]):
    """The stress checker's records (``stress.history.read_file``) as a flat Arrow table."""
    import pyarrow as pa

    from dropboxmq_stress.history import read_file

    cols: dict[str, list] = {c: [] for c in FLAT_COLUMNS}
    for path in files:
        for r in read_file(path):
            v = r.get("value")
            values = v if isinstance(v, list) else [v]
            for one in values or [None]:
                cols["t"].append(float(r.get("t", 0.0)))
                cols["p"].append(str(r.get("p", "?")))
                cols["type"].append(r.get("type"))
                cols["f"].append(r.get("f"))
                cols["value"].append(None if one is None else str(one))
                cols["victim"].append(r.get("victim") or None)
                cols["persistent"].append(r.get("persistent"))
                cols["foreign"].append(r.get("foreign") is not None)
    return pa.table(cols, schema=flat_schema())


def read_table(src: HistorySource):
    """The whole history as one Arrow table (python engine)."""
    import pyarrow as pa

    if src.fmt == "parquet":
        import pyarrow.parquet as pq

        tables = [pq.read_table(f, columns=list(FLAT_COLUMNS)) for f in src.files]
    elif src.fmt == "flat-jsonl":
        import pyarrow.json as pj

        opts = pj.ParseOptions(explicit_schema=flat_schema(), unexpected_field_behavior="ignore")
        tables = [pj.read_json(f, parse_options=opts) for f in src.files]
    else:
        return _flatten_stress(src.files)
    return pa.concat_tables([t.cast(flat_schema()) for t in tables])


# ---------------------------------------------------------------- the figures: the checker's, once
#
# Each engine only gathers what the history says about each value (checker.Facts): values alike
# (attempted, acknowledged, delivered 0, 1 or more times) are grouped into one row with a count,
# and those acknowledged but never delivered come one by one, for the lost rule; the figures
# themselves are checker.total_queue's.


def _figures(classes: Iterable[tuple[bool, bool, int, int]], candidates: Iterable[tuple[str, bool, Any]],
             killed: Iterable[str], src: HistorySource) -> dict:
    """``classes``: (attempted, acknowledged, deliveries capped at 2, how many values);
    ``candidates``: (value, attempted, persistent of its last acknowledged send or None)."""
    facts = [Facts(bool(a), bool(k), int(d), values=int(count)) for a, k, d, count in classes]
    facts += [Facts(bool(a), True, 0, v, True if persistent is None else bool(persistent))
              for v, a, persistent in candidates]
    return total_queue(facts, src.final_state, {p: f"{p} killed" for p in killed if p}, src.power_loss)


# ---------------------------------------------------------------- python engine (pyarrow)


def figures_python(src: HistorySource) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc

    table = read_table(src)
    f, typ, value = table["f"], table["type"], table["value"]
    has_value = pc.is_valid(value)

    def values_where(mask) -> pa.Array:
        return pc.unique(pc.filter(value, pc.and_(mask, has_value)))

    attempted = values_where(pc.and_(pc.equal(f, "send"), pc.equal(typ, "invoke")))
    sends_ok = table.filter(pc.and_(pc.and_(pc.equal(f, "send"), pc.equal(typ, "ok")), has_value))
    acknowledged = pc.unique(sends_ok["value"])
    recv = table.filter(pc.and_(pc.and_(pc.equal(f, "receive"), pc.equal(typ, "ok")),
                                pc.and_(has_value, pc.invert(pc.fill_null(table["foreign"], False)))))
    per_value = recv.group_by("value").aggregate([("value", "count")])
    every = pc.unique(pa.concat_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
                                        for a in (attempted, acknowledged, per_value["value"])]))
    deliveries = pc.fill_null(pc.take(per_value["value_count"], pc.index_in(every, value_set=per_value["value"])), 0)
    facts = pa.table({"value": every, "a": pc.is_in(every, value_set=attempted),
                      "k": pc.is_in(every, value_set=acknowledged), "d": pc.min_element_wise(deliveries, 2)})
    lone = pc.and_(facts["k"], pc.equal(facts["d"], 0))
    grouped = facts.filter(pc.invert(lone)).group_by(["a", "k", "d"]).aggregate([("value", "count")])
    classes = zip(*(grouped[c].to_pylist() for c in ("a", "k", "d", "value_count")), strict=True)
    lone_facts = facts.filter(lone)
    persistent_of: dict[str, Any] = {}
    if lone_facts.num_rows:
        last = sends_ok.filter(pc.is_in(sends_ok["value"], value_set=lone_facts["value"]))
        last = last.sort_by([("t", "ascending")])
        for v, per in zip(last["value"].to_pylist(), last["persistent"].to_pylist(), strict=True):
            persistent_of[v] = per  # the last send ok's
    candidates = [(v, a, persistent_of.get(v)) for v, a in zip(lone_facts["value"].to_pylist(),
                                                               lone_facts["a"].to_pylist(), strict=True)]
    kills = table.filter(pc.and_(pc.and_(pc.equal(f, "kill"), pc.equal(typ, "info")),
                                 pc.is_valid(table["victim"])))
    out = _figures(classes, candidates, pc.unique(kills["victim"]).to_pylist(), src)
    out["rows"] = table.num_rows
    return out


# ---------------------------------------------------------------- spark engine


def figures_spark(src: HistorySource, spark: Any = None, master: str = "local[*]") -> dict:
    """The same facts as DataFrame operations; a dozen class rows and the few candidates end on the driver."""
    from pyspark.sql import functions as F

    own = spark is None
    if own:
        import sys

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(master).appName("dropboxmq-audit")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "8")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    try:
        schema = "t double, p string, type string, f string, value string, victim string, " \
                 "persistent boolean, foreign boolean"
        paths = [str(p) for p in src.files]
        if src.fmt == "parquet":
            df = spark.read.parquet(*paths).select(*FLAT_COLUMNS)
        elif src.fmt == "flat-jsonl":
            df = spark.read.schema(schema).json(paths)
        else:  # the stress checker's own records: flatten on the driver (they are small)
            df = spark.createDataFrame(_flatten_stress(src.files).to_pandas(), schema=schema)
        df = df.where(F.col("f").isin("send", "receive", "kill"))
        sends = df.where((F.col("f") == "send") & F.col("value").isNotNull())
        attempted = sends.where(F.col("type") == "invoke").select("value").distinct()
        acked = sends.where(F.col("type") == "ok").select("value").distinct()
        recv = (df.where((F.col("f") == "receive") & (F.col("type") == "ok") & F.col("value").isNotNull()
                         & ~F.coalesce(F.col("foreign"), F.lit(False)))
                .groupBy("value").count())
        facts = (recv.select("value", F.least(F.col("count"), F.lit(2)).alias("d"))
                 .join(attempted.select("value", F.lit(True).alias("a")), "value", "full")
                 .join(acked.select("value", F.lit(True).alias("k")), "value", "full")
                 .select("value", *(F.coalesce(F.col(c), F.lit(False)).alias(c) for c in ("a", "k")),
                         F.coalesce(F.col("d"), F.lit(0)).alias("d")))
        facts = facts.persist()  # two passes: the classes, then the (few) candidates
        lone = F.col("k") & (F.col("d") == 0)
        classes = [(r.a, r.k, r.d, r["count"]) for r in facts.where(~lone).groupBy("a", "k", "d").count().collect()]
        attempted_of = {r.value: r.a for r in facts.where(lone).select("value", "a").collect()}
        facts.unpersist()
        persistent_of: dict[str, Any] = {}
        if attempted_of:
            for r in (sends.where((F.col("type") == "ok") & F.col("value").isin(list(attempted_of)))
                      .select("value", "t", "persistent").orderBy("t").collect()):
                persistent_of[r.value] = r.persistent  # the last send ok's
        candidates = [(v, a, persistent_of.get(v)) for v, a in attempted_of.items()]
        killed = [r.victim for r in df.where((F.col("f") == "kill") & (F.col("type") == "info")
                                             & F.col("victim").isNotNull()).select("victim").distinct().collect()]
        return _figures(classes, candidates, killed, src)
    finally:
        if own:
            spark.stop()


def figures(path: str | Path, engine: str = "python", **kw: Any) -> dict:
    src = locate(path)
    t0 = time.perf_counter()
    out = figures_spark(src, **kw) if engine == "spark" else figures_python(src)
    out["engine"] = engine
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


# ---------------------------------------------------------------- consistency of a root


def consistency(root: str | Path) -> dict:
    """Every message in exactly one state, names decodable, no orphans."""
    from dropboxmq import codec, inventory
    from dropboxmq.liveness import liveness
    from dropboxmq.lifecycle import STATE_DIRS, State
    from dropboxmq.dirs import pending_logs
    from dropboxmq.layout import log_owner
    from dropboxmq.transaction import read_log

    root = Path(root)
    report: dict[str, Any] = {"dropboxes": 0, "messages": 0, "in-two-states": [], "undecodable": [],
                              "orphan-processing": [], "orphan-working": [], "dead-owner-logs": [],
                              "not-regular": [], "by-state": {s: 0 for s in STATE_DIRS}}
    named_by_logs: set[tuple[str, str]] = set()
    verdicts: dict[str, str] = {}

    def alive(client: str) -> str:
        if client not in verdicts:
            verdicts[client] = liveness(root, client)
        return verdicts[client]

    for where, path in pending_logs(root):
        owner = log_owner(path.name)
        try:
            entries = read_log(path)
        except FileNotFoundError:
            continue
        named_by_logs.update((e.box, e.name) for e in entries if e.kind == "send")
        if alive(owner) == "dead":
            report["dead-owner-logs"].append(f"{where}/{path.name}")
    for display, box in inventory.all_dropboxes(root):
        report["dropboxes"] += 1
        rel = os.path.relpath(box.path, root)
        seen: dict[str, str] = {}
        for state_dir in STATE_DIRS:
            state = State(state_dir)
            for name in box.list(state):
                report["messages"] += 1
                report["by-state"][state_dir] += 1
                try:
                    import stat as _st

                    if not _st.S_ISREG(os.lstat(box.file(state, name)).st_mode):
                        report["not-regular"].append(f"{display}/{state_dir}/{name}")
                except FileNotFoundError:
                    continue  # moved while we looked: a live root
                client, original = codec.split_processing_name(name)
                if state in (State.NEW, State.NOT_COMMITTED):
                    client, original = None, name
                if codec.split_name(original) is None:
                    report["undecodable"].append(f"{display}/{state_dir}/{name}")
                mid = codec.from_wire(original, 0).message_id or original
                if mid in seen and seen[mid] != state_dir:
                    report["in-two-states"].append(f"{display}: {mid} in {seen[mid]}/ and {state_dir}/")
                seen.setdefault(mid, state_dir)
                if state is State.DELIVERED and (client is None or alive(client) != "alive"):
                    report["orphan-processing"].append(f"{display}/{state_dir}/{name} "
                                                       f"(owner {client or '?'}: {alive(client) if client else 'unknown'})")
                if state is State.NOT_COMMITTED and (rel, name) not in named_by_logs:
                    report["orphan-working"].append(f"{display}/working/{name}")
    report["consistent"] = not (report["in-two-states"] or report["orphan-processing"]
                                or report["orphan-working"] or report["dead-owner-logs"] or report["not-regular"])
    return report


# ---------------------------------------------------------------- the command


@click.command("audit")
@click.option("--engine", type=click.Choice(["python", "spark"]), default="python", show_default=True,
              help="python: pyarrow in-process; spark: the same figures with Spark (huge or remote histories).")
@click.option("--history", "history", type=click.Path(exists=True, path_type=Path),
              help="A stress case directory, or Parquet / JSON-lines history files.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master for --engine spark.")
@click.option("--consistency/--no-consistency", "check_root", default=None,
              help="Also audit the root (default: only when no --history is given).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def audit(ctx: click.Context, engine: str, history: Path | None, master: str, check_root: bool | None,
          as_json: bool) -> None:
    """Total-queue figures from histories, and the consistency of the root's dropboxes.

    Exit status 0 when everything checked is clean (no lost, unexpected; a consistent root), else 1.
    """
    if check_root is None:
        check_root = history is None
    out: dict[str, Any] = {}
    clean = True
    if history is not None:
        if engine == "spark":
            require("dropboxmq audit --engine spark", "spark", "pyspark", "pyarrow")
        else:
            require("dropboxmq audit", "stress", "pyarrow")
        kwargs = {"master": master} if engine == "spark" else {}
        fig = figures(history, engine, **kwargs)
        out["figures"] = fig
        clean &= fig["lost-count"] == 0 and fig["unexpected-count"] == 0
    if check_root:
        root = ctx.obj["root"] if ctx.obj else Path(".")
        if not os.path.isdir(root):
            raise click.ClickException(f"no dropbox root at {root}")
        out["consistency"] = consistency(root)
        clean &= out["consistency"]["consistent"]
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
    else:
        if "figures" in out:
            fig = out["figures"]
            rows = f", {fig['rows']} rows" if "rows" in fig else ""
            click.echo(f"history ({fig['engine']}{rows}, {fig['seconds']} s): "
                       + ", ".join(f"{k.removesuffix('-count')} {fig[k]}" for k in FIGURES))
        if "consistency" in out:
            c = out["consistency"]
            click.echo(f"root: {c['dropboxes']} dropboxes, {c['messages']} messages "
                       f"({', '.join(f'{k} {v}' for k, v in c['by-state'].items())}): "
                       + ("consistent" if c["consistent"] else "INCONSISTENT"))
            for key in ("in-two-states", "orphan-processing", "orphan-working", "dead-owner-logs", "not-regular",
                        "undecodable"):
                if c[key]:
                    click.echo(f"  {key}: {len(c[key])}  e.g. {c[key][0]}")
    ctx.exit(0 if clean else 1)
