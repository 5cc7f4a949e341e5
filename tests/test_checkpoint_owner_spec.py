"""TLC on spec/CheckpointOwner.tla (claims owned by a Spark query's checkpoint): the model holds,
the process-owned variant (what dropboxmq did before) is caught processing a message twice, and
claims outside a batch planned by the running process are caught acknowledging one unprocessed."""

from __future__ import annotations

import pytest

from dropboxmq_spec.tlc_models import models, run_model


def _model(name: str):
    return next(m for m in models() if m.name == name)


@pytest.mark.slow
def test_claims_owned_by_the_checkpoint_are_processed_exactly_once():
    out = run_model(_model("checkpointowner"), workers="1")
    assert out.ok and out.actual == "ok", out.result.output[-3000:]
    assert "No error has been found" in out.result.output


@pytest.mark.slow
def test_claims_owned_by_the_process_are_processed_twice():
    out = run_model(_model("mutant:CheckpointOwnerMutant"), workers="1")
    assert out.ok and out.actual == "12 ExactlyOnce", out.result.output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("mutant", ["CheckpointOwnerReplayClaims", "CheckpointOwnerClaimAfterSink"])
def test_claims_outside_a_running_batch_acknowledge_a_message_never_processed(mutant):
    # a replay that claims, or a task that claims after the sink step, acks what the sink never wrote
    out = run_model(_model(f"mutant:{mutant}"), workers="1")
    assert out.ok and out.actual == "12 AckedWasProcessed", out.result.output[-3000:]
