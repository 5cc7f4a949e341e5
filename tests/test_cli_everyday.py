"""The everyday shell tasks (issue 17): handlers that ack only on success, raw and large
bodies, typos that create nothing, options in any place, progress only for people."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pty
import subprocess
import time
import sys
from pathlib import Path

import pytest

from conftest import counts
from test_cli import DMQ, assert_one_line_error, ok, run

pytestmark = pytest.mark.skipif(DMQ is None, reason="the dropboxmq script is not installed")


def shell(script: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a POSIX shell script with the installed dropboxmq first on PATH, as a user would."""
    path = os.path.dirname(DMQ) + os.pathsep + os.environ["PATH"]
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120, cwd=root.parent,
                          env={**os.environ, "PATH": path, "DROPBOXMQ_ROOT": str(root), **env})


# ---------------------------------------------------------------- --exec: ack only after the handler succeeded


HANDLER = r'''
if [ ! -e "$MARK" ]; then : > "$MARK"; echo "busy, try later" >&2; exit 7; fi
{ printf '%s %s %s %s ' "$JMSMessageID" "$JMSXDeliveryCount" "$JMSRedelivered" "$DROPBOXMQ_PROP_region"
  cat; echo; } >> "$OUT"
'''


def test_exec_handler_that_fails_once_succeeds_on_redelivery(tmp_path: Path) -> None:
    root, out, mark = tmp_path / "r", tmp_path / "handled", tmp_path / "failed-once"
    (tmp_path / "handle").write_text(HANDLER)
    result = shell('''
        set -e
        dropboxmq init jobs
        dropboxmq send jobs 'job one' --property region=eu > /dev/null
        while dropboxmq receive jobs --exec "sh handle" --redelivery-delay 0.05 --timeout 0.2; do :; done
        ''', root, OUT=str(out), MARK=str(mark))
    # the loop ends when `receive` finds the queue empty (exit 3), not on a handler failure
    assert "busy, try later" in result.stderr and "status 7" in result.stderr, result.stderr
    assert "no message in jobs" in result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines  # handled exactly once, on the second delivery
    message_id, delivery_count, redelivered, region, body = lines[0].split(" ", 4)
    assert message_id.startswith("ID:")
    assert (delivery_count, redelivered, region, body) == ("2", "true", "eu", "job one")
    c = counts(root, "jobs")
    assert (c["processed"], c["target"], c["processing"], c["error"]) == (1, 0, 0, 0)


def test_exec_handler_that_always_fails_backs_off_then_dead_letters(tmp_path: Path) -> None:
    root, log = tmp_path / "r", tmp_path / "attempts"
    ok(root, "init", "q")
    ok(root, "send", "q", "poison")
    result = shell('dropboxmq receive q -n 0 --redelivery-delay 0.002 '
                   '--exec "date +%s.%N >> $LOG; cat > /dev/null; exit 1"', root, LOG=str(log))
    assert result.returncode == 1, result.stderr
    assert "dead-lettered to error/" in result.stderr.splitlines()[-1]
    times = [float(t) for t in log.read_text().split()]
    assert len(times) == 10  # max_delivery_attempts, then error/
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the k-th redelivery waits at least 0.002 * 2**(k-1) s: 9 gaps, >= 1.022 s in all
    assert sum(gaps) >= 0.002 * (2 ** 9 - 1) - 0.01  # (a millisecond clock: each gap may be ~1 ms short)
    assert gaps[-1] >= 0.002 * 2 ** 8 - 0.002
    assert counts(root, "q")["error"] == 1


# ---------------------------------------------------------------- raw bodies: --body, --output-dir, send --file


def _peak_rss_kb(argv: list[str], stdout) -> int:
    """Run argv in a fresh process; the largest resident set of its children (just argv)."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=300, check=True)
    peak, status = done.stderr.split()[-2:]
    assert status == "0", done.stderr
    return int(peak)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.slow
def test_100_mb_binary_round_trip_is_streamed(tmp_path: Path) -> None:
    root, blob, back = tmp_path / "r", tmp_path / "blob.bin", tmp_path / "back.bin"
    size = 100 * 1024 * 1024
    with open(blob, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1024 * 1024))
    ok(root, "init", "big")
    send_peak = _peak_rss_kb([DMQ, "--root", str(root), "send", "big", "--file", str(blob)], subprocess.DEVNULL)
    with open(back, "wb") as out:
        receive_peak = _peak_rss_kb([DMQ, "--root", str(root), "receive", "big", "--body"], out)
    assert _sha256(back) == _sha256(blob)
    # streamed: neither process ever holds the body (the interpreter alone is ~25 MB)
    assert send_peak * 1024 < size / 2, send_peak
    assert receive_peak * 1024 < size / 2, receive_peak
    assert counts(root, "big")["processed"] == 1


def test_body_writes_raw_bytes_and_text(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    raw = bytes(range(256)) * 3
    (tmp_path / "raw").write_bytes(raw)
    ok(root, "send", "q", "--file", str(tmp_path / "raw"))
    ok(root, "send", "q", "héllo")
    assert run(root, "receive", "q", "--body").stdout_bytes == raw
    assert run(root, "receive", "q", "--body").stdout_bytes == "héllo".encode()
    assert run(root, "receive", "q", "--body").exit_code == 3


def test_output_dir_one_file_per_message(tmp_path: Path) -> None:
    root, inbox = tmp_path / "r", tmp_path / "inbox"
    ok(root, "init", "uploads")
    ids = [ok(root, "send", "uploads", body).stdout.strip() for body in ("one", "two")]
    (tmp_path / "b").write_bytes(b"\x00\xff")
    ids.append(ok(root, "send", "uploads", "--file", str(tmp_path / "b")).stdout.strip())
    printed = ok(root, "receive", "uploads", "-n", "0", "--output-dir", str(inbox)).stdout.split()
    assert printed == [str(inbox / i.removeprefix("ID:")) for i in ids]
    assert sorted(os.listdir(inbox)) == sorted(i.removeprefix("ID:") for i in ids)  # no leftover dot-files
    assert [(inbox / i.removeprefix("ID:")).read_bytes() for i in ids] == [b"one", b"two", b"\x00\xff"]
    assert counts(root, "uploads")["processed"] == 3


def test_output_dir_failure_leaves_the_message_queued(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    ok(root, "send", "q", "keep me")
    (tmp_path / "file").write_text("")  # not a directory
    assert_one_line_error(run(root, "receive", "q", "--output-dir", str(tmp_path / "file" / "x")))
    assert counts(root, "q")["target"] == 1


def test_receive_output_options_do_not_combine(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    assert_one_line_error(run(root, "receive", "q", "--body", "--json"), "pick one", code=2)
    assert_one_line_error(run(root, "receive", "q", "--exec", "true", "--ack-mode", "client"), "--ack-mode", code=2)


# ---------------------------------------------------------------- typos create nothing


def test_unknown_queue_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "orders")
    for args in (["send", "ordrs", "x"], ["receive", "ordrs"], ["browse", "ordrs"], ["purge", "ordrs", "-y"]):
        assert_one_line_error(run(root, *args), "no queue 'ordrs'", "did you mean 'orders'", code=1)
    assert_one_line_error(run(root, "send", "zzz", "x"), "no queue 'zzz'", "--create")
    assert sorted(os.listdir(root)) == ["dropboxmq", "orders"]
    ok(root, "send", "ordrs", "x", "--create")  # asked for: created
    assert counts(root, "ordrs")["target"] == 1
    assert_one_line_error(run(tmp_path / "none", "send", "q", "x"), "no dropbox root")


# ---------------------------------------------------------------- options anywhere; bare dropboxmq


def test_global_options_after_the_verb(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(None, "init", "q", "--root", str(root))
    ok(None, "send", "q", "hi", f"--root={root}")
    got = ok(None, "receive", "q", "--json", "--root", str(root), "--quiet")
    assert json.loads(got.stdout)["text"] == "hi"
    ok(None, "send", "q", "--root", str(root), "--", "--root")  # after --, a body like any other
    assert run(root, "receive", "q", "--body").stdout == "--root"


def test_bare_dropboxmq_prints_help_and_succeeds() -> None:
    done = subprocess.run([DMQ], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("Usage: dropboxmq") and "receive" in done.stdout


# ---------------------------------------------------------------- progress and summary, for people only


def _on_terminal(args: list[str]) -> tuple[str, str]:
    """Run dropboxmq with standard output on a pseudo-terminal: (terminal text, stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([DMQ, *args], stdout=follower, stderr=subprocess.PIPE, text=True)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, stderr
    return seen.decode(), stderr


def test_summary_on_a_terminal_only(tmp_path: Path) -> None:
    root = str(tmp_path / "r")
    ok(tmp_path / "r", "init", "q")
    _, stderr = _on_terminal(["--root", root, "send", "q", "x", "-n", "5"])
    assert "sent 5 message(s) to q in" in stderr and "/s)" in stderr
    _, stderr = _on_terminal(["--root", root, "receive", "q", "-n", "0"])
    assert "received 5 message(s) q in" in stderr or "received 5 message(s)" in stderr
    _, stderr = _on_terminal(["--root", root, "send", "q", "x", "-n", "5", "--quiet"])
    assert stderr == ""
    piped = subprocess.run([DMQ, "--root", root, "send", "q", "x", "-n", "5"], capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stderr == ""


# ---------------------------------------------------------------- watching and feeding monitoring


def test_stat_prometheus_parses_with_the_prometheus_parser(tmp_path: Path) -> None:
    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client comes with the dev extra")
    root = tmp_path / "r"
    ok(root, "init", "idle", 'odd"name')
    ok(root, "send", "q", "x", "-n", "3", "--create")
    ok(root, "receive", "q")
    [waiting, _] = sorted((root / "q" / "incoming" / "target").iterdir())
    os.utime(waiting, (time.time() - 600, time.time() - 600))  # sent ten minutes ago
    text = ok(root, "stat", "--format", "prometheus").stdout
    samples = {(s.name, s.labels.get("destination"), s.labels.get("state")): s.value
               for family in parser.text_string_to_metric_families(text) for s in family.samples}
    assert samples[("dropboxmq_messages", "q", "target")] == 2
    assert samples[("dropboxmq_messages", "q", "processed")] == 1
    assert samples[("dropboxmq_messages", 'odd"name', "error")] == 0
    assert 600 <= samples[("dropboxmq_oldest_message_age_seconds", "q", None)] < 700
    assert samples[("dropboxmq_oldest_message_age_seconds", "idle", None)] == 0


def test_stat_watch_json_lines_and_growth(tmp_path: Path) -> None:
    from dropboxmq.cli import stat_growth

    root = tmp_path / "r"
    ok(root, "init", "q")
    lines = ok(root, "stat", "--watch", "--json", "--interval", "0.01", "--times", "3").stdout.splitlines()
    assert len(lines) == 3
    sample = json.loads(lines[-1])
    assert sample["destinations"]["q"]["error_growth"] == 0 and "time" in sample
    first = {"q": {"error": 2, "expired": 5}}
    assert stat_growth({"q": {"error": 7, "expired": 5}, "new": {"error": 1, "expired": 0}}, first) == \
        {"q": {"error_growth": 5, "expired_growth": 0}, "new": {"error_growth": 1, "expired_growth": 0}}


# ---------------------------------------------------------------- retention


def test_prune_by_age_and_state(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    ok(root, "send", "q", "x", "-n", "4")
    ok(root, "receive", "q", "-n", "2")
    (root / "q" / "incoming" / "error" / "dead").write_text("dead")
    assert "deleted 0 message(s)" in ok(root, "prune", "--older-than", "1h").stdout  # all fresh
    dry = ok(root, "prune", "q", "--older-than", "0s", "--dry-run").stdout
    assert "would delete 2 message(s)" in dry and counts(root, "q")["processed"] == 2
    assert "deleted 2 message(s)" in ok(root, "prune", "--older-than", "0").stdout
    c = counts(root, "q")
    assert (c["processed"], c["target"], c["error"]) == (0, 2, 1)  # waiting messages and error/ untouched
    assert "deleted 1 message(s)" in ok(root, "prune", "--older-than", "0", "--state", "error").stdout
    assert_one_line_error(run(root, "prune", "--older-than", "7x"), "not an age", code=2)
    assert_one_line_error(run(root, "prune", "--older-than", "7d", "--state", "target"), "--state", code=2)


def test_prune_uses_the_time_a_message_entered_its_state(tmp_path: Path) -> None:
    from dropboxmq.layout import queue_box
    from dropboxmq.retention import prune

    root = tmp_path / "r"
    ok(root, "init", "q")
    ok(root, "send", "q", "x", "-n", "2")
    ok(root, "receive", "q", "-n", "2")
    box = queue_box(root, dropboxmq_queue("q"))
    assert prune(box, ["processed"], 3600).matched == 0
    later = prune(box, ["processed"], 3600, now=time.time() + 2 * 3600)
    assert (later.matched, later.removed) == (2, 2) and counts(root, "q")["processed"] == 0


def dropboxmq_queue(name: str):
    from dropboxmq import Queue

    return Queue(name)


@pytest.mark.slow
def test_prune_beside_running_consumers_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    from dropboxmq import Connection, Queue

    with Connection(root, create=True) as conn:
        ids = {m.message_id for m in conn.create_session().create_producer(Queue("q")).send_many(
            [dropboxmq_text(i) for i in range(400)])}
    outputs = [tmp_path / f"consumer-{i}.jsonl" for i in range(2)]
    consumers = [subprocess.Popen([DMQ, "--root", str(root), "receive", "q", "-n", "0", "--json"],
                                  stdout=open(out, "w")) for out in outputs]
    try:
        while any(p.poll() is None for p in consumers):
            subprocess.run([DMQ, "--root", str(root), "prune", "--older-than", "0"], capture_output=True,
                           check=True, timeout=60)
    finally:
        for p in consumers:
            p.kill() if p.poll() is None else None
            p.wait()
    received = [json.loads(line)["id"] for out in outputs for line in out.read_text().splitlines()]
    assert sorted(received) == sorted(ids)  # each exactly once, none lost to the pruner
    c = counts(root, "q")
    assert c["target"] == c["processing"] == c["error"] == 0


def dropboxmq_text(i: int):
    from dropboxmq import TextMessage

    return TextMessage(f"m{i}")


def test_consumers_apply_a_retention_setting(tmp_path: Path) -> None:
    from dropboxmq import Connection, Queue, Settings

    with Connection(tmp_path, settings=Settings(retention=0, recovery_interval=0), create=True) as conn:
        session = conn.create_session()
        session.create_producer().send_many([dropboxmq_text(i) for i in range(3)], Queue("q"))
        consumer = session.create_consumer(Queue("q"))
        assert [consumer.receive_body(0) for _ in range(3)] == ["m0", "m1", "m2"]
        assert counts(tmp_path, "q")["processed"] >= 1
        assert consumer.receive(0) is None  # the consumer's housekeeping pass prunes processed/
    assert counts(tmp_path, "q")["processed"] == 0
    with Connection(tmp_path / "keep", create=True) as conn:  # the default keeps everything
        session = conn.create_session()
        session.create_producer().send(Queue("q"), "x")
        consumer = session.create_consumer(Queue("q"))
        consumer.receive(0)
        assert consumer.receive(0) is None
    assert counts(tmp_path / "keep", "q")["processed"] == 1
