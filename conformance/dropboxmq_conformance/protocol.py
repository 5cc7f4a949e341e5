"""The rules of spec/PROTOCOL.md, read from the shipped document: each rule's id, its level
per profile and its text.  The checks cite rules by id; a check's level is its rule's."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

MUST, SHOULD, MAY = "MUST", "SHOULD", "MAY"
#: the profiles a run grades by (PROTOCOL.md, "How to read this document")
DEFAULT, STRICT = "default", "strict"
PROFILES = (DEFAULT, STRICT)
#: the version line of the document the suite judges by
VERSION_RE = re.compile(r"\*\*(Protocol [0-9.]+ \([^)]*\))\*\*")

# "**C-5** (MUST)", "**S-4** (MUST NOT)", "**R-2** (SHOULD; strict: MUST)"
_RULE_RE = re.compile(r"^\*\*([A-Z]-[0-9]+)\*\* \(((?:MUST|SHOULD|MAY)(?: NOT)?)(?:; strict: (MUST|SHOULD|MAY))?\)"
                      r"\s*(.*)$")


@dataclass(frozen=True)
class Rule:
    id: str
    level: str  # in the default profile
    strict_level: str
    text: str  # the rule's first sentence(s), for reports
    section: str

    def level_in(self, profile: str) -> str:
        return self.strict_level if profile == STRICT else self.level


#: MUST rules the suite cannot observe from outside, and why (reported NOT CHECKED, never passed)
NOT_CHECKED: dict[str, str] = {
    "P-7": "fsync leaves no trace in the file system's events: a missing fsync shows only after a power loss",
    "N-8": "the suite plants unparseable names for consumers (C-7 checks they do not block), but how a "
           "reader presents their headers is visible only through an API (the session adapter has no call for it)",
    "L-1": "the suite creates every dropbox itself before a run: an implementation's own layout is never observed",
    "L-2": "the suite creates the topic directories itself before a run",
    "L-6": "the suite's scenarios put nothing under dropboxmq/ for an implementation to mistake for a message",
    "X-1": "the transaction log is private to one implementation's processes; other implementations need only "
           "the visibility it gives (J-4), which session.transacted-send checks",
    "X-2": "needs a crash in the middle of a commit, which the suite cannot place black-box",
}


def _document_path() -> Path:
    env = os.environ.get("DROPBOXMQ_SPEC_DIR")
    if env and (Path(env) / "PROTOCOL.md").is_file():
        return Path(env) / "PROTOCOL.md"
    try:
        return Path(str(resources.files("dropboxmq_spec").joinpath("PROTOCOL.md")))
    except NotADirectoryError:
        # Python 3.11's namespace reader rejects the placeholder an editable install puts on
        # the package's __path__; the real folders are still listed there
        located = importlib.util.find_spec("dropboxmq_spec")
        folders = located.submodule_search_locations if located else None
        found = [Path(f) / "PROTOCOL.md" for f in folders or () if (Path(f) / "PROTOCOL.md").is_file()]
        if not found:
            raise FileNotFoundError("spec/PROTOCOL.md (package data dropboxmq_spec) is not installed") from None
        return found[0]


def parse(text: str) -> dict[str, Rule]:
    """Every numbered rule of the document."""
    rules: dict[str, Rule] = {}
    section = ""
    paragraph: list[str] = []

    def flush() -> None:
        if not paragraph:
            return
        m = _RULE_RE.match(" ".join(paragraph))
        paragraph.clear()
        if m is None:
            return
        rid, level, strict, rest = m.groups()
        base = level.split()[0]
        if rid in rules:
            raise ValueError(f"PROTOCOL.md defines {rid} twice")
        rules[rid] = Rule(rid, base, strict or base, rest.strip(), section)

    for line in text.splitlines():
        if line.startswith("## "):
            flush()
            section = line[3:].strip()
        elif not line.strip():
            flush()
        else:
            paragraph.append(line.strip())
    flush()
    return rules


@functools.cache
def document() -> str:
    return _document_path().read_text(encoding="utf-8")


@functools.cache
def rules() -> dict[str, Rule]:
    return parse(document())


def version() -> str:
    m = VERSION_RE.search(document())
    return m.group(1) if m else "Protocol (unversioned)"


def level(rule_ids: tuple[str, ...], profile: str = DEFAULT) -> str:
    """The level of a check citing ``rule_ids``: its strongest rule's (a check with no rule
    is MUST: it is the suite's own precondition)."""
    table = rules()
    levels = [table[r].level_in(profile) for r in rule_ids if r in table]
    for lv in (MUST, SHOULD, MAY):
        if lv in levels:
            return lv
    return MUST
