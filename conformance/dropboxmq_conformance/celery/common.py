"""The Celery app of the conformance scripts: broker ``dropboxmq://ROOT``, default queue QUEUE,
late acks, one message at a time; a message that is no Celery task (what the suite plants)
runs as the task ``conformance.deliver`` (the transport option ``foreign_task``), which writes
its message id on stdout."""

import os

from celery import Celery

import dropboxmq_kombu  # noqa: F401  # registers dropboxmq://

DELIVER = "conformance.deliver"


def make_app(root: str, queue: str) -> Celery:
    app = Celery("dropboxmq-conformance", broker=f"dropboxmq://{os.path.abspath(root)}")
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"foreign_task": DELIVER},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )

    @app.task(name=DELIVER)
    def deliver(message: dict) -> None:
        # one write(2) of one line: the worker's pool processes share the output file
        os.write(1, f"{message['message_id']}\n".encode())

    return app
