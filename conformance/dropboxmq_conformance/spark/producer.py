"""Spark producer on the dropboxmq data source: every file of BODY_DIR, in name order, one
BytesMessage each, priority PRIORITY -- the whole job one transaction.

    producer.py ROOT QUEUE BODY_DIR PRIORITY
"""

import os
import sys
import time

from common import session  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]

root, queue, body_dir, priority = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spark = session("dropboxmq-conformance-producer")
from dropboxmq_spark import register  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

register(spark)
# the file names are listed on the driver, the bodies read by the task (Spark's binaryFile
# source would silently skip an empty file); one partition: sends in name order
paths = sorted(os.path.join(body_dir, n) for n in os.listdir(body_dir) if not n.startswith("."))


def read_body(path):
    with open(path, "rb") as f:
        return (bytearray(f.read()),)


bodies = (spark.sparkContext.parallelize(paths, 1).map(read_body).toDF("body binary")
          .select("body", F.lit(priority).alias("priority"), F.lit("BytesMessage").alias("message_class")))
t = time.perf_counter()
n = bodies.count()
bodies.write.format("dropboxmq").option("root", root).mode("append").save(queue)
print(f"sent {n} messages in {time.perf_counter() - t:.2f} s", file=sys.stderr)
spark.stop()
