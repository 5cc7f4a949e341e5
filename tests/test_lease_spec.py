"""Leases and fencing in the spec (spec/Lease.tla, issue 28) and the commit log under power loss
(spec/DropboxPower.tla, issue 26): the models ``spec check`` runs, and where their mutants run.

Each mutant's rejection (exit code and property) is asserted by tests/test_spec.py
(test_mutant_is_rejected), and that no other property rejects it (test_only_the_new_property_...).
"""

from __future__ import annotations

import shutil

import pytest

from dropboxmq_spec import tlc_models as sm
from dropboxmq_spec import tlc

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed")

SPEC = tlc.spec_dir()
CI = {m.name: m for m in sm.models(deep=False)}
DEEP = {m.name: m for m in sm.models(deep=True)}

#: mutant -> (module, the invariant that alone rejects it)
MUTANTS = {
    "mutant:lease_early_declare": ("Lease.tla", "LeaseRespected"),
    "mutant:lease_late_ack_succeeds": ("Lease.tla", "LateAckFails"),
    "mutant:lease_link_claim": ("Lease.tla", "NoAckedDeliveredAgain"),
    "mutant:lease_enoent_claim_lost": ("Lease.tla", "NoStrandedClaim"),
    "mutant:power_commit_claims_unsynced": ("DropboxPower.tla", "CommittedRecvStays"),
    "mutant:power_commit_unlinks_early": ("DropboxPower.tla", "CommittedRecvStays"),
}


def test_mutants_run_against_the_module_their_config_names():
    for name, (module, prop) in MUTANTS.items():
        m = CI[name]
        assert (m.module, m.expect_prop, m.expect_code) == (module, prop, tlc.EXIT_INVARIANT), name
    assert CI["witness:lease_fenced_ack_reachable"].module == "Lease.tla"
    # the mutants of Dropbox itself still run against DropboxMC
    assert CI["mutant:copy_claim"].module == "DropboxMC.tla"


def test_deep_lease_models_run_only_with_deep():
    for name in ("leasedeep", "leasedeepowners"):
        assert name not in CI
        assert DEEP[name].deep and DEEP[name].kind == "model" and DEEP[name].module == "Lease.tla"
    assert not CI["lease"].deep


def test_lease_model_passes():
    o = sm.run_model(CI["lease"], SPEC, workers="1")
    assert o.ok, o.result.output[-3000:]
    assert o.result.distinct and o.result.distinct > 10_000


@pytest.mark.slow
def test_commit_log_power_model_passes():
    o = sm.run_model(CI["dropboxpowerack"], SPEC, workers="1")
    assert o.ok, o.result.output[-3000:]
    assert "CommittedRecvStays" in (SPEC / "DropboxPowerAck.cfg").read_text()


@pytest.mark.slow
def test_no_message_is_acknowledged_twice_in_the_lease_model_but_both_ack_mutants_break_it(tmp_path):
    """AckedOnce (checked by the models only) follows from LateAckFails and
    NoAckedDeliveredAgain: the mutant of either breaks it too."""
    assert "AckedOnce" in (SPEC / "Lease.cfg").read_text()
    for name in ("mutant:lease_late_ack_succeeds", "mutant:lease_link_claim"):
        cfg = (SPEC / CI[name].cfg).read_text()
        head, _, _ = cfg.partition("INVARIANTS")
        p = tmp_path / "acked_once.cfg"
        p.write_text(head + "INVARIANTS\n    AckedOnce\n")
        res = tlc.run_tlc(SPEC / "Lease.tla", p, workers="1", timeout=600, cwd=SPEC)
        assert res.exit_code == tlc.EXIT_INVARIANT and res.violated == "AckedOnce", (name, res.output[-2000:])
