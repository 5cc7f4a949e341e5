"""Celery on a dropbox (dropboxmq_kombu), with real ``celery worker`` processes started here.

The worker runs are dropboxmq_stress.celery_compare's, the harness whose figures the README
quotes (there also on kombu's filesystem:// transport): prefork pool, concurrency 2, late acks,
task_reject_on_worker_lost, prefetch multiplier 1, each on a fresh temporary root."""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path

import kombu
import pytest
from click.testing import CliRunner

import dropboxmq_kombu
from dropboxmq.cli import main
from dropboxmq.extras import missing
from dropboxmq_stress import celery_compare

pytestmark = pytest.mark.slow


def test_a_worker_killed_9_loses_nothing_and_repeats_only_what_it_held(tmp_path: Path) -> None:
    r = celery_compare.kill_run("dropboxmq", tmp_path, tasks=200, kill_after=60, work=0.05)
    assert r.notes == []
    assert r.done_before_kill >= 60 and r.running_at_kill  # killed mid-task (the harness waits for one)
    assert r.ran == 200 and r.lost == []
    # every task running at the kill was an unacknowledged claim; it, and only such, ran again
    assert set(r.running_at_kill) <= set(r.restarted) <= set(r.in_flight_at_kill)
    assert len(r.in_flight_at_kill) <= 2  # prefetch: concurrency 2 x worker_prefetch_multiplier 1
    assert set(r.duplicates) <= set(r.in_flight_at_kill)
    assert set(r.redelivered) == set(r.in_flight_at_kill)  # came back flagged, with their count
    assert r.acknowledged == 200  # one ack per message, none lost or doubled
    assert (r.left_waiting, r.left_in_flight, r.warm_exit) == (0, 0, 0)


def test_priority_9_overtakes_waiting_priority_0_and_countdown_waits_in_target(tmp_path: Path) -> None:
    r = celery_compare.priority_run("dropboxmq", tmp_path, low=20, high=5, countdown=3.0)
    # claimed in priority order; the prefork pool (concurrency 2) may start a priority-0 task on
    # its free process a moment before the last priority-9 one it holds: one place of slack
    assert r.high_positions[-1] <= 6 and r.high_positions[:4] == [1, 2, 3, 4], r.order
    assert r.countdown_delay is not None and r.countdown_delay >= 3.0
    # a delivery delay in its name: the ETA less the moments between Celery's clock read and the send
    assert r.countdown_held_ms is not None and 2000 <= r.countdown_held_ms <= 3001


def test_a_task_that_kills_its_pool_process_is_requeued_and_runs_again(tmp_path: Path) -> None:
    """task_reject_on_worker_lost: Celery rejects with requeue, the transport's redeliver move."""
    b = celery_compare.broker("dropboxmq", tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    celery_compare.send(b, [{"args": ["victim"], "task_id": "victim"}], task="die_once")
    worker = celery_compare.Worker(b, out, label="lost")
    try:
        celery_compare.wait_for(lambda: "victim" in celery_compare.runs(out, "done"), 60, "the rerun", worker)
        celery_compare.wait_for(lambda: len(b.acknowledged()) == 1, 30, "the ack", worker)
    finally:
        rc = worker.stop_warm()
    assert celery_compare.runs(out, "started") == {"victim": 2} and celery_compare.runs(out, "done") == {"victim": 1}
    assert [celery_compare.delivery_count_of(n) for n in b.acknowledged()] == [2]  # redelivered, counted
    assert (b.waiting(), b.in_flight(), rc) == ([], [], 0)
    assert "WorkerLostError" in worker.tail(100_000)


@pytest.mark.parametrize("only", [  # three parts, so that xdist spreads the suite's scenarios
    ["producer", "consumer.exit-clean", "consumer.delivers-all", "consumer.order", "consumer.acked-processed",
     "consumer.junk-tolerant", "consumer.expired-not-delivered", "consumer.claims-by-rename", "model"],
    ["consumer.late-priority", "consumer.contention-exactly-once"],
    ["consumer.lost-race", "consumer.kill9-recovery", "model"],
], ids=["produce-basic", "late-priority-contention", "lost-race-kill9"])
def test_the_celery_producer_and_worker_pass_the_conformance_suite(tmp_path: Path, only: list[str]) -> None:
    args = ["conformance", "run", "--impl", "celery-producer", "--impl", "celery-worker", "--no-tlc",
            "--out", str(tmp_path / "c"), "-j", "1"]
    for check in only:
        args += ["--only", check]
    res = CliRunner().invoke(main, args)
    assert (tmp_path / "c" / "report.json").exists(), res.output[-3000:] + repr(res.exception)
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    failed = [(i["name"], r["check"], r["summary"]) for i in report["implementations"] for r in i["results"]
              if r["status"] == "fail"]
    passed = {r["check"] for i in report["implementations"] for r in i["results"] if r["status"] == "pass"}
    assert failed == [] and res.exit_code == 0, res.output[-3000:]
    wanted = {c for c in passed if any(c == o or c.startswith(o + ".") for o in only)}
    assert wanted and all(any(c == o or c.startswith(o + ".") for c in passed) for o in only), passed


# ------------------------------------------------------------ the transport through kombu alone


def test_an_imported_module_without_spec_counts_as_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """kombu replaces its module in sys.modules by one without __spec__ (celery's pytest plugin
    imports it), and find_spec then raises: the extras check must still see it installed."""
    lazy = types.ModuleType("lazy_like_kombu")
    lazy.__spec__ = None
    monkeypatch.setitem(sys.modules, "lazy_like_kombu", lazy)
    assert missing("lazy_like_kombu") == []
    assert missing("celery", "kombu") == []


def test_the_import_registers_the_scheme() -> None:
    assert kombu.transport.TRANSPORT_ALIASES[dropboxmq_kombu.SCHEME] == dropboxmq_kombu.TRANSPORT
    assert kombu.Connection("dropboxmq:///srv/x").transport.root == Path("/srv/x")
    with pytest.raises(ValueError, match="three slashes"):
        kombu.Connection("dropboxmq://relative/x").transport  # noqa: B018  # resolving it raises


def _drain(conn: kombu.Connection, queue: kombu.Queue, handle, want: int) -> list:
    got: list = []

    def on_message(body, message):
        got.append((body, message.delivery_info.get("redelivered")))
        handle(body, message)

    with conn.Consumer([queue], callbacks=[on_message], accept=["json"]):
        for _ in range(200):
            if len(got) >= want:
                break
            try:
                conn.drain_events(timeout=0.1)
            except TimeoutError:
                pass
    return got


def test_requeue_redelivers_flagged_and_reject_dead_letters(root: Path) -> None:
    queue = kombu.Queue("jobs", kombu.Exchange("jobs", "direct"), routing_key="jobs")
    with kombu.Connection(f"dropboxmq://{root}") as conn:
        producer = conn.Producer()
        for n, priority in ((1, 0), (2, 9)):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key="jobs", declare=[queue], priority=priority)

        def handle(body, message):
            if body["n"] == 2 and not message.delivery_info.get("redelivered"):
                message.requeue()
            elif body["n"] == 2:
                message.ack()
            else:
                message.reject()

        got = _drain(conn, queue, handle, 3)
    assert got == [({"n": 2}, False), ({"n": 2}, True), ({"n": 1}, False)]  # priority 9 first
    box = root / "jobs" / "incoming"
    assert [p.name.endswith("JMSXDeliveryCountI=2") for p in (box / "processed").iterdir()] == [True]
    assert len(list((box / "error").iterdir())) == 1  # rejected: dead-lettered, not deleted
    assert not list((box / "target").iterdir()) and not list((box / "processing").iterdir())


def test_unacknowledged_messages_go_back_redelivered_when_the_connection_closes(root: Path) -> None:
    queue = kombu.Queue("jobs", kombu.Exchange("jobs", "direct"), routing_key="jobs")
    with kombu.Connection(f"dropboxmq://{root}") as conn:
        conn.Producer().publish({"n": 1}, exchange=queue.exchange, routing_key="jobs", declare=[queue])
        got = _drain(conn, queue, lambda body, message: None, 1)  # taken, never acknowledged
        assert got == [({"n": 1}, False)]
        assert len(list((root / "jobs" / "incoming" / "processing").iterdir())) == 1
    back = [p.name for p in (root / "jobs" / "incoming" / "target").iterdir()]
    assert len(back) == 1 and back[0].endswith("JMSXDeliveryCountI=1")  # delivered once; the next is #2
    with kombu.Connection(f"dropboxmq://{root}") as conn:
        assert _drain(conn, queue, lambda body, message: message.ack(), 1) == [({"n": 1}, True)]


def test_fanout_is_a_topic_and_bindings_are_shared_between_processes(root: Path) -> None:
    """Two queues bound to a fanout exchange each get a copy; a publisher that declared nothing
    (another process: a fresh connection) routes by the bindings kept under the root."""
    news = kombu.Exchange("news.all", "fanout")
    queues = [kombu.Queue(name, news) for name in ("left", "right")]
    with kombu.Connection(f"dropboxmq://{root}") as consumer_conn:
        for q in queues:
            q.bind(consumer_conn.default_channel).declare()
        done = threading.Event()

        def publish_elsewhere() -> None:
            with kombu.Connection(f"dropboxmq://{root}") as other:
                other.Producer().publish({"headline": "x"}, exchange=news, routing_key="", declare=[news])
                other.Producer().publish({"direct": 1}, exchange="", routing_key="left")
            done.set()

        threading.Thread(target=publish_elsewhere).start()
        assert done.wait(30)
        got = {q.name: _drain(consumer_conn, q, lambda body, message: message.ack(), want)
               for q, want in zip(queues, (2, 1), strict=True)}
    assert sorted(json.dumps(b) for b, _ in got["left"]) == sorted(json.dumps(b) for b in ({"headline": "x"},
                                                                                          {"direct": 1}))
    assert [b for b, _ in got["right"]] == [{"headline": "x"}]
    assert (root / "topic-root").is_dir()  # the exchange is a topic; its copies went to subscriptions
