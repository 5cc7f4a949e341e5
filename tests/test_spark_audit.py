"""``dropboxmq audit``: the python (pyarrow) and spark engines give the stress checker's figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from dropboxmq_stress.audit import FIGURES, consistency, figures, locate, read_table  # noqa: E402
from dropboxmq_stress.checker import check, check_dir  # noqa: E402
from dropboxmq_stress.gen_history import generate  # noqa: E402
from dropboxmq_stress.history import History  # noqa: E402


def _stress_case(d: Path, power_loss: bool) -> Path:
    """A case directory in the stress runner's own format (list values, kills, foreign, final state)."""
    h = d / "history"
    prod, c1, c2, nem = (History(h, p) for p in ("p1.1", "c1.1", "c2.1", "nemesis"))
    t = 0
    for i in range(0, 40, 2):
        vals = [f"v{i}", f"v{i + 1}"]
        prod.invoke("send", vals, persistent=i % 4 == 0)
        if i == 10:
            prod.info("send", vals, err="timeout")  # recovered if delivered
        elif i == 12:
            prod.fail("send", vals)
        else:
            prod.ok("send", vals, persistent=i % 4 == 0)
    for i in range(40):
        if i in (20, 21, 22, 23, 24):  # acknowledged, never delivered
            continue
        if i in (12, 13):
            continue
        who = c1 if i % 2 else c2
        who.invoke("receive")
        who.ok("receive", f"v{i}", mode="client")
        if i == 7:
            nem.info("kill", victim="c1.1", nemesis=True)
            continue
        who.ok("ack", [f"v{i}"])
    c2.ok("receive", "v7", mode="client", redelivered=True)  # the killed one's message, again
    c2.ok("receive", "v5", mode="client")  # acked, then again: unexplained duplicate
    c2.ok("receive", "zzz", mode="client")  # nobody sent it
    c2.ok("receive", "foreign-1", foreign=True)
    for x in (prod, c1, c2, nem):
        x.close()
    final = {"working": [{"name": "w", "value": None}], "processing": [{"name": "x", "value": "v39"}],
             "processed": [{"value": "v20", "client": "c1.1"}, {"value": "v21", "client": "c2.1"}],
             "error": [{"value": "v22"}]}
    (d / "final-state.json").write_text(json.dumps(final))
    (d / "case.json").write_text(json.dumps({"nemeses": ["kill"] + (["power-loss"] if power_loss else [])}))
    del t
    return d


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("audit")
    generate(base / "gen-parquet", 40_000, "parquet", files=3)
    generate(base / "gen-jsonl", 8_000, "jsonl", files=2)
    return {
        "gen-parquet": base / "gen-parquet",
        "gen-jsonl": base / "gen-jsonl",
        "stress": _stress_case(base / "stress", power_loss=False),
        "stress-power-loss": _stress_case(base / "stress-pl", power_loss=True),
    }


def _checker(case: Path) -> dict:
    src = locate(case)
    if src.fmt == "stress-jsonl":
        return check_dir(case)
    recs = [{k: v for k, v in r.items() if v is not None and not (k == "foreign" and v is False)}
            for r in read_table(src).to_pylist()]
    return check(recs, src.final_state, power_loss=src.power_loss)


@pytest.mark.parametrize("name", ["gen-parquet", "gen-jsonl", "stress", "stress-power-loss"])
def test_python_engine_equals_the_stress_checker(cases, name):
    want = _checker(cases[name])
    got = figures(cases[name], "python")
    assert {k: got[k] for k in FIGURES} == {k: want[k] for k in FIGURES}
    assert got["acked-unobserved-count"] == want["acked-unobserved-count"]
    assert got["lost-non-persistent-count"] == want["lost-non-persistent-count"]
    if name.startswith("gen"):
        expected = json.loads((cases[name] / "expected.json").read_text())
        assert {k: got[k] for k in FIGURES} == {k: expected[k] for k in FIGURES}


def test_the_stress_fixture_exercises_every_figure(cases):
    got = figures(cases["stress-power-loss"])
    assert got["lost-count"] and got["duplicated-count"] and got["unexpected-count"] and got["recovered-count"]
    assert got["in-doubt-count"] == 2 and got["acked-unobserved-count"] == 1


@pytest.mark.spark
def test_spark_engine_gives_identical_figures(spark, cases):
    for name, case in cases.items():
        py = figures(case, "python")
        sp = figures(case, "spark", spark=spark)
        assert {k: sp[k] for k in FIGURES} == {k: py[k] for k in FIGURES}, name
        assert sp["lost"] == py["lost"]


# ---------------------------------------------------------------- consistency of a root


def test_consistency_audit_of_a_root(tmp_path):
    from dropboxmq.message import Queue, TextMessage
    from dropboxmq.connection import Connection

    root = tmp_path / "root"
    with Connection(root, client_id="a", create=True) as conn:
        p = conn.create_session().create_producer(Queue("q"))
        for _ in range(5):
            p.send(TextMessage(body=b"x"))
        conn.create_session().create_consumer(Queue("q")).receive(timeout=2)
    rep = consistency(root)
    assert rep["consistent"] and rep["messages"] == 5 and rep["by-state"]["processed"] == 1
    box = root / "q" / "incoming"
    name = sorted(os.listdir(box / "target"))[0]
    os.link(box / "target" / name, box / "error" / name)  # one message in two states
    (box / "working" / "4.1-2.T").write_bytes(b"")  # an orphan in working/
    (box / "processing" / "ghost~4.1795000000000000-1.T").write_bytes(b"")  # owner never seen
    (box / "target" / "not a 1.2 name").write_bytes(b"")  # foreign: undecodable, still fine
    rep = consistency(root)
    assert not rep["consistent"]
    assert len(rep["in-two-states"]) == 1 and len(rep["orphan-working"]) == 1
    assert len(rep["orphan-processing"]) == 1 and len(rep["undecodable"]) == 1


def test_audit_cli(cases, tmp_path):
    from click.testing import CliRunner

    from dropboxmq.cli import main

    r = CliRunner().invoke(main, ["audit", "--history", str(cases["gen-parquet"]), "--json"])
    assert r.exit_code == 1, r.output  # the generated history has lost messages
    out = json.loads(r.output)
    assert out["figures"]["lost-count"] == json.loads((cases["gen-parquet"] / "expected.json").read_text())["lost-count"]
    (tmp_path / "root").mkdir()
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "root"), "audit"])
    assert r.exit_code == 0 and "consistent" in r.output
