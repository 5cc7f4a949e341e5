"""Where an availableNow drain's time goes (issue 32): per micro-batch, Spark's own accounting
(``StreamingQueryProgress.durationMs``), the CPU of the data source's Python calls on the driver's
source runner and in the read tasks, and the CPU of the whole Spark process tree; then the
library's receive of a twin queue, back to back, acking once per read limit (CLIENT_ACKNOWLEDGE:
as many fsyncs as the drain; spark_bench's ``drain_vs_batched_ack``).

Run: ``python -m dropboxmq_stress.spark_drain_probe [--messages N ...] [--repeat R] [--per-trigger M]``.

The data source is measured through a subclass registered as ``dropboxmq_probe``: each call of
the stream reader (driver) and each read task appends (what, wall s, CPU s, pid) to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from dropboxmq_spark import DEFAULT_MESSAGES_PER_TRIGGER, DropboxMQDataSource, DropboxMQStreamReader
from dropboxmq_stress.spark_bench import BODY_BYTES, cpu_seconds, library_receive

_LOG_OPTION = "probeLog"


def _note(path: str, what: str, wall: float, cpu: float, **extra: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"what": what, "wall": wall, "cpu": cpu, "pid": os.getpid(), "t": time.time(),
                            **extra}) + "\n")


class _ProbeReader(DropboxMQStreamReader):
    def __init__(self, options: Any, schema: Any = None):
        self._probe_log = options[_LOG_OPTION]
        w, c = time.perf_counter(), time.process_time()
        super().__init__(options, schema)
        # age and CPU of the process since it started: the source runner is a fresh process a query
        _note(self._probe_log, "init", time.perf_counter() - w, time.process_time() - c, age=_age(),
              process_cpu=time.process_time())

    def _timed(self, what: str, call: Any, *args: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = call(*args)
        _note(self._probe_log, what, time.perf_counter() - w, time.process_time() - c)
        return out

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict:
        return self._timed("latestOffset", super().latestOffset, start, limit)

    def partitions(self, start: dict, end: dict) -> Any:
        return self._timed("partitions", super().partitions, start, end)

    def commit(self, end: dict) -> None:
        return self._timed("commit", super().commit, end)

    def prepareForTriggerAvailableNow(self) -> None:
        return self._timed("prepareForTriggerAvailableNow", super().prepareForTriggerAvailableNow)

    def read(self, partition: Any) -> Iterator[Any]:  # type: ignore[override]
        w, c = time.perf_counter(), time.process_time()
        rows = 0
        for item in super().read(partition):
            rows += getattr(item, "num_rows", 1)
            yield item
        _note(self._probe_log, "read", time.perf_counter() - w, time.process_time() - c, rows=rows)


class ProbeDataSource(DropboxMQDataSource):
    @classmethod
    def name(cls) -> str:
        return "dropboxmq_probe"

    def streamReader(self, schema: Any) -> Any:
        return _ProbeReader(self.options, schema)


def _age() -> float:
    """Seconds since this process started."""
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start / os.sysconf("SC_CLK_TCK")


def _stages(spark: Any, since: float) -> list:
    """Spark's own accounting of the stages run since ``since`` (the UI's REST API): when each
    ran relative to ``since``, and its tasks' run, CPU and deserialisation times."""
    import datetime
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return []
    app = spark.sparkContext.applicationId

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/{path}") as r:
            return json.load(r)

    def at(stamp: str) -> float:
        t = datetime.datetime.strptime(stamp.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
        return round(t.timestamp() - since, 2)

    out = []
    for st in get("stages"):
        if "submissionTime" not in st or at(st["submissionTime"]) < 0:
            continue
        tasks = get(f"stages/{st['stageId']}/{st['attemptId']}/taskList?length=1000")
        out.append({"stage": st["stageId"], "name": st["name"][:40], "from": at(st["submissionTime"]),
                    "to": at(st["completionTime"]) if "completionTime" in st else None,
                    "tasks": [{"launch": at(t["launchTime"]), "ms": t["duration"],
                               "run_ms": t["taskMetrics"]["executorRunTime"],
                               "cpu_ms": round(t["taskMetrics"]["executorCpuTime"] / 1e6),
                               "deser_ms": t["taskMetrics"]["executorDeserializeTime"]} for t in tasks]})
    return sorted(out, key=lambda s: s["from"])


def send_queue(root: Path, queue: str, n: int) -> None:
    """n persistent messages as spark_bench sends them (100-byte text, one integer property)."""
    from dropboxmq.connection import Connection
    from dropboxmq.message import Message, TextMessage

    with Connection(root, "probe-send", create=True) as conn:
        producer = conn.create_session().create_producer(conn.create_queue(queue))
        for start in range(0, n, 1000):
            batch: list[Message] = []
            for i in range(start, min(n, start + 1000)):
                m = TextMessage(f"m{i}".ljust(BODY_BYTES, "."))
                m.set_property("seq", i % 10)
                batch.append(m)
            producer.send_many(batch)


def _drain(spark: Any, root: Path, tmp: str, n: int, per_trigger: int, log: str) -> Any:
    ckpt, sink = str(Path(tmp) / "ck"), str(Path(tmp) / "sink")
    reader = spark.readStream.format("dropboxmq_probe").option("root", str(root)).option("checkpointLocation", ckpt)
    if per_trigger:
        reader = reader.option("maxMessagesPerTrigger", per_trigger)
    return (reader.option(_LOG_OPTION, log).load("drain").select("message_id", "text")
            .writeStream.format("parquet").option("path", sink)
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start())


def run_once(spark: Any, n: int, per_trigger: int, tmp: str) -> dict[str, Any]:
    root = Path(tmp) / "root"
    log = str(Path(tmp) / "probe.jsonl")
    send_queue(root, "drain", n)
    send_queue(root, "drain-twin", n)
    sink = str(Path(tmp) / "sink")
    jvm = spark.sparkContext._gateway.proc.pid
    load = os.getloadavg()[0]
    cpu0, mine0 = cpu_seconds({jvm}), time.process_time()
    t, t_epoch = time.perf_counter(), time.time()
    q = _drain(spark, root, tmp, n, per_trigger, log)
    started = time.perf_counter() - t
    q.awaitTermination()
    wall = time.perf_counter() - t
    spark_cpu = cpu_seconds({jvm}) - cpu0 + time.process_time() - mine0
    progress = [{"batch": p.batchId, "rows": p.numInputRows, "at": p.timestamp, **p.durationMs}
                for p in q.recentProgress]
    calls = [json.loads(line) for line in Path(log).read_text().splitlines()]
    timeline = [(round(c["t"] - t_epoch, 2), c["what"], round(c["wall"], 2), round(c["cpu"], 2), c["pid"],
                 c.get("age")) for c in calls]
    load_lib = os.getloadavg()[0]
    # the receive that fsyncs its ACKs as often as the drain (spark_bench: drain_vs_batched_ack)
    lib_wall, lib_cpu = library_receive(root, "drain-twin", n, per_trigger or DEFAULT_MESSAGES_PER_TRIGGER)
    stages = _stages(spark, t_epoch)
    assert spark.read.parquet(sink).count() == n
    sums: dict[str, list[float]] = {}
    for call in calls:
        s = sums.setdefault(call["what"], [0, 0.0, 0.0])
        s[0] += 1
        s[1] += call["wall"]
        s[2] += call["cpu"]
    return {"messages": n, "per_trigger": per_trigger, "load": [round(load, 1), round(load_lib, 1)],
            "spark": {"wall": round(wall, 2), "cpu_all_processes": round(spark_cpu, 2),
                      "rate": round(n / wall)},
            "library": {"wall": round(lib_wall, 2), "cpu": round(lib_cpu, 2), "rate": round(n / lib_wall)},
            "ratio_wall": round(lib_wall / wall, 2), "ratio_cpu": round(lib_cpu / spark_cpu, 2),
            "source_calls": {k: {"n": v[0], "wall": round(v[1], 2), "cpu": round(v[2], 2)} for k, v in sums.items()},
            "start_returned": round(started, 2), "stages": stages, "progress": progress, "timeline": timeline}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, nargs="+", default=[20000, 100000])
    ap.add_argument("--per-trigger", type=int, default=0, help="maxMessagesPerTrigger (0: not given, the default)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ui", action="store_true", help="run with Spark's UI to record stage and task times")
    args = ap.parse_args()
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    from pyspark.sql import SparkSession

    # as spark_bench's session; with --ui, the UI's REST API gives each stage's and task's times
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", str(args.ui).lower())
             .config("spark.ui.port", "0").config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.authenticate.socketTimeout", "180s")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ProbeDataSource)
    try:
        with tempfile.TemporaryDirectory(prefix="dropboxmq-drain-probe-") as tmp:  # warm-up
            send_queue(Path(tmp) / "root", "drain", 100)
            _drain(spark, Path(tmp) / "root", tmp, 100, 0, str(Path(tmp) / "log")).awaitTermination()
        for _ in range(args.repeat):
            for n in args.messages:
                with tempfile.TemporaryDirectory(prefix="dropboxmq-drain-probe-") as tmp:
                    print(json.dumps(run_once(spark, n, args.per_trigger, tmp)), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
