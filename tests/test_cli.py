"""The ``dropboxmq`` command line: every verb, its help, and one-line errors for user mistakes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dropboxmq import clients, codec
from dropboxmq.cli import main

from conftest import counts, ls

STATES = ("working", "target", "processing", "processed", "expired", "error")
VERBS = ["init", "send", "receive", "browse", "stat", "recover", "purge", "demo"]
if "spec" in main.list_commands(click.Context(main)):  # an entry point of the spec tooling
    VERBS.append("spec")

DMQ = shutil.which("dropboxmq", path=os.path.dirname(sys.executable)) or shutil.which("dropboxmq")


def run(root: Path | None, *args: str, input: str | bytes | None = None, env: dict | None = None):
    """Invoke the CLI in-process; ``root`` None means: no --root option."""
    argv = (["--root", str(root)] if root is not None else []) + list(args)
    env = {"DROPBOXMQ_ROOT": None, **(env or {})}  # never inherit the caller's root
    return CliRunner().invoke(main, argv, input=input, env=env, catch_exceptions=False)


def ok(root: Path | None, *args: str, **kw):
    result = run(root, *args, **kw)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def assert_one_line_error(result, *fragments: str, code: int | None = None) -> None:
    """A user mistake: non-zero exit, exactly one line on stderr, no traceback."""
    assert result.exit_code != 0, result.stdout
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), (fragment, lines[0])


def receive_json(root: Path, queue: str, *args: str) -> list[dict]:
    result = ok(root, "receive", queue, "--json", *args)
    return [json.loads(line) for line in result.stdout.splitlines()]


def browse_json(root: Path, queue: str, *args: str) -> list[dict]:
    result = ok(root, "browse", queue, "--json", *args)
    return [json.loads(line) for line in result.stdout.splitlines()]


# ---------------------------------------------------------------- help


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_useful_help(verb: str) -> None:
    result = ok(None, verb, "--help")
    assert result.stdout.startswith(f"Usage: main {verb}") or f" {verb} " in result.stdout.splitlines()[0]
    summary = result.stdout.split("\n\n")[1].strip()
    assert len(summary) > 25, summary  # a sentence, not a word
    assert "-h, --help" in result.stdout
    # every option is explained
    for param in main.get_command(click.Context(main), verb).params if verb != "spec" else ():  # spec: owned by the spec tooling
        if isinstance(param, click.Option):
            assert param.help, f"{verb} {param.opts}: no help text"


def test_top_level_help_lists_every_verb_and_the_root() -> None:
    result = ok(None, "--help")
    for verb in VERBS:
        assert f"  {verb} " in result.stdout
    assert "--root" in result.stdout and "DROPBOXMQ_ROOT" in result.stdout
    assert ok(None, "-h").stdout == result.stdout


def test_version() -> None:
    from dropboxmq import __version__

    assert __version__ in ok(None, "--version").stdout


# ---------------------------------------------------------------- the root: --root, $DROPBOXMQ_ROOT, ./var/dropbox


def test_init_creates_the_six_state_dirs(tmp_path: Path) -> None:
    root = tmp_path / "r"
    result = ok(root, "init", "orders", "invoices")
    for q in ("orders", "invoices"):
        assert sorted(os.listdir(root / q / "incoming")) == sorted(STATES)
        assert str(root / q / "incoming") in result.stdout
    assert (root / "dropboxmq").is_dir()
    ok(root, "init", "orders")  # idempotent


def test_root_from_environment(tmp_path: Path) -> None:
    root = tmp_path / "env-root"
    ok(None, "init", "q", env={"DROPBOXMQ_ROOT": str(root)})
    assert (root / "q" / "incoming" / "target").is_dir()
    ok(None, "send", "q", "--create", "via env", env={"DROPBOXMQ_ROOT": str(root)})
    assert counts(root, "q")["target"] == 1
    # --root wins over the environment
    other = tmp_path / "other"
    ok(other, "init", "q", env={"DROPBOXMQ_ROOT": str(root)})
    assert (other / "q" / "incoming").is_dir()


def test_default_root_is_var_dropbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ok(None, "init", "q")
    assert (tmp_path / "var" / "dropbox" / "q" / "incoming" / "working").is_dir()
    ok(None, "send", "q", "--create", "hi")
    assert [m["text"] for m in receive_json(None, "q")] == ["hi"]  # type: ignore[arg-type]


# ---------------------------------------------------------------- send / receive


def test_send_every_header_and_typed_property_round_trips(tmp_path: Path) -> None:
    root = tmp_path / "r"
    result = ok(root, "send", "q", "--create", "héllo wörld", "--priority", "7", "--ttl", "3600",
                "--correlation-id", "corr-42", "--type", "OrderPlaced", "--reply-to", "replies",
                "--property", "n=12:int", "--property", "big=9000000000:long", "--property", "b=-3:byte",
                "--property", "s=7:short", "--property", "flag=true:boolean", "--property", "off=False:boolean",
                "--property", "ratio=0.5:float", "--property", "d=2.25:double", "--property", "region=eu",
                "--property", "url=http://x.org/a?b=c", "--property", "txt=1:string")
    [mid] = result.stdout.split()
    assert mid.startswith("ID:")
    [m] = receive_json(root, "q")
    assert m["id"] == mid
    assert m["text"] == "héllo wörld"
    assert m["class"] == "T"
    assert m["priority"] == 7
    assert m["expiration"] == m["timestamp"] + 3_600_000
    assert m["correlation_id"] == "corr-42"
    assert m["type"] == "OrderPlaced"
    assert m["reply_to"] == "queue://replies"
    assert m["delivery_mode"] == "PERSISTENT"
    assert m["redelivered"] is False and m["delivery_count"] == 1
    props = dict(m["properties"])
    assert props.pop("JMSXDeliveryCount") == 1
    assert props == {"n": 12, "big": 9_000_000_000, "b": -3, "s": 7, "flag": True, "off": False,
                     "ratio": 0.5, "d": 2.25, "region": "eu", "url": "http://x.org/a?b=c", "txt": "1"}
    assert counts(root, "q") == {"working": 0, "target": 0, "processing": 0, "processed": 1,
                                 "expired": 0, "error": 0}


def test_send_defaults(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "plain")
    [m] = receive_json(root, "q")
    assert (m["priority"], m["expiration"], m["correlation_id"], m["reply_to"], m["type"]) == (4, 0, None, None, None)
    assert m["delivery_mode"] == "PERSISTENT"


def test_send_non_persistent(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "fast", "--non-persistent")
    [m] = receive_json(root, "q")
    assert m["delivery_mode"] == "NON_PERSISTENT"
    assert m["text"] == "fast"
    assert "JMS_DropboxMQ_DeliveryMode" not in m["properties"]


def test_send_body_from_file_and_stdin(tmp_path: Path) -> None:
    root = tmp_path / "r"
    body = tmp_path / "body.txt"
    body.write_text("from a file\nline two\n", encoding="utf-8")
    ok(root, "send", "q", "--create", "--file", str(body), "--text")
    ok(root, "send", "q", "--create", input="from stdin")
    ok(root, "send", "q", "--create", "--file", "-", "--text", input="from stdin via -")
    ok(root, "send", "q", "--create", "--file", str(body))  # a file is bytes unless --text
    *texts, last = receive_json(root, "q", "-n", "0")
    assert [m["text"] for m in texts] == ["from a file\nline two\n", "from stdin", "from stdin via -"]
    assert [m["class"] for m in texts] == ["T", "T", "T"]
    assert last["class"] == "B" and base64.b64decode(last["body_base64"]) == body.read_bytes()


def test_send_bytes(tmp_path: Path) -> None:
    root = tmp_path / "r"
    raw = bytes(range(256))
    (tmp_path / "blob").write_bytes(raw)
    ok(root, "send", "q", "--create", "--bytes", "--file", str(tmp_path / "blob"))
    ok(root, "send", "q", "--create", "--bytes", input=b"\xff\x00\xfe")
    first, second = receive_json(root, "q", "-n", "2")
    assert first["class"] == "B" and base64.b64decode(first["body_base64"]) == raw
    assert base64.b64decode(second["body_base64"]) == b"\xff\x00\xfe"
    assert "text" not in first


def test_send_count_and_priority_order(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ids_low = ok(root, "send", "q", "--create", "low", "--count", "3", "--priority", "1").stdout.split()
    ids_high = ok(root, "send", "q", "--create", "high", "-n", "2", "-p", "9").stdout.split()
    assert len(ids_low) == 3 and len(ids_high) == 2 and len(set(ids_low + ids_high)) == 5
    got = receive_json(root, "q", "-n", "0")
    assert [m["id"] for m in got] == ids_high + ids_low  # priority first, then send order


def test_send_transacted(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ids = ok(root, "send", "q", "--create", "tx", "--count", "5", "--transacted").stdout.split()
    assert len(ids) == 5
    assert counts(root, "q")["target"] == 5 and counts(root, "q")["working"] == 0
    assert [m["id"] for m in receive_json(root, "q", "-n", "0")] == ids


def test_send_many_shows_a_summary(tmp_path: Path) -> None:
    root = tmp_path / "r"
    result = ok(root, "send", "q", "--create", "x", "--count", "1000", "--non-persistent")
    assert "sent 1000 messages to q" in result.stdout
    assert counts(root, "q")["target"] == 1000


def test_receive_empty_queue_exits_3(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    result = run(root, "receive", "q")
    assert result.exit_code == 3
    assert "no message in q" in result.stderr
    result = run(root, "receive", "q", "--json")
    assert result.exit_code == 3 and result.stdout == ""
    ok(root, "send", "q", "--create", "one")
    ok(root, "receive", "q")
    assert run(root, "receive", "q", "--timeout", "0.05").exit_code == 3


def test_receive_count_zero_drains(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "m", "-n", "4")
    result = ok(root, "receive", "q", "-n", "0")
    assert len(result.stdout.splitlines()) == 4
    assert counts(root, "q")["processed"] == 4
    assert ok(root, "receive", "q", "-n", "0").stdout == ""  # already drained: still success


def test_receive_plain_output_is_never_markup(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "[/red] [bold]not markup[/bold] " + "word " * 40)
    browsed = ok(root, "browse", "q").stdout
    received = ok(root, "receive", "q").stdout
    for out in (browsed, received):
        assert "[/red] [bold]not markup[/bold]" in out
        assert len(out.strip().splitlines()) == 1  # not wrapped


def test_receive_with_selector(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "eu", "--property", "region=eu", "--property", "n=1:int")
    ok(root, "send", "q", "--create", "us", "--property", "region=us", "--property", "n=2:int")
    ok(root, "send", "q", "--create", "eu-urgent", "--property", "region=eu", "--property", "n=3:int", "-p", "8")
    got = receive_json(root, "q", "-n", "0", "--selector", "region = 'eu' AND n >= 1")
    assert [m["text"] for m in got] == ["eu-urgent", "eu"]
    assert run(root, "receive", "q", "--selector", "region = 'eu'").exit_code == 3
    assert [m["text"] for m in receive_json(root, "q", "--selector", "JMSPriority = 4")] == ["us"]


def test_receive_client_ack_mode(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "a")
    ok(root, "send", "q", "--create", "b")
    got = receive_json(root, "q", "-n", "2", "--ack-mode", "client")
    assert [m["text"] for m in got] == ["a", "b"]
    assert counts(root, "q")["processed"] == 2 and counts(root, "q")["processing"] == 0


@pytest.mark.parametrize("mode", ["transacted", "dups-ok"])
def test_receive_other_ack_modes(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "x", "-n", "3")
    assert len(receive_json(root, "q", "-n", "0", "--ack-mode", mode)) == 3
    c = counts(root, "q")
    assert (c["processed"], c["processing"], c["target"]) == (3, 0, 0)


def test_expired_messages_are_not_received(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "short-lived", "--ttl", "0.001")
    ok(root, "send", "q", "--create", "lasting")
    import time

    time.sleep(0.01)
    assert [m["text"] for m in browse_json(root, "q")] == ["lasting"]
    assert [m["text"] for m in receive_json(root, "q", "-n", "0")] == ["lasting"]


# ---------------------------------------------------------------- browse, stat, recover, purge


def test_browse_moves_nothing_and_shows_delivery_order(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "p1-first", "-p", "1")
    ok(root, "send", "q", "--create", "p5", "-p", "5")
    ok(root, "send", "q", "--create", "p1-second", "-p", "1")
    ok(root, "send", "q", "--create", "p9", "-p", "9")
    before = ls(root, "q", "target")
    got = browse_json(root, "q")
    assert [m["text"] for m in got] == ["p9", "p5", "p1-first", "p1-second"]
    assert [m["priority"] for m in got] == [9, 5, 1, 1]
    assert ls(root, "q", "target") == before
    assert counts(root, "q")["processing"] == counts(root, "q")["processed"] == 0
    plain = ok(root, "browse", "q").stdout.splitlines()
    assert [line.split(": ", 1)[1] for line in plain] == ["p9", "p5", "p1-first", "p1-second"]
    assert len(browse_json(root, "q", "--limit", "2")) == 2
    assert [m["text"] for m in browse_json(root, "q", "--selector", "JMSPriority < 5")] == ["p1-first", "p1-second"]
    # and receive agrees with browse
    assert [m["text"] for m in receive_json(root, "q", "-n", "0")] == ["p9", "p5", "p1-first", "p1-second"]


def test_stat_table_and_json(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "empty")
    ok(root, "send", "busy", "--create", "x", "-n", "3")
    ok(root, "receive", "busy")
    stats = json.loads(ok(root, "stat", "--json").stdout)["destinations"]
    assert stats["busy"]["oldest_age_seconds"] >= 0
    assert stats == {
        "busy": {"working": 0, "target": 2, "processing": 0, "processed": 1, "expired": 0, "error": 0,
                 "oldest_age_seconds": stats["busy"]["oldest_age_seconds"]},
        "empty": {**{s: 0 for s in STATES}, "oldest_age_seconds": None},
    }
    table = ok(root, "stat").stdout
    for word in ("busy", "empty", *STATES):
        assert word in table
    busy_row = next(line for line in table.splitlines() if "busy" in line)
    assert [int(t) for t in busy_row.replace("│", " ").split()[1:7]] == [0, 2, 0, 1, 0, 0]


def test_recover_prints_a_json_report(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "x")
    # a message claimed by a client that never registered here (a 1.2 or script consumer)
    target = root / "q" / "incoming" / "target"
    [name] = os.listdir(target)
    os.rename(target / name, root / "q" / "incoming" / "processing" / name)
    report = json.loads(ok(root, "recover", "--json").stdout)
    for key in ("transactions", "redelivered", "orphans_quarantined", "orphans_discarded", "expired", "errors"):
        assert key in report
    assert report["errors"] == []
    report = json.loads(ok(root, "recover", "--json", "--assume-unknown-dead").stdout)
    assert report["redelivered"] == 1
    assert counts(root, "q")["target"] == 1


@pytest.mark.parametrize("before, after", [("", 1), (".....JMSXDeliveryCountI=1", 1)])
def test_recover_stamps_the_count_on_a_foreign_claim(tmp_path: Path, before: str, after: int) -> None:
    # 1.2 claims target/<name> -> processing/<client>~<name> unchanged (count written at ack):
    # returned without a new count, the next delivery would say JMSRedelivered=false
    root = tmp_path / "r"
    ok(root, "init", "q")
    box = root / "q" / "incoming"
    name = "4.1795374855431000-0224311695.T" + before
    (box / "processing" / f"1795374856322000-0244942240~{name}").write_bytes(b"x")
    report = json.loads(ok(root, "recover", "--json", "--assume-unknown-dead").stdout)
    assert report["redelivered"] == 1
    [back] = os.listdir(box / "target")
    msg = codec.from_wire(back)
    assert (msg.redelivered, msg.delivery_count) == (True, after + 1)


def test_recover_keeps_the_count_our_claim_stamped(tmp_path: Path) -> None:
    # a client of ours (or the shell consumer) that died holding a message: its claim stamped 1
    root = tmp_path / "r"
    ok(root, "init", "q")
    reg = clients.registration_path(root, "dead-1")
    reg.parent.mkdir(parents=True, exist_ok=True)
    reg.write_bytes(b"")  # registered, lock free: dead
    box = root / "q" / "incoming"
    claimed = "dead-1~" + codec.with_delivery_count("4.1795374855431000-0224311695.T", 1)
    (box / "processing" / claimed).write_bytes(b"x")
    report = json.loads(ok(root, "recover", "--json").stdout)
    assert report["redelivered"] == 1
    [back] = os.listdir(box / "target")
    assert codec.from_wire(back).delivery_count == 2


def test_recover_quarantines_orphans(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "init", "q")
    orphan = root / "q" / "incoming" / "working" / "ID:1000000000000000-0000000001"
    orphan.write_bytes(b"half")
    os.utime(orphan, (1, 1))
    report = json.loads(ok(root, "recover", "--json", "--orphan-age", "1").stdout)
    assert report["orphans_quarantined"] == 1
    assert counts(root, "q")["error"] == 1


def test_purge(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "x", "-n", "3")
    ok(root, "receive", "q")
    result = run(root, "purge", "q", input="n\n")
    assert result.exit_code != 0 and counts(root, "q")["target"] == 2  # declined: nothing deleted
    assert "purged 2" in ok(root, "purge", "q", "--yes").stdout
    assert counts(root, "q")["target"] == 0 and counts(root, "q")["processed"] == 1
    assert "purged 1" in ok(root, "purge", "q", "-y", "--state", "processed").stdout
    assert counts(root, "q") == {s: 0 for s in STATES}
    ok(root, "send", "q", "--create", "y")
    assert "purged 1" in ok(root, "purge", "q", input="y\n").stdout


# ---------------------------------------------------------------- user mistakes: one line, no traceback


@pytest.mark.parametrize("name", ["a/b", "..", ".x", "dropboxmq", "a\x00b"])
@pytest.mark.parametrize("verb", ["send", "receive", "browse", "init", "purge"])
def test_invalid_queue_names(tmp_path: Path, verb: str, name: str) -> None:
    root = tmp_path / "r"
    ok(root, "init")
    args = {"send": ["send", name, "body"], "purge": ["purge", name, "--yes"]}.get(verb, [verb, name])
    result = run(root, *args)
    assert_one_line_error(result, "queue name")
    assert sorted(os.listdir(root)) == ["dropboxmq"]  # nothing created anywhere


def test_invalid_reply_to(tmp_path: Path) -> None:
    assert_one_line_error(run(tmp_path / "r", "send", "q", "--create", "x", "--reply-to", "../etc"), "queue name")


@pytest.mark.parametrize("prop,fragment", [
    ("novalue", "NAME=VALUE"),
    ("=3:int", "NAME=VALUE"),
    ("n=abc:int", "--property"),
    ("n=300:byte", "byte"),
    ("n=99999999999:int", "int"),
    ("flag=yes:boolean", "true or false"),
    ("x=nope:double", "--property"),
])
def test_bad_property(tmp_path: Path, prop: str, fragment: str) -> None:
    result = run(tmp_path / "r", "send", "q", "--create", "x", "--property", prop)
    assert_one_line_error(result, fragment, code=2)


def test_priority_out_of_range(tmp_path: Path) -> None:
    assert_one_line_error(run(tmp_path / "r", "send", "q", "--create", "x", "--priority", "12"), "priority", code=2)
    assert_one_line_error(run(tmp_path / "r", "send", "q", "--create", "x", "--ttl", "-1"), "ttl", code=2)


def test_missing_root(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    for args in (["purge", "q", "--yes"], ["stat"], ["browse", "q"], ["recover"]):
        assert_one_line_error(run(missing, *args), "no dropbox root", str(missing))
    assert not missing.exists()
    ok(tmp_path / "r", "init")
    assert_one_line_error(run(tmp_path / "r", "purge", "q", "--yes"), "no queue 'q'")


def test_body_not_utf8_with_text(tmp_path: Path) -> None:
    root = tmp_path / "r"
    assert_one_line_error(run(root, "send", "q", "--create", "--text", input=b"\xff\xfe bad"), "utf-8", "--text")
    (tmp_path / "bin").write_bytes(b"ok" * 100_000 + b"\x80")
    assert_one_line_error(run(root, "send", "q", "--create", "--text", "--file", str(tmp_path / "bin")),
                          "utf-8", "byte 200000")
    assert counts(root, "q")["target"] == 0
    ok(root, "send", "q", "--create", input=b"\xff\xfe raw")  # not UTF-8 and no --text: a BytesMessage
    [m] = receive_json(root, "q")
    assert m["class"] == "B" and base64.b64decode(m["body_base64"]) == b"\xff\xfe raw"


def test_body_and_file_together(tmp_path: Path) -> None:
    (tmp_path / "b").write_text("x")
    assert_one_line_error(run(tmp_path / "r", "send", "q", "--create", "body", "--file", str(tmp_path / "b")), "not both")


def test_selector_syntax_error(tmp_path: Path) -> None:
    root = tmp_path / "r"
    ok(root, "send", "q", "--create", "x")
    for verb in ("receive", "browse"):
        result = run(root, verb, "q", "--selector", "region = = 'eu'")
        assert_one_line_error(result, "selector", code=1)
    assert counts(root, "q")["target"] == 1


def test_name_over_255_bytes(tmp_path: Path) -> None:
    root = tmp_path / "r"
    result = run(root, "send", "q", "--create", "x", "--correlation-id", "c" * 300)
    assert_one_line_error(result, "255")
    assert counts(root, "q") == {s: 0 for s in STATES}


def test_unknown_verb_and_missing_argument(tmp_path: Path) -> None:
    assert_one_line_error(run(tmp_path, "nosuch"), "nosuch", code=2)
    assert_one_line_error(run(tmp_path, "receive"), "QUEUE", code=2)


def test_root_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    assert_one_line_error(run(f, "init", "q"), str(f), code=2)


# ---------------------------------------------------------------- demo, and the real entry point


@pytest.mark.slow
def test_demo_small(tmp_path: Path) -> None:
    result = ok(tmp_path / "r", "demo", "--messages", "200", "--producers", "2", "--consumers", "2")
    assert "exactly once" in result.stdout
    assert counts(tmp_path / "r", "demo")["processed"] == 200


def _real(*args: str, root: Path, input: bytes | None = None, env_root: bool = False) -> subprocess.CompletedProcess:
    assert DMQ, "the dropboxmq entry point is not installed"
    env = {k: v for k, v in os.environ.items() if k != "DROPBOXMQ_ROOT"}
    argv = [DMQ, *args]
    if env_root:
        env["DROPBOXMQ_ROOT"] = str(root)
    else:
        argv[1:1] = ["--root", str(root)]
    return subprocess.run(argv, input=input, capture_output=True, env=env, timeout=60)


def test_installed_entry_point_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "r"
    sent = _real("send", "q", "--create", "--property", "k=v", "-p", "6", root=root, input=b"through a pipe")
    assert sent.returncode == 0, sent.stderr
    got = _real("receive", "q", "--json", root=root, env_root=True)
    assert got.returncode == 0, got.stderr
    m = json.loads(got.stdout)
    assert (m["text"], m["priority"], m["properties"]["k"]) == ("through a pipe", 6, "v")
    empty = _real("receive", "q", root=root)
    assert empty.returncode == 3


def test_installed_entry_point_errors_are_one_line(tmp_path: Path) -> None:
    for args in (["send", "a/b", "x"], ["send", "q", "--create", "x", "--priority", "12"],
                 ["receive", "q", "--selector", "a = = 1"], ["--root", str(tmp_path / "none"), "stat"]):
        result = _real(*args, root=tmp_path / "r")
        err = result.stderr.decode()
        assert result.returncode != 0
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
        assert b"Traceback" not in result.stderr


def test_installed_entry_point_closed_pipe_is_quiet(tmp_path: Path) -> None:
    root = tmp_path / "r"
    assert _real("send", "q", "--create", "x" * 1000, "-n", "200", "--non-persistent", root=root).returncode == 0
    proc = subprocess.Popen([DMQ, "--root", str(root), "browse", "q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=30)
    assert b"Traceback" not in err
    assert counts(root, "q")["target"] == 200
