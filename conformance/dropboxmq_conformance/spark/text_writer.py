"""NOT a dropboxmq producer: Spark's own text writer pointed at target/.  It writes in place
(part files, _temporary/, _SUCCESS): the suite must flag it.

    text_writer.py ROOT QUEUE BODY_DIR PRIORITY
"""

import os
import sys

from common import session  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]

root, queue, body_dir = sys.argv[1], sys.argv[2], sys.argv[3]
spark = session("spark-text-writer")
lines = spark.read.format("binaryFile").load(body_dir).selectExpr("cast(content as string) as value")
lines.write.mode("append").text(os.path.join(root, queue, "incoming", "target"))
spark.stop()
