"""NOT a dropboxmq consumer: Spark's built-in streaming file source reading target/.  It never
claims (no rename into processing/), never acknowledges: the suite must flag it.

    file_stream_consumer.py ROOT QUEUE CLIENT_ID OUT
"""

import os
import sys

from common import session  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]

root, queue, client_id, out = sys.argv[1:5]
spark = session("spark-file-stream")
target = os.path.join(root, queue, "incoming", "target")


def deliver(batch, batch_id):
    for row in batch.selectExpr("input_file_name() as f").distinct().collect():
        print(os.path.basename(row.f), flush=True)  # the file name, as found in target/


ckpt = os.path.join(out, f"spark-file-checkpoint-{client_id}")
q = (spark.readStream.option("wholetext", "true").text(target).writeStream.foreachBatch(deliver)
     .option("checkpointLocation", ckpt).start())
q.processAllAvailable()
q.stop()
spark.stop()
