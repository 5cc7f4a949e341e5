"""The model-based API tester (issue 24, ``dropboxmq_stress.apitester``) in ``make test``.

``test_the_api_keeps_the_models_guarantees`` runs its short profile: a few derandomized programs
over the library (several client processes), the CLI and a third party, checked against the model
after every step.  The long profile runs in ``make stress`` (``python -m dropboxmq_stress.apitester``).

The other tests show that the tester can fail: each plants a bug in the client processes' library
(``apiclient.PLANT_ENV``) and asserts that the tester reports it."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from dropboxmq_spec import tlc_traces
from dropboxmq_stress import apitester
from dropboxmq_stress.apiclient import PLANT_ENV
from dropboxmq_stress.apitester import APIModel, Defect


def test_the_api_keeps_the_models_guarantees():
    apitester.register_profiles()
    run_state_machine_as_test(APIModel, settings=settings.get_profile("api-short"))


def program(m: APIModel, mode: str, second: str) -> None:
    """One client sends twice to q1 and receives in ``mode``; then ``second`` (a rule of the
    tester) and one more receive.  Every step is checked, as in a generated program."""
    client = m.start_client("c1")
    m.open_session(client, mode)
    m.open_consumer(0, "queue", "q1", "t", "s1", None, False)
    for _ in range(2):
        m.send(0, True, "q1", "t", 4, True, 0.0, 0.0, 5)
        m.guarantees_hold()
    m.receive(0)
    m.guarantees_hold()
    getattr(m, second)(0)
    m.guarantees_hold()
    m.receive(0)
    m.guarantees_hold()


@pytest.mark.parametrize("bug, mode, second, reported", [
    ("no-redelivered-flag", "client", "recover", "JMSRedelivered=False"),
    ("acknowledge-acks-nothing", "client", "acknowledge", "the model allows only [('processed'"),
    ("recover-loses-messages", "client", "recover", "a committed message lost"),
])
def test_a_planted_bug_is_reported(monkeypatch, bug, mode, second, reported):
    monkeypatch.setenv(PLANT_ENV, bug)
    m = APIModel()
    try:
        with pytest.raises(Defect) as caught:
            program(m, mode, second)
    finally:
        m.teardown()
    assert reported in str(caught.value)


def test_the_same_program_passes_on_the_library_as_it_is():
    """(So that the reports above are the planted bugs', not the program's.)"""
    for second in ("recover", "acknowledge"):
        m = APIModel()
        try:
            program(m, "client", second)
        finally:
            m.teardown()


def test_hypothesis_finds_a_planted_bug_by_itself(monkeypatch):
    """The generated programs, not only a hand-written one, reach a dropped redelivered flag."""
    monkeypatch.setenv(PLANT_ENV, "no-redelivered-flag")
    apitester.register_profiles()
    search = settings(settings.get_profile("api-short"), max_examples=30, phases=[Phase.generate])
    with pytest.raises(Defect, match="JMSRedelivered=False"):
        run_state_machine_as_test(APIModel, settings=search)


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")
def test_the_programs_traces_are_behaviours_of_the_spec(tmp_path, monkeypatch):
    """The file-system trace of each generated program that fits the spec's models (no foreign
    files) goes through TLC's trace validation (``dropboxmq spec validate-trace``): every move the
    library made, and every kill -9, is a step of spec/Dropbox.tla."""
    monkeypatch.setattr(apitester, "TRACE_DIR", tmp_path)
    apitester.register_profiles()
    run_state_machine_as_test(APIModel, settings=settings(settings.get_profile("api-short"), max_examples=3))
    traces = sorted(tmp_path.glob("*.jsonl"))
    assert traces, "no program fitted the spec's models"
    verdicts = tlc_traces.validate_traces(traces, timeout=300, jobs=1)
    undecided = [v for v in verdicts if not v.decided]
    rejected = [v for v in verdicts if v.decided and not v.accepted]
    assert not rejected and not undecided, (rejected, undecided)


def test_a_planted_growth_defect_is_reported(monkeypatch):
    """A consumer that never forgets the names its selector rejected (the ``skip`` defect fixed in
    425ffd5, planted): the held-state invariant names the consumer and what grew."""
    from test_mbt_regressions import selective_consumer_and_a_taker

    monkeypatch.setenv(PLANT_ENV, "selector-misses-kept")
    with pytest.raises(Defect, match=r"consumer \d+ \(queue of q1/incoming, selector 'n > 4'.*claimer\.skip \+"):
        selective_consumer_and_a_taker(rounds=20)
