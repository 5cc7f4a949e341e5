"""Ready for operations (issue 29): a normal stop handles nothing twice, dead letters can be
seen and sent back, the library refuses what the CLI refuses, shell habits work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import click
import pytest

from conftest import counts
from test_cli import DMQ, assert_one_line_error, ok, run

from dropboxmq.cli import main
from dropboxmq import (Connection, Queue, QueueNotFoundError, RootNotFoundError, Settings, TextMessage,
                       AUTO_ACKNOWLEDGE)

needs_script = pytest.mark.skipif(DMQ is None, reason="the dropboxmq script is not installed")


def wait_for(predicate, what: str, limit: float = 30.0) -> None:
    """Poll for an event another process makes happen (a file appears, a process ends)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def start_receive(root: Path, *args: str, **popen) -> subprocess.Popen:
    assert DMQ is not None
    return subprocess.Popen([DMQ, "--root", str(root), "receive", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


# ---------------------------------------------------------------- graceful stop


@needs_script
def test_sigterm_lets_the_running_handler_finish_once_and_acknowledges(tmp_path: Path, root: Path) -> None:
    started, out = tmp_path / "started", tmp_path / "handled"
    ok(root, "init", "jobs")
    message_id = ok(root, "send", "jobs", "job one").stdout.strip()
    proc = start_receive(root, "jobs", "--exec", f'touch "{started}"; sleep 2; {{ cat; echo " $JMSMessageID"; }} >> "{out}"')
    wait_for(started.exists, "the handler to start")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert out.read_text().splitlines() == [f"job one {message_id}"]  # handled exactly once
    c = counts(root, "jobs")
    assert (c["processed"], c["processing"], c["target"], c["error"]) == (1, 0, 0, 0)
    assert "error" not in stderr
    # nothing is left for recovery to hand out again
    assert "nothing to do" in ok(root, "recover", "--assume-unknown-dead").stdout
    assert run(root, "receive", "jobs").exit_code == 3


@needs_script
def test_a_handler_past_the_grace_is_killed_with_its_group_and_its_message_returned(tmp_path: Path,
                                                                                    root: Path) -> None:
    started, pids = tmp_path / "started", tmp_path / "pids"
    ok(root, "init", "jobs")
    message_id = ok(root, "send", "jobs", "slow").stdout.strip()
    proc = start_receive(root, "jobs", "--grace", "0.3", "--exec",
                         f'sleep 60 & echo $$ $! > "{pids}"; touch "{started}"; wait')
    wait_for(started.exists, "the handler to start")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert stderr.count("\n") == 1 and message_id in stderr and "--grace" in stderr, stderr
    shell_pid, sleep_pid = map(int, pids.read_text().split())
    wait_for(lambda: not alive(shell_pid) and not alive(sleep_pid), "the handler's group to die")
    [waiting] = [json.loads(line) for line in ok(root, "browse", "jobs", "--json").stdout.splitlines()]
    assert waiting["id"] == message_id and waiting["redelivered"] is True  # returned, flagged


@needs_script
def test_kill_9_of_receive_kills_the_handler_before_anyone_redelivers(tmp_path: Path, root: Path) -> None:
    started, pids, out = tmp_path / "started", tmp_path / "pids", tmp_path / "handled"
    ok(root, "init", "jobs")
    ok(root, "send", "jobs", "once")
    proc = start_receive(root, "jobs", "--exec",
                         f'sleep 60 & echo $$ $! > "{pids}"; touch "{started}"; wait; echo late >> "{out}"')
    wait_for(started.exists, "the handler to start")
    proc.kill()
    proc.communicate(timeout=60)
    shell_pid, sleep_pid = map(int, pids.read_text().split())
    wait_for(lambda: not alive(shell_pid) and not alive(sleep_pid), "the orphaned handler to be killed")
    assert not out.exists()
    # the next receive gets the message back (dead owner), with no old handler running beside it
    result = ok(root, "receive", "jobs", "--json")
    assert json.loads(result.stdout)["redelivered"] is True


def test_a_consumer_killed_the_instant_its_handler_starts_takes_the_handlers_children(tmp_path: Path) -> None:
    """CI flake of the test above: the handler's process group was registered with the watchdog
    only after Popen returned (and the watchdog itself started then), so a consumer killed at
    once left the handler's own children running.  Here the handler kills its consumer first."""
    import sys
    import textwrap

    pids = tmp_path / "pids"
    consumer = textwrap.dedent(f"""
        import os
        from dropboxmq.graceful import HandlerRunner, StopSignals
        runner = HandlerRunner(StopSignals(grace=1.0))
        runner.run('sleep 60 & echo $! > "{pids}"; kill -9 $PPID; wait',
                   open(os.devnull, "rb"), dict(os.environ))
    """)
    proc = subprocess.run([sys.executable, "-c", consumer], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    sleep_pid = int(pids.read_text())
    wait_for(lambda: not alive(sleep_pid), "the handler's child to be killed with its consumer")


@needs_script
def test_ctrl_c_ends_follow_with_exit_0(root: Path) -> None:
    ok(root, "init", "q")
    proc = start_receive(root, "q", "--follow", "--json")
    ok(root, "send", "q", "first")
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["text"] == "first"  # following: it is waiting for more
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stderr == "", stderr
    assert counts(root, "q")["processed"] == 1


def test_follow_is_documented_and_refuses_a_timeout(root: Path) -> None:
    ok(root, "init", "q")
    assert "--follow" in ok(None, "receive", "--help").stdout
    assert "--follow" in ok(None, "subscribe", "--help").stdout
    assert_one_line_error(run(root, "receive", "q", "--follow", "--timeout", "5"), "--follow", code=2)


def test_connection_close_lets_a_listener_finish_within_the_grace(root: Path) -> None:
    started = threading.Event()
    with Connection(root, create=True) as conn:
        conn.create_session().create_producer().send(Queue("q"), "work")
        handled: list[str] = []

        def listener(message) -> None:
            started.set()
            time.sleep(0.3)  # the work itself
            handled.append(message.text)

        conn.create_session(ack_mode=AUTO_ACKNOWLEDGE).create_consumer(Queue("q")).set_message_listener(listener)
        assert started.wait(30)
        conn.close(grace=30)
    assert handled == ["work"]
    assert counts(root, "q")["processed"] == 1 and counts(root, "q")["processing"] == 0


def test_connection_close_past_the_grace_returns_the_listeners_message(root: Path) -> None:
    started, release = threading.Event(), threading.Event()
    conn = Connection(root, create=True)
    conn.create_session().create_producer().send(Queue("q"), "stuck")

    def listener(message) -> None:
        started.set()
        release.wait(30)

    conn.create_session().create_consumer(Queue("q")).set_message_listener(listener)
    assert started.wait(30)
    conn.close(grace=0.05)
    assert counts(root, "q")["target"] == 1  # back, for another consumer
    release.set()  # the late listener's ack finds nothing to acknowledge
    with Connection(root) as again:
        msg = again.create_session().create_consumer(Queue("q")).receive(5)
        assert msg is not None and msg.redelivered and msg.text == "stuck"


# ---------------------------------------------------------------- dead letters


def test_poison_dead_letters_after_max_deliveries_is_browsed_and_redriven_intact(root: Path) -> None:
    ok(root, "init", "orders")
    message_id = ok(root, "send", "orders", "poison pill", "--property", "region=eu", "--property", "n=3:int",
                    "--correlation-id", "c-9", "--priority", "7").stdout.strip()
    started = time.monotonic()
    result = run(root, "receive", "orders", "-n", "0", "--timeout", "0", "--max-deliveries", "3",
                 "--redelivery-delay", "0.01", "--exec", "cat > /dev/null; exit 1")
    assert time.monotonic() - started < 20  # no wait for a redelivery that will never come
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4 and all(message_id in line for line in lines), lines  # every line names the message
    assert "(delivery 3 of 3): no retries left" in lines[2], lines
    assert lines[3].startswith("error: dead-lettered to error/") and "--state error" in lines[3], lines
    assert counts(root, "orders")["error"] == 1

    [dead] = [json.loads(line) for line in ok(root, "browse", "orders", "--state", "error", "--json").stdout.splitlines()]
    assert (dead["id"], dead["state"], dead["text"]) == (message_id, "error", "poison pill")

    redriven = ok(root, "redrive", "orders")
    assert redriven.stdout.split() == [message_id, "redriven", "to", "orders"]
    assert counts(root, "orders")["error"] == 0
    [back] = [json.loads(line) for line in ok(root, "receive", "orders", "--json").stdout.splitlines()]
    assert back["id"] == message_id and back["text"] == "poison pill" and back["class"] == "T"
    assert (back["priority"], back["correlation_id"], back["delivery_count"]) == (7, "c-9", 1)
    assert back["properties"]["region"] == "eu" and back["properties"]["n"] == 3


def test_redrive_keeps_bytes_and_respects_the_limit(root: Path) -> None:
    ok(root, "init", "q")
    raw = bytes(range(256))
    with Connection(root) as conn:
        producer = conn.create_session().create_producer(Queue("q"))
        ids = [producer.send(Queue("q"), raw + bytes([i])).message_id for i in range(3)]
    run(root, "receive", "q", "-n", "0", "--max-deliveries", "1", "--exec", "exit 1")
    assert counts(root, "q")["error"] == 3
    assert ok(root, "redrive", "q", "--limit", "2").stdout.split()[::4] == ids[:2]  # oldest first
    assert counts(root, "q")["error"] == 1 and counts(root, "q")["target"] == 2
    with Connection(root) as conn:
        consumer = conn.create_session().create_consumer(Queue("q"))
        assert [consumer.receive_body(1) for _ in range(2)] == [raw + b"\x00", raw + b"\x01"]


def test_browse_shows_every_state(root: Path) -> None:
    ok(root, "init", "q")
    first = ok(root, "send", "q", "one").stdout.strip()
    second = ok(root, "send", "q", "two").stdout.strip()
    ok(root, "receive", "q")
    assert [json.loads(x)["id"] for x in ok(root, "browse", "q", "--state", "processed", "--json").stdout.splitlines()] \
        == [first]
    assert [json.loads(x)["id"] for x in ok(root, "browse", "q", "--json").stdout.splitlines()] == [second]
    assert ok(root, "browse", "q", "--state", "error").stdout == ""
    assert_one_line_error(run(root, "browse", "q", "--state", "nosuch"), "--state", code=2)


def test_subscribe_has_exec_and_max_deliveries(tmp_path: Path, root: Path) -> None:
    out = tmp_path / "out"
    ok(root, "init")
    ok(root, "subscribe", "news", "--shared", "--durable", "board", "-n", "0")  # create the subscription
    ok(root, "publish", "news", "goal")
    ok(root, "subscribe", "news", "--shared", "--durable", "board", "--max-deliveries", "2",
       "--exec", f'cat >> "{out}"')
    assert out.read_text() == "goal"
    ok(root, "publish", "news", "bytes")
    assert ok(root, "subscribe", "news", "--shared", "--durable", "board", "--body").stdout == "bytes"
    ok(root, "publish", "news", "to a file")
    written = ok(root, "subscribe", "news", "--shared", "--durable", "board", "--output-dir", str(tmp_path / "in"))
    assert Path(written.stdout.strip()).read_text() == "to a file"


# ---------------------------------------------------------------- the library refuses what the CLI refuses


def test_connection_to_a_missing_root_raises_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "queues").mkdir()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(RootNotFoundError, match="did you mean 'queues'"):
        Connection(tmp_path / "queus")
    with pytest.raises(RootNotFoundError, match="not a directory"):
        Connection("/etc/passwd")
    assert sorted(os.listdir(tmp_path)) == before


def test_from_env_without_a_root_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DROPBOXMQ_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RootNotFoundError, match="DROPBOXMQ_ROOT"):
        Connection.from_env()
    assert os.listdir(tmp_path) == []  # no ./var/dropbox


def test_a_missing_queue_raises_with_did_you_mean_and_creates_nothing(root: Path) -> None:
    ok(root, "init", "audit")
    with Connection(root) as conn:
        session = conn.create_session()
        with pytest.raises(QueueNotFoundError, match="did you mean 'audit'"):
            session.create_consumer(Queue("audti"))
        with pytest.raises(QueueNotFoundError, match="did you mean 'audit'"):
            session.create_producer().send(Queue("audti"), "x")
        with pytest.raises(QueueNotFoundError):
            session.create_browser(Queue("audti"))
        assert not (root / "audti").exists()
        conn.create_queue("audti")  # creation is explicit
        session.create_producer().send(Queue("audti"), "now it exists")
    with Connection(root.parent / "fresh", create=True) as conn:  # or asked for up front
        conn.create_session().create_producer().send(Queue("q"), "x")
    assert counts(root, "audti")["target"] == 1 and counts(root.parent / "fresh", "q")["target"] == 1


# ---------------------------------------------------------------- shell habits


def test_send_lines_and_body_delimiter(root: Path) -> None:
    ok(root, "init", "numbers")
    ids = ok(root, "send", "numbers", "--lines", input="1\n2\n\n3\n").stdout.split()
    assert len(ids) == 4 and counts(root, "numbers")["target"] == 4
    result = ok(root, "receive", "numbers", "-n", "0", "--body", "--delimiter", "\\n")
    assert result.stdout == "1\n2\n\n3\n"
    assert_one_line_error(run(root, "send", "numbers", "x", "--lines"), "--lines", code=2)
    assert_one_line_error(run(root, "receive", "numbers", "--delimiter", ","), "--delimiter", code=2)


def test_json_lines_carry_destination_state_size_and_base64(root: Path) -> None:
    ok(root, "init", "q")
    with Connection(root) as conn:
        producer = conn.create_session().create_producer(Queue("q"))
        producer.send(Queue("q"), b"\xff\x00raw")
        producer.send(Queue("q"), "text")
    first, second = [json.loads(x) for x in ok(root, "receive", "q", "-n", "0", "--json").stdout.splitlines()]
    assert (first["destination"], first["state"], first["size"]) == ("queue://q", "processing", 5)
    assert first["body_base64"] == "/wByYXc=" and "text" not in first and "body_hex" not in first
    assert second["text"] == "text" and second["size"] == 4 and "body_base64" not in second


def test_stat_filters_by_destination_one_json_shape_full_width(root: Path) -> None:
    name = "a-rather-long-queue-name-for-the-table"
    ok(root, "init", name, "other")
    plain = json.loads(ok(root, "stat", name, "--json").stdout)
    watched = json.loads(ok(root, "stat", name, "--json", "--watch", "--times", "1").stdout.splitlines()[0])
    assert set(plain) == set(watched) == {"time", "destinations"}
    assert list(plain["destinations"]) == [name] and plain["destinations"][name]["target"] == 0
    table = ok(root, "stat").stdout  # piped (not a terminal): nothing cut
    assert name in table and "processing" in table and "…" not in table
    assert_one_line_error(run(root, "stat", "othr"), "did you mean 'other'", code=2)


def test_prometheus_counters_survive_pruning(root: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    ok(root, "init", "q")
    for i in range(3):
        ok(root, "send", "q", f"m{i}")
    ok(root, "receive", "q", "-n", "0")
    ok(root, "prune", "--older-than", "0")

    def samples() -> dict[str, float]:
        text = ok(root, "stat", "--format", "prometheus").stdout
        return {(f.name, s.labels.get("state")): s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.labels["destination"] == "q"}

    got = samples()
    assert got[("dropboxmq_messages", "processed")] == 0  # pruned
    assert got[("dropboxmq_messages_acknowledged", None)] == 3  # the counter did not go down
    assert got[("dropboxmq_messages_sent", None)] == 3
    ok(root, "send", "q", "m3")
    ok(root, "purge", "q", "--yes")
    assert samples()[("dropboxmq_messages_sent", None)] == 4


def test_prune_tallies_from_concurrent_processes_add_up(root: Path) -> None:
    from dropboxmq.operations import record_removed, removed_totals

    def tally() -> None:
        for _ in range(200):
            record_removed(root, "q", {"processed": 1})

    threads = [threading.Thread(target=tally) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert removed_totals(root) == {"q": {"processed": 800}}


def test_purge_without_a_terminal_asks_for_yes_and_recover_speaks_plainly(root: Path) -> None:
    ok(root, "init", "q")
    ok(root, "send", "q", "keep")
    assert_one_line_error(run(root, "purge", "q", input=""), "--yes", code=2)
    assert counts(root, "q")["target"] == 1
    assert ok(root, "recover").stdout.startswith("recovered: ")
    assert json.loads(ok(root, "recover", "--json").stdout)["errors"] == []


@pytest.mark.skipif("spec" not in main.list_commands(click.Context(main)), reason="spec tooling not installed")
def test_spec_check_rejects_a_filter_matching_nothing_and_bad_numbers() -> None:
    assert_one_line_error(run(None, "spec", "check", "--only", "nosuch"), "nosuch", "matches no model", code=2)
    assert_one_line_error(run(None, "spec", "check", "--workers", "abc"), "--workers", code=2)
    assert_one_line_error(run(None, "spec", "check", "--jobs", "0"), "--jobs", code=2)


def test_settings_max_deliveries_in_the_library(root: Path) -> None:
    with Connection(root, settings=Settings(max_delivery_attempts=1, redelivery_delay=0), create=True) as conn:
        session = conn.create_session(ack_mode=2)
        session.create_producer().send(Queue("q"), TextMessage("x"))
        consumer = session.create_consumer(Queue("q"))
        assert consumer.receive(1) is not None
        session.recover()
        assert consumer.receive(0.2) is None
    assert counts(root, "q")["error"] == 1
