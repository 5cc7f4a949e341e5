"""Static checks run by ``make test``: mypy on the three packages and ruff (pyflakes + bugbear).

Both read their settings from pyproject.toml ([tool.mypy]: mypy_path resolves every module from
the tree as it is; [tool.ruff]).  A finding fails the test with the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_mypy_is_clean_on_every_package() -> None:
    res = _run("mypy")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no issues found" in res.stdout, res.stdout


def test_ruff_is_clean() -> None:
    res = _run("ruff", "check", "reference", "conformance", "stress", "spec", "tests")
    assert res.returncode == 0, res.stdout + res.stderr
