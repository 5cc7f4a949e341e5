"""The Celery app that ``celery_compare`` (and tests/test_celery.py) run real workers on:
``python -m celery -A dropboxmq_stress.celery_tasks worker ...``.

Configured by the environment: ``CELERY_COMPARE_BROKER`` (``dropboxmq:///root`` or kombu's
``filesystem://``, whose folder is ``CELERY_COMPARE_FS_FOLDER``) and ``CELERY_COMPARE_OUT``,
where every run of a task leaves files: ``started/<name>~<run>`` and ``done/<name>~<run>`` (a
task run twice leaves two of each) and one line in ``order.log`` as it starts."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from celery import Celery

import dropboxmq_kombu  # noqa: F401  # registers dropboxmq://

#: the queue every task goes to
QUEUE = "work"


def make_app(broker: str, fs_folder: str | None = None) -> Celery:
    """The app, as a producer or a worker: late acks, redelivery when a worker process is lost,
    one message per worker process at a time (RabbitMQ's recommended settings for long tasks)."""
    app = Celery("dropboxmq_stress.celery_tasks", broker=broker)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if fs_folder is not None:
        app.conf.broker_transport_options = {"data_folder_in": fs_folder, "data_folder_out": fs_folder,
                                             "control_folder": fs_folder + "-control"}
    return app


OUT = Path(os.environ.get("CELERY_COMPARE_OUT", "."))
app = make_app(os.environ.get("CELERY_COMPARE_BROKER", "dropboxmq:///tmp/dropboxmq-celery"),
               os.environ.get("CELERY_COMPARE_FS_FOLDER"))


def _leave(kind: str, name: str) -> None:
    (OUT / kind).mkdir(parents=True, exist_ok=True)
    (OUT / kind / f"{name}~{uuid.uuid4().hex[:8]}").write_text(f"{os.getpid()} {time.time():.6f}\n")


@app.task(name="record")
def record(name: str, seconds: float = 0.0) -> str:
    """Note the start (and its place in order.log), work ``seconds``, note the end."""
    _leave("started", name)
    with open(OUT / "order.log", "a") as log:
        log.write(f"{name} {time.time():.6f}\n")
    if seconds:
        time.sleep(seconds)  # the task's work: what a kill -9 interrupts
    _leave("done", name)
    return name


@app.task(name="die_once", bind=True)
def die_once(self, name: str) -> str:
    """Kill its own pool process at the first delivery (a segfault, the OOM killer); run at
    the redelivery.  With task_reject_on_worker_lost the worker requeues it."""
    _leave("started", name)
    if not (self.request.delivery_info or {}).get("redelivered"):
        os.kill(os.getpid(), signal.SIGKILL)
    _leave("done", name)
    return name
