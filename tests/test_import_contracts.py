"""The dependency direction is a contract (pyproject's [tool.importlinter], run by lint-imports):
the library ``dropboxmq`` imports no tool (stress, conformance, spec tooling), no integration
(Spark, XA, kombu) and none of their dependencies; the integrations import no tool.

The contract must also be able to fail: a copy of the tree with one planted back-edge -- inside a
function, where an import circle or a tool import hides most easily -- is rejected, naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
#: the contracts of ours (pyproject ids); other contracts (layers) may sit beside them
OURS = ("library-imports-no-tool", "integrations-import-no-tool")


def _lint(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", *[a for c in OURS for a in ("--contract", c)]], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_the_contracts():
    res = _lint(REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 kept, 0 broken" in res.stdout, res.stdout


def _copy_tree(dst: Path) -> dict[str, str]:
    """Every root package copied under ``dst`` (spec/ as dropboxmq_spec), first on the path."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.tla", "*.cfg", "traces", "*.jar")
    for folder in ("reference", "conformance", "stress"):
        shutil.copytree(REPO / folder, dst / folder, ignore=ignore)
    shutil.copytree(REPO / "spec", dst / "spec-root" / "dropboxmq_spec", ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", dst / "pyproject.toml")
    roots = [str(dst / d) for d in ("reference", "conformance", "stress", "spec-root")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(roots)}


@pytest.mark.parametrize("module, edge, named", [
    # the library reaching for a tool, from inside a function
    ("reference/dropboxmq/retention.py", "import dropboxmq_stress", "dropboxmq.retention -> dropboxmq_stress"),
    # the library importing an integration (the old recovery -> xa edge)
    ("reference/dropboxmq/recovery.py", "from dropboxmq_xa import recover", "dropboxmq.recovery -> dropboxmq_xa"),
    # an integration importing the spec tooling
    ("reference/dropboxmq_xa/cli.py", "from dropboxmq_spec import tlc", "dropboxmq_xa.cli -> dropboxmq_spec"),
])
def test_a_planted_back_edge_breaks_the_contract(tmp_path, module, edge, named):
    env = _copy_tree(tmp_path)
    clean = _lint(tmp_path, env)
    assert clean.returncode == 0, clean.stdout + clean.stderr  # the copy is what is checked, and it is clean
    with open(tmp_path / module, "a", encoding="utf-8") as f:
        f.write(f"\n\ndef planted_back_edge():\n    {edge}  # noqa\n")
    res = _lint(tmp_path, env)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "BROKEN" in res.stdout and named in res.stdout, res.stdout
