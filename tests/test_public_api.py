"""The package's public surface: every core module says what it exports (``__all__``), every
name one module takes from another is exported, and no module reaches into another's private
(``_x``) names.  Read from the source (AST), so nothing is imported and nothing runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "reference" / "dropboxmq"
TREES = ("reference", "conformance", "stress", "spec")
#: top-level packages that are ours (an absolute import of one of them is an import of our code)
OURS = ("dropboxmq", "dropboxmq_spark", "dropboxmq_xa", "dropboxmq_kombu", "dropboxmq_spec", "dropboxmq_conformance",
        "dropboxmq_stress", "pyspark_dropboxmq")
CORE = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("_"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources(repo: Path) -> list[Path]:
    return sorted(p for tree in TREES for p in (repo / tree).rglob("*.py") if ".venv" not in p.parts)


def _imports(tree: ast.AST, in_core: bool) -> list[tuple[ast.stmt, str | None, str, str]]:
    """(node, source, the name taken, its local name) of every import of our code in ``tree``;
    source: the core module imported from, "dropboxmq" for the core package itself (the name
    may be a core module), None for our other packages."""
    out: list[tuple[ast.stmt, str | None, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            if node.level == 0 and (not parts or parts[0] not in OURS):
                continue
            if node.level == 1 and in_core:
                source = parts[0] if parts else "dropboxmq"
            elif node.level == 0 and parts[0] == "dropboxmq":
                source = parts[1] if len(parts) > 1 else "dropboxmq"
            else:
                source = None
            out += [(node, source, a.name, a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] not in OURS:
                    continue
                if a.asname and len(parts) == 2 and parts[0] == "dropboxmq":
                    out.append((node, "dropboxmq", parts[1], a.asname))  # import dropboxmq.store as st
                else:
                    out.append((node, None, a.name, a.asname or parts[0]))
    return out


def private_uses(repo: Path) -> list[str]:
    """Every place where a module of ``repo`` takes a private name of another of our modules:
    ``from x import _y``, or ``x._y`` where ``x`` was imported from our code (a module, or a
    class of one)."""
    found = []
    for path in _sources(repo):
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(repo)
        imported = set()
        for node, _source, name, local in _imports(tree, in_core=path.parent == PACKAGE):
            if _private(name.split(".")[-1]):
                found.append(f"{where}:{node.lineno}: imports {name}")
            imported.add(local)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in imported and _private(node.attr):
                found.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_takes_a_private_name_of_another():
    assert private_uses(REPO) == []


def test_the_scan_finds_private_imports_and_attributes(tmp_path):
    pkg = tmp_path / "reference" / "dropboxmq"
    pkg.mkdir(parents=True)
    (tmp_path / "stress").mkdir()
    (tmp_path / "conformance").mkdir()
    (pkg / "store.py").write_text("def _fsync_dir(p): pass\n")
    (pkg / "xa.py").write_text("from .store import _fsync_dir\nfrom . import codec\ncodec._split_name('x')\n"
                               "from .session import Session\nSession._rollback(None)\n")
    (tmp_path / "stress" / "gen.py").write_text("from dropboxmq_stress.audit import _flat_schema\n"
                                                "import dropboxmq.store as st\nst._renameat2\n"
                                                "from os import _exit\n_exit\nimport json\njson._x\n")
    found = private_uses(tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == [
        "imports _fsync_dir", "codec._split_name", "Session._rollback", "imports _flat_schema", "st._renameat2"], found


def _declared_all(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@pytest.mark.parametrize("module", CORE)
def test_core_module_declares_its_public_names(module):
    path = PACKAGE / f"{module}.py"
    exported = _declared_all(path)
    assert exported is not None, f"{module}.py has no __all__"
    assert len(exported) == len(set(exported)), f"{module}.__all__ repeats a name"
    assert not [n for n in exported if _private(n)], f"{module}.__all__ exports a private name"
    assert set(exported) <= _top_level_names(path), f"{module}.__all__ names what it does not define"


def test_every_name_taken_from_a_core_module_is_exported():
    exported = {m: set(_declared_all(PACKAGE / f"{m}.py") or ()) for m in CORE}
    missing = []
    for path in _sources(REPO):
        tree = ast.parse(path.read_text(), str(path))
        in_core = path.parent == PACKAGE
        modules = {}  # local name -> the core module it is
        for node, source, name, local in _imports(tree, in_core):
            if source == "dropboxmq" and name in CORE:
                modules[local] = name  # from . import codec / from dropboxmq import codec
            elif source in exported and name not in exported[source]:
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {source}.{name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                core = modules[node.value.id]
                if node.attr not in exported[core] and not _private(node.attr) and isinstance(node.ctx, ast.Load):
                    missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {core}.{node.attr}")
    assert missing == [], f"taken from a core module but missing from its __all__: {missing}"
