"""The README's snippets run as written in the venv `make setup` builds, and user code written
against the public API type-checks under `mypy --strict` there (issue 29)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import counts
from test_cli import DMQ

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
VENV_BIN = os.path.dirname(sys.executable)


def blocks(kind: str, section: str) -> list[str]:
    """The ```KIND blocks of the README section whose heading is ``section``."""
    body = README.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{kind}\n(.*?)```", body, flags=re.S)


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: the venv's scripts first on PATH, nothing of this test run's own paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DROPBOXMQ_ROOT", "DROPBOXMQ_CLIENT_ID")}
    return {**env, "PATH": VENV_BIN + os.pathsep + env["PATH"], **extra}


@pytest.mark.skipif(DMQ is None, reason="the dropboxmq script is not installed")
def test_the_library_section_runs_as_written(tmp_path: Path) -> None:
    setup, = blocks("sh", "Using the library")
    code, = blocks("python", "Using the library")
    (tmp_path / "snippet.py").write_text(code)
    (tmp_path / "scan.tiff").write_bytes(b"II*\x00" + bytes(4096))  # the user's file the snippet sends
    # the sh block, then the snippet, in one shell: its export reaches the program
    result = subprocess.run(["sh", "-ec", setup + f'\n"{sys.executable}" snippet.py\n'], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=user_env())
    assert result.returncode == 0, result.stderr
    root = tmp_path / "mq"
    assert counts(root, "audit")["processed"] == 0 and counts(root, "audit")["target"] == 1
    # the selector took invoice 43; the other two wait for a consumer without it
    assert (counts(root, "invoices")["processed"], counts(root, "invoices")["target"]) == (1, 2)
    assert counts(root, "scans")["processed"] == 1


@pytest.mark.skipif(DMQ is None, reason="the dropboxmq script is not installed")
def test_the_dead_letter_and_shell_habit_snippets_run_as_written(tmp_path: Path) -> None:
    section = "Command line"
    dead_letters = next(b for b in blocks("sh", section) if "redrive" in b)
    bodies = next(b for b in blocks("sh", section) if "--delimiter" in b)
    lines_send = [line for b in blocks("sh", section) for line in b.splitlines() if "--lines" in line]
    script = "\n".join([
        "set -e", "dropboxmq init orders uploads",
        "dropboxmq send orders poison > /dev/null",
        "dropboxmq receive orders --max-deliveries 1 --exec 'exit 1' || true",  # a dead letter to look at
        dead_letters, *lines_send,
        "printf 'blob' > blob.gz && dropboxmq send uploads --file blob.gz > /dev/null",
        bodies,
    ])
    result = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=user_env(DROPBOXMQ_ROOT=str(tmp_path / "mq")))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "poison" in out and "redriven to orders" in out  # browsed in error/, then redriven
    assert (tmp_path / "blob.gz").read_bytes() == b"blob"  # received back into the file
    assert "1\n2\n" in out  # --lines sent one message per line; --delimiter printed them one a line


def test_user_code_type_checks_under_mypy_strict_outside_the_repository(tmp_path: Path) -> None:
    user = tmp_path / "worker.py"
    user.write_text('''
from dropboxmq import (Body, Connection, Message, PropertyValue, Queue, QueueNotFoundError, Settings,
                       TextMessage)


def handle(message: Message) -> None:
    region: PropertyValue | None = message.get_property("region")
    attempts: PropertyValue | int = message.get_property("attempts", 0)
    print(message.message_id, region, attempts)


def main() -> int:
    with Connection.from_env(settings=Settings(max_delivery_attempts=3), client_id="billing") as conn:
        session = conn.create_session()
        queue: Queue = conn.create_queue("invoices")
        sent: Message = session.create_producer().send(queue, "invoice 42")
        msg = TextMessage("invoice 43")
        msg.set_property("region", "eu")
        session.create_producer().send(msg, queue, priority=7)
        consumer = session.create_consumer(queue, selector="region = 'eu'")
        body: Body | None = consumer.receive_body(timeout=5)
        if isinstance(body, str):
            print(body.upper())
        consumer.set_message_listener(handle)
        conn.close(grace=10)
        try:
            session.create_consumer(Queue("invoics"))
        except QueueNotFoundError as exc:
            print(exc)
        return 0 if sent.message_id else 1
''')
    wrong = tmp_path / "wrong.py"  # precise types: these mistakes are caught, not waved through as Any
    wrong.write_text('''
from dropboxmq import Connection, Queue, TextMessage

with Connection("root") as conn:
    count: int = conn.create_session().create_consumer(Queue("q")).receive_body()
    name: str = TextMessage("x").get_property("name")
''')

    def mypy(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", path.name], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env=user_env())

    good = mypy(user)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy(wrong)
    assert bad.returncode == 1 and "wrong.py:5: error" in bad.stdout and "wrong.py:6: error" in bad.stdout, bad.stdout
    assert "import-not-found" not in bad.stdout and "import-untyped" not in bad.stdout


def test_spark_discovers_the_data_source_from_the_make_venv(tmp_path: Path) -> None:
    """Spark finds Python data sources as top-level modules named pyspark_* (pkgutil.iter_modules);
    the editable install's import hook hides them, the Makefile's path entry shows them."""
    probe = "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, env=user_env())
    assert "pyspark_dropboxmq" in result.stdout, result.stdout + result.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_the_spark_batch_snippet_runs_without_any_shim(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    snippet = blocks("python", "Spark")[0]
    root = tmp_path / "root"
    from dropboxmq import Connection, Queue

    with Connection(root, create=True) as conn:
        conn.create_session().create_producer().send(Queue("orders"), "order 1")
    program = ("from pyspark.sql import SparkSession\n"
               "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
               f"root = {str(root)!r}\n" + snippet + "spark.stop()\n")
    env = user_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert counts(root, "orders-copy")["target"] == 1
