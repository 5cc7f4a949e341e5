"""The topic verbs of the CLI: publish, subscribe, unsubscribe, distribute, and stat's view of them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_cli import assert_one_line_error, ok, run


def subscribe_json(root: Path, topic: str, *args: str) -> list[dict]:
    result = ok(root, "subscribe", topic, "--json", *args)
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("verb", ["publish", "subscribe", "unsubscribe", "distribute"])
def test_topic_verbs_have_help(verb):
    result = ok(None, verb, "--help")
    assert "Usage:" in result.stdout and len(result.stdout.splitlines()) > 5


def test_durable_subscription_keeps_messages_published_while_away(tmp_path):
    root = tmp_path / "r"
    ok(root, "init")
    assert run(root, "subscribe", "news", "--durable", "s", "--client-id", "c", "-n", "0").exit_code == 0
    ok(root, "publish", "news.sport", "goal", "--property", "n=1:int")
    ok(root, "publish", "news", "weather")
    got = subscribe_json(root, "news", "--durable", "s", "--client-id", "c", "-n", "0")
    assert [m["text"] for m in got] == ["goal", "weather"]
    assert got[0]["properties"]["n"] == 1


def test_subscribe_selector_filters_at_publish_time(tmp_path):
    root = tmp_path / "r"
    ok(root, "init")  # subscribing needs an existing root
    ok(root, "subscribe", "t", "--shared", "--durable", "w", "--selector", "team = 'red'", "-n", "0")
    for team in ("red", "blue", "red"):
        ok(root, "publish", "t", team, "--property", f"team={team}")
    stat = json.loads(ok(root, "stat", "--json").stdout)
    (name,) = [k for k in stat["destinations"] if k.startswith("topic:t!")]
    assert stat["destinations"][name]["target"] == 2  # blue was never written into the subscription
    got = subscribe_json(root, "t", "--shared", "--durable", "w", "--selector", "team = 'red'", "-n", "0")
    assert [m["text"] for m in got] == ["red", "red"]


def test_unsubscribe_removes_subscription_and_unknown_name_is_one_line_error(tmp_path):
    root = tmp_path / "r"
    ok(root, "init")  # subscribing needs an existing root
    ok(root, "subscribe", "t", "--durable", "s", "--client-id", "c", "-n", "0")
    ok(root, "publish", "t", "pending")
    ok(root, "unsubscribe", "s", "--client-id", "c")
    assert not any(k.startswith("topic:t!") for k in json.loads(ok(root, "stat", "--json").stdout)["destinations"])
    assert_one_line_error(run(root, "unsubscribe", "s", "--client-id", "c"), "no durable subscription", code=1)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--durable", "s"], "needs --client-id"),
        (["--shared"], "--shared needs"),
        (["--name", "x"], "add --shared"),
        (["--shared", "--name", "x", "--no-local"], "no --no-local"),
        (["--selector", "a = "], "selector"),
    ],
)
def test_subscribe_mistakes_are_one_line_errors(tmp_path, args, fragment):
    assert_one_line_error(run(tmp_path / "r", "subscribe", "t", *args), fragment)


def test_publish_bad_topic_name_is_one_line_error(tmp_path):
    assert_one_line_error(run(tmp_path / "r", "publish", "a..b", "x"), "..")


def test_distribute_fans_out_foreign_drops(tmp_path):
    root = tmp_path / "r"
    ok(root, "init")  # subscribing needs an existing root
    ok(root, "subscribe", "t", "--durable", "s", "--client-id", "c", "-n", "0")
    incoming = root / "topic-root" / "t" / ".incoming"
    for d in ("working", "target", "processing", "processed", "expired", "error"):
        (incoming / d).mkdir(parents=True)
    (incoming / "working" / "4.1140429201295000-9262574723.T").write_text("dropped by a script")
    os.rename(incoming / "working" / "4.1140429201295000-9262574723.T",
              incoming / "target" / "4.1140429201295000-9262574723.T")
    result = ok(root, "distribute")
    assert "distributed 1 file(s)" in result.stdout
    got = subscribe_json(root, "t", "--durable", "s", "--client-id", "c", "-n", "0")
    assert [m["text"] for m in got] == ["dropped by a script"]
    assert "distributed 0 file(s)" in ok(root, "distribute").stdout
