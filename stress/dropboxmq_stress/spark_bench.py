"""The figures of README's Spark section: the ``dropboxmq`` data source in ``local[2]``, each set
side by side with what it competes with, measured in the same run (load on the shared machine
weighs on both sides of a ratio alike).

Run: ``python -m dropboxmq_stress.spark_bench [--messages N [N ...]] [--json PATH]`` (``make bench``
runs it with the default sizes).

For each size N (messages of 100 bytes, one integer property), on fresh queues, timed from the
call to its end with the session already started and warmed up (a small untimed run of each action):

* **write**: a batch write with ``durable=false`` (one transaction, two tasks) against the
  library's own send of the same messages in one process (``send_many`` of 1,000,
  non-persistent: no fsync either).  The durable batch write is reported too (no goal).
* **browse**: a batch read of the queue (every body read: ``sum(length(body))``) against Spark's
  own ``binaryFile`` source reading the same files (``sum(length(content))``).
* **drain**: a streaming ``trigger(availableNow=True)`` run into Parquet (claim + read + write +
  ack) with the source's default read limit (``DEFAULT_MESSAGES_PER_TRIGGER``, what a user gets
  without ``maxMessagesPerTrigger``; ``--max-per-trigger`` sets one) against the library's receive
  of an identical twin queue (same count, same bodies and properties, sent alike): one consumer
  in the default acknowledgement mode (AUTO_ACKNOWLEDGE), ``receive(0)`` until nothing is left,
  which is what a user's consumer loop does.  For persistent messages that is one fsync of
  processed/ per message, while the drain makes one per micro-batch: so a third twin is received
  with CLIENT_ACKNOWLEDGE and one acknowledge() per read limit (the drain's fsyncs), reported
  beside it as ``drain_vs_batched_ack`` (no goal).  Its breakdown: the micro-batches, the sum of each
  phase of Spark's ``StreamingQueryProgress.durationMs`` over them, the CPU seconds of Spark's
  whole process tree (the JVM, the Python processes it starts, this driver) during the drain
  against the library receive's CPU, and the wall time outside the micro-batches (starting the
  query and its source's Python process, stopping it).

Goals (issue 32): browse >= 1.0x binaryFile, drain >= 0.8x the library's receive, write >= 0.8x
the library's send.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dropboxmq.extras import require_or_exit

BODY_BYTES = 100
SEND_BATCH = 1000
GOALS = {"browse": 1.0, "drain": 0.8, "write": 0.8}


def _session(partitions: int):
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{partitions}]").appName("dropboxmq-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             # a Python process Spark starts (a query's source runner) may take longer than the
             # default 15 s to connect back on a machine loaded by other jobs
             .config("spark.python.authenticate.socketTimeout", "180s")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dropboxmq_spark import register

    register(spark)  # an editable install is not discovered (see pyspark_dropboxmq)
    return spark


def _text(i: int) -> str:
    return f"m{i}".ljust(BODY_BYTES, ".")


def _library_send(root: Path, queue: str, n: int, persistent: bool) -> float:
    """Seconds for the library to send n messages (send_many of SEND_BATCH) into ``queue``."""
    from dropboxmq.message import DeliveryMode, Message, TextMessage
    from dropboxmq.connection import Connection

    mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
    with Connection(root, "bench-send") as conn:
        producer = conn.create_session().create_producer(conn.create_queue(queue))
        t = time.perf_counter()
        for start in range(0, n, SEND_BATCH):
            batch: list[Message] = []
            for i in range(start, min(n, start + SEND_BATCH)):
                m = TextMessage(_text(i))
                m.set_property("seq", i % 10)
                batch.append(m)
            producer.send_many(batch, delivery_mode=mode)
        return time.perf_counter() - t


def library_receive(root: Path, queue: str, n: int) -> tuple[float, float]:
    """(seconds, CPU seconds) for one library consumer to receive n messages as a user's loop
    does: the default session (AUTO_ACKNOWLEDGE), ``receive(0)`` until nothing is left."""
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    with Connection(root, "bench-receive") as conn:
        consumer = conn.create_session().create_consumer(Queue(queue))
        got = 0
        t, cpu = time.perf_counter(), time.process_time()
        while consumer.receive(0) is not None:
            got += 1
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        consumer.close()
    assert got == n, (got, n)
    return seconds, cpu


def library_receive_batched(root: Path, queue: str, n: int, batch: int) -> tuple[float, float]:
    """library_receive with CLIENT_ACKNOWLEDGE and one (durable) acknowledge() per ``batch``."""
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
    from dropboxmq.connection import Connection
    from dropboxmq.message import Queue

    with Connection(root, "bench-receive") as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        consumer = session.create_consumer(Queue(queue))
        got = 0
        t, cpu = time.perf_counter(), time.process_time()
        while consumer.receive(0) is not None:
            got += 1
            if got % batch == 0:
                session.acknowledge()
        session.acknowledge()
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        consumer.close()
    assert got == n, (got, n)
    return seconds, cpu


def tree_cpu(root_pid: int) -> float:
    """CPU seconds (user + system, reaped children's included) of ``root_pid`` and its live
    descendants, from /proc: Spark's JVM with the Python processes it starts."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                raw = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = raw[raw.rindex(")") + 2:].split()
            procs[int(d)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += procs.get(pid, (0, 0.0))[1]
        todo.extend(p for p, (parent, _) in procs.items() if parent == pid)
    return total


def drain_breakdown(query: Any, wall: float, cpu: float) -> dict[str, Any]:
    """Where a finished availableNow query's time went: its micro-batches, the sum of each phase
    of their ``durationMs`` (seconds), the wall time outside them, and the CPU of Spark's side."""
    progress = [p for p in query.recentProgress if p.numInputRows]
    phases: dict[str, float] = {}
    for p in query.recentProgress:
        for k, ms in p.durationMs.items():
            phases[k] = phases.get(k, 0.0) + ms / 1000
    inside = phases.get("triggerExecution", 0.0)
    return {"batches": len(progress), "rows_per_batch": [p.numInputRows for p in progress],
            "phases_s": {k: round(v, 2) for k, v in sorted(phases.items())},
            "outside_batches_s": round(wall - inside, 2), "spark_cpu_s": round(cpu, 2)}


def _warm_up(spark: Any, root: Path, tmp: str) -> dict[str, float]:
    """One small run (100 messages) of every action before the timed ones, so that Spark's
    Python workers are started and every module imported before the clocks run (on both
    sides).  Returns the seconds of the Spark actions: near their fixed cost (planning, the
    Python processes Spark starts for each action), which a small N cannot amortize."""
    seconds: dict[str, float] = {}
    rows = spark.range(100).selectExpr("cast(id as string) AS text", "cast(id % 10 as int) AS seq")
    for durable in ("false", "true"):
        t = time.perf_counter()
        rows.write.format("dropboxmq").option("root", str(root)).option("durable", durable).mode("append").save("warm")
        seconds[f"write_durable_{durable}"] = time.perf_counter() - t
    t = time.perf_counter()
    spark.read.format("dropboxmq").option("root", str(root)).load("warm").count()
    seconds["browse"] = time.perf_counter() - t
    spark.read.format("binaryFile").load(str(root / "warm" / "incoming" / "target")).count()
    ckpt = str(Path(tmp) / "warm-ck")
    t = time.perf_counter()
    (spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ckpt)
     .load("warm").select("message_id", "text").writeStream.format("parquet")
     .option("path", str(Path(tmp) / "warm-sink")).option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start().awaitTermination())
    seconds["drain"] = time.perf_counter() - t
    _library_send(root, "warm-library", 100, persistent=True)
    library_receive(root, "warm-library", 100)
    return {k: round(v, 2) for k, v in seconds.items()}


def run(spark: Any, n: int, per_trigger: int | None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    figures: dict[str, float] = {}
    loads: dict[str, float] = {}  # the 1-minute load average as each figure's clock started

    def load(key: str) -> None:
        loads[key] = round(os.getloadavg()[0], 1)

    with tempfile.TemporaryDirectory(prefix="dropboxmq-spark-bench-") as tmp:
        root = Path(tmp) / "root"
        small = _warm_up(spark, root, tmp)
        rows = spark.range(n).selectExpr(f"rpad(concat('m', cast(id as string)), {BODY_BYTES}, '.') AS text",
                                         "cast(id % 10 as int) AS seq").cache()
        rows.count()

        # write: Spark's batch write against the library's send, both without fsync
        load("spark_write")
        t = time.perf_counter()
        rows.write.format("dropboxmq").option("root", str(root)).option("durable", "false").mode("append").save("w")
        figures["spark_write"] = n / (time.perf_counter() - t)
        load("library_send")
        figures["library_send"] = n / _library_send(root, "w-library", n, persistent=False)
        load("spark_write_durable")
        t = time.perf_counter()
        rows.write.format("dropboxmq").option("root", str(root)).option("durable", "true").mode("append").save("wd")
        figures["spark_write_durable"] = n / (time.perf_counter() - t)

        # browse: every body of the queue, against binaryFile on the same files
        target = str(root / "w" / "incoming" / "target")
        load("spark_browse")
        t = time.perf_counter()
        got = (spark.read.format("dropboxmq").option("root", str(root)).load("w")
               .agg(F.count("*"), F.sum(F.length("body"))).first())
        figures["spark_browse"] = n / (time.perf_counter() - t)
        assert tuple(got) == (n, n * BODY_BYTES), got
        load("binary_file")
        t = time.perf_counter()
        got = spark.read.format("binaryFile").load(target).agg(F.count("*"), F.sum(F.length("content"))).first()
        figures["binary_file"] = n / (time.perf_counter() - t)
        assert tuple(got) == (n, n * BODY_BYTES), got

        # drain: twin queues of persistent messages, sent alike
        _library_send(root, "drain", n, persistent=True)
        _library_send(root, "drain-twin", n, persistent=True)
        _library_send(root, "drain-twin-batched", n, persistent=True)
        ckpt, sink = str(Path(tmp) / "ck"), str(Path(tmp) / "sink")
        load("spark_drain")
        jvm = spark.sparkContext._gateway.proc.pid
        cpu = tree_cpu(jvm) + time.process_time()
        t = time.perf_counter()
        source = spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ckpt)
        if per_trigger:
            source = source.option("maxMessagesPerTrigger", per_trigger)
        q = (source.load("drain").select("message_id", "text").writeStream.format("parquet").option("path", sink)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination()
        wall = time.perf_counter() - t
        drain = drain_breakdown(q, wall, tree_cpu(jvm) + time.process_time() - cpu)
        figures["spark_drain"] = n / wall
        load("library_receive")
        receive_wall, receive_cpu = library_receive(root, "drain-twin", n)
        figures["library_receive"] = n / receive_wall
        drain["library_cpu_s"] = round(receive_cpu, 2)
        drain["cpu_ratio"] = round(receive_cpu / drain["spark_cpu_s"], 2)
        load("library_receive_batched")
        from dropboxmq_spark import DEFAULT_MESSAGES_PER_TRIGGER

        batched_wall, batched_cpu = library_receive_batched(root, "drain-twin-batched", n,
                                                            per_trigger or DEFAULT_MESSAGES_PER_TRIGGER)
        figures["library_receive_batched"] = n / batched_wall
        drain["library_batched_cpu_s"] = round(batched_cpu, 2)
        assert spark.read.parquet(sink).select("message_id").distinct().count() == n
        for queue in ("drain", "drain-twin", "drain-twin-batched"):
            box = root / queue / "incoming"
            assert not os.listdir(box / "target") and not os.listdir(box / "processing"), queue
            assert len(os.listdir(box / "processed")) == n, queue
        rows.unpersist()
    ratios = {
        "browse": figures["spark_browse"] / figures["binary_file"],
        "drain": figures["spark_drain"] / figures["library_receive"],
        "write": figures["spark_write"] / figures["library_send"],
    }
    drain["drain_vs_batched_ack"] = round(figures["spark_drain"] / figures["library_receive_batched"], 2)
    return {"messages": n, "max_messages_per_trigger": per_trigger or DEFAULT_MESSAGES_PER_TRIGGER,
            "rates": {k: round(v) for k, v in figures.items()},
            "ratios": {k: round(v, 2) for k, v in ratios.items()},
            "goals_met": {k: ratios[k] >= GOALS[k] for k in GOALS},
            "load_average_at_start": loads, "drain_breakdown": drain,
            "seconds_for_100_messages": small}


def _report(result: dict[str, Any]) -> str:
    r, q = result["rates"], result["ratios"]
    lines = [f"{result['messages']:,} messages ({BODY_BYTES} B), local[2]:"]
    for key, spark_key, other_key, other in (("browse", "spark_browse", "binary_file", "binaryFile"),
                                             ("drain", "spark_drain", "library_receive", "library receive"),
                                             ("write", "spark_write", "library_send", "library send")):
        verdict = "hit " if result["goals_met"][key] else "MISS"
        la = result["load_average_at_start"]
        lines.append(f"  {key:<6} {r[spark_key]:>8,} msg/s  vs {other} {r[other_key]:>8,} msg/s  "
                     f"= {q[key]:.2f}x  (goal {GOALS[key]:.1f}x: {verdict})  load {la[spark_key]}/{la[other_key]}")
    d = result["drain_breakdown"]
    lines.append(f"  drain: {d['batches']} micro-batch(es) of {result['max_messages_per_trigger']:,} at most; "
                 f"phases (s) " + ", ".join(f"{k} {v}" for k, v in d["phases_s"].items() if k != "triggerExecution")
                 + f"; outside the batches {d['outside_batches_s']} s; CPU Spark {d['spark_cpu_s']} s "
                 f"vs library {d['library_cpu_s']} s = {d['cpu_ratio']:.2f}x")
    lines.append(f"  drain vs a receive acking (fsync) once per {result['max_messages_per_trigger']:,} "
                 f"(CLIENT_ACKNOWLEDGE) {r['library_receive_batched']:,} msg/s = {d['drain_vs_batched_ack']:.2f}x "
                 f"(no goal; CPU {d['library_batched_cpu_s']} s)  load {result['load_average_at_start']['library_receive_batched']}")
    lines.append(f"  durable batch write {r['spark_write_durable']:,} msg/s")
    lines.append("  the same Spark actions on 100 messages (~their fixed cost), seconds: " +
                 ", ".join(f"{k} {v}" for k, v in result["seconds_for_100_messages"].items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, nargs="+", default=[20000, 100000],
                    help="messages per figure, one run per size (default 20000 100000)")
    ap.add_argument("--max-per-trigger", type=int, default=None,
                    help="the drain's maxMessagesPerTrigger (default: none given, the source's default)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args()
    require_or_exit("python -m dropboxmq_stress.spark_bench", "spark", "pyspark")
    spark = _session(2)
    results = []
    try:
        for n in args.messages:
            result = run(spark, n, args.max_per_trigger)
            print(_report(result), flush=True)
            results.append(result)
    finally:
        spark.stop()
    if args.json:
        doc = {"tool": "dropboxmq_stress.spark_bench",
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
               "master": "local[2]", "body_bytes": BODY_BYTES, "goals": GOALS, "runs": results}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
