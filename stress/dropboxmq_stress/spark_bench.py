"""The figures of README's Spark section: the ``dropboxmq`` data source in ``local[2]``.

Run: ``python -m dropboxmq_stress.spark_bench [--messages N]`` (``make bench`` runs it).

Each figure is messages per second of one Spark action on a fresh queue of N messages (default
20,000), timed from the call to its end, the session already started: batch write (one
transaction, durable and ``durable=false``), browse (batch read, ``count()``), and a streaming
``availableNow`` run (claim + read + ack, 1,000 a batch) into Parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dropboxmq.extras import require_or_exit


def _session():
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dropboxmq-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dropboxmq_spark import register

    register(spark)  # an editable install is not discovered (see pyspark_dropboxmq)
    return spark


def run(n: int) -> dict[str, float]:
    spark = _session()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dropboxmq-spark-bench-") as tmp:
        root = str(Path(tmp) / "root")
        rows = spark.range(n).selectExpr("concat('m', cast(id as string)) AS text", "id % 10 AS seq").cache()
        rows.count()
        for label, durable in (("batch_write_durable", "true"), ("batch_write_nosync", "false")):
            t = time.perf_counter()
            rows.write.format("dropboxmq").option("root", root).option("durable", durable).mode("append").save(label)
            out[label] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        assert spark.read.format("dropboxmq").option("root", root).load("batch_write_nosync").count() == n
        out["browse"] = n / (time.perf_counter() - t)
        ckpt = str(Path(tmp) / "ck")
        t = time.perf_counter()
        q = (spark.readStream.format("dropboxmq").option("root", root).option("checkpointLocation", ckpt)
             .option("maxMessagesPerTrigger", 1000).load("batch_write_durable").select("message_id", "text")
             .writeStream.format("parquet").option("path", str(Path(tmp) / "sink"))
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination()
        out["stream_available_now"] = n / (time.perf_counter() - t)
        assert spark.read.parquet(str(Path(tmp) / "sink")).count() == n
        assert not os.listdir(Path(root) / "batch_write_durable" / "incoming" / "processing")
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000, help="messages per figure (default 20000)")
    args = ap.parse_args()
    require_or_exit("python -m dropboxmq_stress.spark_bench", "spark", "pyspark")
    figures = run(args.messages)
    print(json.dumps({k: round(v) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
