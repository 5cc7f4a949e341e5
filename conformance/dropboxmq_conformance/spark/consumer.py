"""Spark consumer on the dropboxmq data source: a streaming query that claims from QUEUE as client
CLIENT_ID, prints each message id once its micro-batch is processed, and acknowledges every batch
once Spark has committed it; stops when a look at target/ finds nothing to claim.

    consumer.py ROOT QUEUE CLIENT_ID OUT
"""

import os
import sys
import time

from common import session  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]

root, queue, client_id, out = sys.argv[1:5]
per_trigger = os.environ.get("DROPBOXMQ_MAX_PER_TRIGGER", "5")
spark = session("dropboxmq-conformance-consumer")
from dropboxmq_spark import register  # noqa: E402

register(spark)
ckpt = os.path.join(out, f"spark-checkpoint-{client_id}")
t = time.perf_counter()
count = 0


def deliver(batch, batch_id):
    global count
    for row in batch.select("message_id").collect():
        print(row.message_id, flush=True)
        count += 1


q = (spark.readStream.format("dropboxmq").option("root", root).option("clientId", client_id)
     .option("checkpointLocation", ckpt).option("maxMessagesPerTrigger", per_trigger).load(queue)
     .writeStream.foreachBatch(deliver).option("checkpointLocation", ckpt).start())
q.processAllAvailable()
q.stop()
print(f"consumed {count} messages in {time.perf_counter() - t:.2f} s", file=sys.stderr)
spark.stop()
