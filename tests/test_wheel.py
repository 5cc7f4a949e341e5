"""The wheel test: build the wheel, install it in a fresh venv outside the repository, and run the
spec check and the conformance suite from there, from a temporary directory.

The venv reuses the already installed third-party dependencies (a .pth to this interpreter's
site-packages, added after the wheel is installed) so the test stays offline and fast, but every
``dropboxmq*`` module must resolve to the wheel's copy: that is asserted first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("dropboxmq", "dropboxmq_kombu", "dropboxmq_spark", "dropboxmq_xa", "dropboxmq_conformance", "dropboxmq_stress",
        "dropboxmq_spec", "pyspark_dropboxmq")

pytestmark = [pytest.mark.wheel, pytest.mark.slow]


def _sources(dst: Path) -> Path:
    """The project's files as git knows them (tracked, and new ones not ignored), copied, so that
    the build's egg-info and build/ never land in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("the wheel test builds from a git checkout")
    base = tmp_path_factory.mktemp("wheel")
    src = _sources(base / "src")
    dist = base / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(dist)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next(dist.glob("dropboxmq-*.whl"))

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     base, dict(os.environ)).stdout.strip())
    # the dependencies this interpreter already has, after the wheel (paths, not site dirs:
    # their .pth files -- e.g. the editable install's finder -- are not run)
    outer = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz_outer_dependencies.pth").write_text("\n".join(outer) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DROPBOXMQ_", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, env


def test_the_wheel_outside_the_repo_gives_the_repository_verdicts(installed, tmp_path):
    venv, env = installed
    python, dmq = str(venv / "bin" / "python"), str(venv / "bin" / "dropboxmq")

    # 1. every module of ours (and the spec data) resolves to the wheel's copy
    code = ("import importlib.util, json\n"
            f"mods = {list(OURS)!r}\n"
            "print(json.dumps({m: list(importlib.util.find_spec(m).submodule_search_locations or [])"
            " or [importlib.util.find_spec(m).origin] for m in mods}))")
    res = _run([python, "-c", code], tmp_path, env)
    assert res.returncode == 0, res.stderr
    for mod, paths in json.loads(res.stdout).items():
        assert paths and all(Path(p).resolve().is_relative_to(venv.resolve()) for p in paths), (mod, paths)
    celery = _run([python, "-c", "from dropboxmq_conformance.manifest import find; print(find('celery-worker'))"],
                  tmp_path, env)  # the Celery manifests and their scripts ship too
    assert Path(celery.stdout.strip()).resolve().is_relative_to(venv.resolve()), celery.stdout + celery.stderr
    assert (Path(celery.stdout.strip()).parent / "worker.py").is_file()
    spec = _run([python, "-c", "from dropboxmq_spec.tlc import spec_dir; print(spec_dir())"], tmp_path, env)
    assert Path(spec.stdout.strip()).resolve().is_relative_to(venv.resolve()), spec.stdout + spec.stderr
    # the other packages' verbs come from the wheel's entry points (the CLI imports none of them)
    helped = _run([dmq, "--help"], tmp_path, env)
    verbs = {ln.split()[0] for ln in helped.stdout.split("Commands:")[-1].splitlines() if ln.strip()}
    assert {"audit", "conformance", "demo", "spec", "stress", "xa", "send", "recover"} <= verbs, helped.stdout

    # 2. spec check (one model, one mutant) and the conformance suite, side by side, each from
    # its own empty working directory
    site_before = sorted(str(p) for p in venv.rglob("*") if "__pycache__" not in p.parts)
    spec_cwd, conf_cwd = tmp_path / "spec", tmp_path / "conformance"
    spec_cwd.mkdir()
    conf_cwd.mkdir()
    runs = {
        "spec": subprocess.Popen([dmq, "spec", "check", "--only", "channel", "--only", "create_in_target"],
                                 cwd=spec_cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        "conformance": subprocess.Popen([dmq, "conformance", "run", "--impl", "reference", "--impl",
                                         "write-into-target", "--only", "producer", "--only", "model"],
                                        cwd=conf_cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True),
    }
    outs = {name: p.communicate(timeout=600)[0] for name, p in runs.items()}
    codes = {name: p.returncode for name, p in runs.items()}

    out = outs["spec"]
    assert codes["spec"] == 0 and "2 passed, 0 failed" in out, out
    rows = {ln.split("│")[1].strip(): ln for ln in out.splitlines() if ln.count("│") > 5}
    assert "ok" in rows["channel"] and "PASS" in rows["channel"], out
    mutant = rows["mutant:create_in_target"]
    assert "12 CompleteBeforeVisible" in mutant and "PASS" in mutant, out  # TLC found the violation
    assert list(spec_cwd.iterdir()) == []  # TLC's states/ went to a private metadir

    out = outs["conformance"]
    assert codes["conformance"] == 0 and "overall: OK" in out, out
    report = json.loads((conf_cwd / "reports" / "conformance" / "report.json").read_text())
    by_name = {r["name"]: r for r in report["implementations"]}
    ref = by_name["reference"]
    assert ref["verdict"] == "pass" and {x["status"] for x in ref["results"]} == {"pass"}, ref
    assert any(x["check"] == "model.tlc" and x["status"] == "pass" for x in ref["results"])
    broken = by_name["write-into-target"]
    assert broken["verdict"] == "caught", broken
    failed = {x["check"] for x in broken["results"] if x["status"] == "fail"}
    assert {"producer.enter-by-rename", "producer.no-direct-write"} <= failed, failed

    # 3. results went to the working directories, nothing into the installation
    assert sorted(str(p) for p in venv.rglob("*") if "__pycache__" not in p.parts) == site_before
