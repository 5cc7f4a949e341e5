"""PySpark's own floor under a streaming drain: an ``availableNow`` query over a Python data
source that touches no file (100 rows made in memory) into Parquet, timed as ``spark_bench``
times the dropboxmq drain.  Whatever this takes, every Python streaming source pays per query
(the source's Python process Spark starts, query start and stop, one micro-batch); the
dropboxmq drain cannot be faster than it.

``spark_bench`` reports it beside the dropboxmq drain of 100 messages (its warm-up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SCHEMA = "id long, text string"


class _Rows(InputPartition):
    def __init__(self, rows: int):
        self.rows = rows


class MemoryStreamReader(DataSourceStreamReader):
    """One batch of ``rows`` rows, then nothing: the least a Python streaming source can do."""

    def __init__(self, options: Any):
        self.rows = int(options.get("rows", "100"))

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Rows(self.rows)] if end["batch"] > start["batch"] else []

    def read(self, partition: _Rows) -> Iterator[tuple]:  # type: ignore[override]
        for i in range(partition.rows):
            yield i, f"m{i}"

    def commit(self, end: dict) -> None:
        pass


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "memoryfloor"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MemoryStreamReader(self.options)


def floor_seconds(spark: Any, tmp: str, rows: int = 100, repeat: int = 2) -> list[float]:
    """Seconds of ``repeat`` availableNow drains of the in-memory source into Parquet."""
    spark.dataSource.register(MemorySource)
    seconds = []
    for k in range(repeat):
        ckpt = str(Path(tmp) / f"floor-{k}-ck")
        t = time.perf_counter()
        (spark.readStream.format("memoryfloor").option("rows", str(rows)).load()
         .writeStream.format("parquet").option("path", str(Path(tmp) / f"floor-{k}-sink"))
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start().awaitTermination())
        seconds.append(round(time.perf_counter() - t, 2))
    return seconds


# ---------------------------------------------------------------- breakdown (issue 32)
#
# ``python -m dropboxmq_stress.spark_floor [--repeat R] [--conf KEY=VALUE ...]``: where the floor's
# seconds go, on a warm session, the Python source beside Spark's built-in ``text`` file source
# (100 rows of one file, availableNow, into Parquet), interleaved round by round.


def _mark(path: str, what: str, **extra: Any) -> None:
    import json
    import os

    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"what": what, "t": time.time(), "pid": os.getpid(), **extra}) + "\n")


def _age() -> float:
    """Seconds since this process started (from /proc: the source runner's start up to now)."""
    import os

    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start / os.sysconf("SC_CLK_TCK")


class _TracedReader(MemoryStreamReader):
    """MemoryStreamReader noting when Spark calls it, and the age of the process it runs in."""

    def __init__(self, options: Any):
        super().__init__(options)
        self.log = options["traceLog"]
        _mark(self.log, "reader", age=_age(), cpu=time.process_time())

    def initialOffset(self) -> dict:
        _mark(self.log, "initialOffset")
        return super().initialOffset()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        _mark(self.log, "latestOffset")
        return super().latestOffset(start, limit)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        _mark(self.log, "partitions")
        return super().partitions(start, end)

    def read(self, partition: _Rows) -> Iterator[tuple]:  # type: ignore[override]
        _mark(self.log, "read", age=_age())
        yield from super().read(partition)

    def commit(self, end: dict) -> None:
        _mark(self.log, "commit")


class TracedMemorySource(MemorySource):
    @classmethod
    def name(cls) -> str:
        return "memoryfloor_traced"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _TracedReader(self.options)


def _iso(stamp: str) -> float:
    import datetime

    return datetime.datetime.strptime(stamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def breakdown(spark: Any, tmp: str, kind: str, k: int) -> dict[str, Any]:
    """One availableNow run of ``kind`` ("python": the traced in-memory source; "text": Spark's
    file source over one file of 100 lines; "dropboxmq": the drain of a queue of 100 messages,
    through spark_drain_probe's traced reader) into Parquet, and where its seconds went."""
    import json
    import os

    log = str(Path(tmp) / f"{kind}-{k}.trace")
    if kind == "python":
        spark.dataSource.register(TracedMemorySource)
        source = spark.readStream.format("memoryfloor_traced").option("rows", "100").option("traceLog", log).load()
    elif kind == "dropboxmq":
        from .spark_drain_probe import ProbeDataSource, send_queue

        spark.dataSource.register(ProbeDataSource)
        root = Path(tmp) / "root"
        send_queue(root, f"q{k}", 100)
        source = (spark.readStream.format("dropboxmq_probe").option("root", str(root))
                  .option("checkpointLocation", str(Path(tmp) / f"{kind}-{k}-ck")).option("probeLog", log)
                  .load(f"q{k}").select("message_id", "text"))
    else:
        src = Path(tmp) / f"{kind}-{k}-in"
        src.mkdir()
        (src / "a.txt").write_text("".join(f"m{i}\n" for i in range(100)))
        source = spark.readStream.format("text").load(str(src))
    load = os.getloadavg()[0]
    t0 = time.time()
    q = (source.writeStream.format("parquet").option("path", str(Path(tmp) / f"{kind}-{k}-sink"))
         .option("checkpointLocation", str(Path(tmp) / f"{kind}-{k}-ck")).trigger(availableNow=True).start())
    started = time.time() - t0
    q.awaitTermination()
    total = time.time() - t0
    progress = q.recentProgress
    out: dict[str, Any] = {"kind": kind, "load": round(load, 2), "total": round(total, 3),
                           "start_returned": round(started, 3), "batches": len(progress)}
    if progress:
        first, last = progress[0], progress[-1]
        out["first_trigger_at"] = round(_iso(first.timestamp) - t0, 3)
        out["after_last_trigger"] = round(total - (_iso(last.timestamp) - t0 + last.durationMs["triggerExecution"] / 1e3), 3)
        phases: dict[str, int] = {}
        for p in progress:
            for key, ms in p.durationMs.items():
                phases[key] = phases.get(key, 0) + ms
        out["trigger_ms"] = phases
    if kind in ("python", "dropboxmq"):  # the source runner: a fresh Python process per query
        marks = [json.loads(line) for line in Path(log).read_text().splitlines()]
        made = next(m for m in marks if m["what"] == ("reader" if kind == "python" else "init"))
        out["runner_started_at"] = round(made["t"] - made["age"] - t0, 2)
        out["runner_age_at_reader"] = round(made["age"], 2)
        out["runner_cpu_at_reader"] = round(made["cpu" if kind == "python" else "process_cpu"], 2)
        out["calls"] = [(m["what"], round(m["t"] - t0, 3), *([round(m["wall"], 3)] if "wall" in m else []))
                        for m in marks]
    return out


def main() -> None:
    import argparse
    import json
    import os
    import statistics
    import sys
    import tempfile

    ap = argparse.ArgumentParser(description="Where PySpark's floor under a streaming drain goes.")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--conf", action="append", default=[], help="KEY=VALUE for the session (both kinds)")
    ap.add_argument("--kinds", nargs="+", default=["python", "text", "dropboxmq"])
    args = ap.parse_args()
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.python.authenticate.socketTimeout", "180s").config("spark.sql.shuffle.partitions", "2"))
    for kv in args.conf:
        key, value = kv.split("=", 1)
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    totals: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dropboxmq-spark-floor-") as tmp:
            for k in range(args.repeat + 1):  # round 0 warms the session up (not counted)
                for kind in args.kinds:
                    row = breakdown(spark, tmp, kind, k)
                    row["warm_up"] = k == 0
                    print(json.dumps(row), flush=True)
                    if k:
                        totals.setdefault(kind, []).append(row["total"])
        print(json.dumps({"median_total": {kind: statistics.median(v) for kind, v in totals.items()},
                          "conf": args.conf}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
