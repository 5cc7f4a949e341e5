"""Celery producer: every file of BODY_DIR, in name order, sent as one Celery task (the body in
its argument, base64) with task priority PRIORITY, through the dropboxmq:// transport.

    producer.py ROOT QUEUE BODY_DIR PRIORITY

A Celery message is a task envelope, so target/ holds envelopes, not the bare bodies (the
manifest says produce.bodies = "own"); the priority is the message's JMSPriority."""

import base64
import os
import sys

from common import DELIVER, make_app  # type: ignore[import-not-found]  # the script's folder is its sys.path[0]

root, queue, body_dir, priority = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
app = make_app(root, queue)
try:
    for name in sorted(n for n in os.listdir(body_dir) if not n.startswith(".")):
        with open(os.path.join(body_dir, name), "rb") as f:
            body = base64.b64encode(f.read()).decode("ascii")
        app.send_task(DELIVER, args=[{"message_id": name, "body_base64": body}], priority=priority)
finally:
    app.close()
