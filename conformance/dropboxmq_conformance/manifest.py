"""Manifests: how an implementation under test is described (TOML; see README.md)."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dropboxmq.extras import EXTRAS

ROLES = ("produce", "consume", "recover", "adapter", "server", "publish", "subscribe")
JMS_VERSIONS = ("1.1", "2.0")
PUBLISH_MODES = ("fan-out", "distribute")
OUTPUT_FORMATS = ("names", "ids", "json", "bodies")
PLACEHOLDERS = ("root", "queue", "count", "body_dir", "client_id", "priority", "topic", "here", "python",
                "dropboxmq", "out", "server", "subscription")


class ManifestError(ValueError):
    pass


#: every key a manifest may have, per table ("" = the top level); anything else is an error
KEYS: dict[str, tuple[str, ...]] = {
    "": ("name", "description", "expect", "caught_by", "commands", "flags", "env", "produce", "extra"),
    "flags": ("consume_output", "ordered", "ack_removes", "timeout", "ok_exit", "api_only", "jms", "publish_mode"),
    "produce": ("bodies", "priority"),
}
#: [produce] bodies / priority: "given" (the suite's {body_dir} / {priority}) or "own" (the
#: producer cannot take them: it sends bodies / a priority of its own)
PRODUCE_CHOICES = ("given", "own")
#: check -> (manifest setting that waives it, why); see Manifest.waivers
WAIVABLE: dict[str, tuple[str, str]] = {
    "consumer.order": ("ordered", "flags.ordered = false: the consumer does not promise priority order"),
    "consumer.late-priority": ("ordered", "flags.ordered = false: the consumer does not promise priority order"),
    "producer.bodies-complete": ("bodies", 'produce.bodies = "own": the producer cannot send given bodies'),
    "producer.metadata": ("priority", 'produce.priority = "own": the producer cannot set a given priority'),
}


def _unknown(path: Path, table: str, keys: object) -> None:
    """A one-line error for the first key ``table`` does not know, with a did-you-mean."""
    known = KEYS[table]
    for key in keys:  # type: ignore[attr-defined]
        if key not in known:
            where = f"[{table}] " if table else ""
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            raise ManifestError(f"{path}: unknown {where}key {key!r}{hint}")


@dataclass
class Manifest:
    name: str
    description: str
    path: Path
    commands: dict[str, str]
    expect: str = "pass"  # "pass": must pass every check; "fail": a broken example that must be caught
    caught_by: list[str] = field(default_factory=list)
    ack_removes: bool = False
    ordered: bool = True
    bodies: str = "given"
    priority: str = "given"
    consume_output: str = "names"
    timeout: float = 20.0
    ok_exit: tuple[int, ...] = (0,)
    env: dict[str, str] = field(default_factory=dict)
    api_only: bool = False  # no dropbox at all (e.g. a JMS broker): session checks judge the API only
    jms: str = "2.0"  # the JMS version the adapter speaks: "1.1" skips the JMS 2.0 session checks
    publish_mode: str = "fan-out"  # the publisher writes every copy itself, or drops into .incoming/ ("distribute")
    extra: str | None = None  # the dropboxmq extra its commands need (e.g. "spark"), checked before the run

    @property
    def here(self) -> Path:
        return self.path.parent

    @property
    def waivers(self) -> dict[str, str]:
        """The checks this manifest waives, and why (shown in every report)."""
        waived = {"ordered": not self.ordered, "bodies": self.bodies == "own", "priority": self.priority == "own"}
        return {check: why for check, (setting, why) in WAIVABLE.items() if waived[setting]}

    def has(self, role: str) -> bool:
        return bool(self.commands.get(role))

    def command(self, role: str, **values: object) -> str:
        """The shell command for ``role`` with its placeholders filled in (shell-quoted)."""
        template = self.commands[role]
        values = {"here": str(self.here), "python": sys.executable,
                  "dropboxmq": f"{shlex.quote(sys.executable)} -m dropboxmq.cli", **values}

        def sub(m: re.Match[str]) -> str:
            key = m.group(1)
            if key not in values:
                raise ManifestError(f"{self.name}: command {role!r} uses {{{key}}}, which is not given for this role")
            v = str(values[key])
            return v if key == "dropboxmq" else shlex.quote(v)

        return re.sub(r"\{(" + "|".join(PLACEHOLDERS) + r")\}", sub, template)


def _schema() -> dict:
    """The JSON Schema of a manifest (after TOML parsing): every key's type and allowed values.
    Each property's ``description`` is what an error says it must be."""
    strings = {"type": "string"}
    boolean = {"type": "boolean", "description": "true or false"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$",
                     "description": "a plain name (letters, digits, '.', '_', '+', '-'; it names the "
                                    "manifest's report directory)"},
            "description": {"type": "string", "description": "a string"},
            "expect": {"enum": ["pass", "fail"], "description": "'pass' or 'fail'"},
            "caught_by": {"type": "array", "items": strings, "description": "a list of check names"},
            "commands": {"type": "object", "propertyNames": {"enum": list(ROLES)},
                         "additionalProperties": strings,
                         "description": f"a table mapping roles ({', '.join(ROLES)}) to command strings"},
            "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                    "description": "a table of environment variables (strings, numbers or booleans)"},
            "extra": {"enum": list(EXTRAS), "description": f"one of {', '.join(EXTRAS)}"},
            "flags": {"type": "object", "description": "a table", "properties": {
                "consume_output": {"enum": list(OUTPUT_FORMATS), "description": f"one of {OUTPUT_FORMATS}"},
                "ordered": boolean, "ack_removes": boolean, "api_only": boolean,
                "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "a number of seconds > 0"},
                "ok_exit": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255},
                            "description": "a list of exit statuses (integers 0-255)"},
                "jms": {"enum": list(JMS_VERSIONS), "description": f"one of {JMS_VERSIONS}"},
                "publish_mode": {"enum": list(PUBLISH_MODES), "description": f"one of {PUBLISH_MODES}"},
            }},
            "produce": {"type": "object", "description": "a table", "properties": {
                key: {"enum": list(PRODUCE_CHOICES), "description": f"one of {PRODUCE_CHOICES}"}
                for key in ("bodies", "priority")}},
        },
    }


def _validate(path: Path, data: dict) -> None:
    """One line naming the first key whose value the schema rejects."""
    import jsonschema  # the conformance extra's: imported here, so `dropboxmq --help` never needs it

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(_schema()).iter_errors(data))
    if error is None:
        return
    keys = [str(k) for k in error.absolute_path]
    if error.validator == "required":
        raise ManifestError(f"{path}: 'name' (a string) is required")
    if len(keys) >= 2 and keys[0] in ("flags", "produce"):
        where = f"[{keys[0]}] {keys[1]}"
    elif keys:
        where = keys[0] if len(keys) == 1 else f"{keys[0]}.{'.'.join(keys[1:])}"
    else:
        where = "the manifest"
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "propertyNames" or (error.validator == "enum" and keys[:1] == ["commands"]):
        raise ManifestError(f"{path}: unknown roles in [commands] (known: {', '.join(ROLES)})")
    # the description of the key itself (an item's failure names the list it is in)
    described = _schema()["properties"]
    for k in keys:
        nxt = described.get(k) if isinstance(described, dict) else None
        if not isinstance(nxt, dict):
            break
        if "description" in nxt:
            schema = nxt
        described = nxt.get("properties", {})
    got = error.instance
    raise ManifestError(f"{path}: {where} must be {schema.get('description', 'valid')}, not {got!r}"[:300])


def load(path: str | Path) -> Manifest:
    path = Path(path).resolve()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"{path}: {exc}") from None
    _unknown(path, "", data)
    for table in ("flags", "produce"):
        if not isinstance(data.get(table, {}), dict):
            raise ManifestError(f"{path}: [{table}] must be a table")
        _unknown(path, table, data.get(table, {}))
    _validate(path, data)
    name = data["name"]
    commands = data.get("commands", {})
    if not any(commands.get(r) for r in ("produce", "consume", "adapter", "publish", "subscribe")):
        raise ManifestError(f"{path}: give at least one of produce, consume, adapter, publish, subscribe")
    flags = data.get("flags", {})
    out = flags.get("consume_output", "names")
    jms = str(flags.get("jms", "2.0"))
    publish_mode = str(flags.get("publish_mode", "fan-out"))
    extra = data.get("extra")
    expect = data.get("expect", "pass")
    caught_by = data.get("caught_by", [])
    if expect == "fail" and not caught_by:
        raise ManifestError(f"{path}: a broken example (expect = 'fail') must name the checks aimed at its defect "
                            "in caught_by")
    from .checks import BY_ID  # (checks does not import manifests)

    for check in caught_by:
        if check not in BY_ID:
            close = difflib.get_close_matches(str(check), BY_ID, n=1)
            raise ManifestError(f"{path}: caught_by names no check {check!r}"
                                + (f"; did you mean {close[0]!r}?" if close else ""))
    produce = data.get("produce", {})
    return Manifest(
        name=name,
        description=str(data.get("description", "")),
        path=path,
        commands=dict(commands),
        expect=expect,
        caught_by=list(caught_by),
        ack_removes=bool(flags.get("ack_removes", False)),
        ordered=bool(flags.get("ordered", True)),
        bodies=produce.get("bodies", "given"),
        priority=produce.get("priority", "given"),
        consume_output=out,
        timeout=float(flags.get("timeout", 20.0)),
        ok_exit=tuple(int(c) for c in flags.get("ok_exit", [0])),
        env={str(k): str(v) for k, v in data.get("env", {}).items()},
        api_only=bool(flags.get("api_only", False)),
        jms=jms,
        publish_mode=publish_mode,
        extra=extra,
    )


def impls_dir() -> Path:
    return Path(str(resources.files("dropboxmq_conformance") / "impls"))


def default_manifests() -> list[Path]:
    """The embedded default: the reference, the shell implementations, the third-party ones
    written from PROTOCOL.md alone (docs/), every broken example."""
    base = impls_dir()
    order = [base / "reference" / "reference.toml", base / "shell" / "shell.toml", base / "shell" / "v12-style.toml"]
    order += sorted((base / "docs").glob("*.toml"))
    order += sorted((base / "broken").glob("*.toml"))
    return [p for p in order if p.exists()]


def shipped_manifests() -> list[Path]:
    """Every manifest the package ships: the embedded default, then ActiveMQ and the defective
    JMS providers built on it, the Spark jobs and Celery's producer and worker (run only when
    named: they need a JDK with ActiveMQ's jars, or the spark or celery extra)."""
    base = impls_dir()
    extra = sorted(base.glob("activemq/*.toml")) + sorted(base.glob("defective_jms/*.toml"))
    extra += sorted((base.parent / "spark").glob("*.toml"))
    extra += sorted((base.parent / "celery").glob("*.toml"))
    return default_manifests() + extra


def find(spec: str) -> Path:
    """A manifest path, or the name of a shipped one (``reference``, ``shell``, ``spark-producer``)."""
    p = Path(spec)
    if p.is_file():
        return p
    for m in shipped_manifests():
        if m.stem == spec or load(m).name == spec:
            return m
    raise ManifestError(f"no manifest {spec!r} (a path, or one of: "
                        + ", ".join(load(m).name for m in shipped_manifests()) + ")")


def environ(m: Manifest) -> dict[str, str]:
    env = dict(os.environ)
    env.update(m.env)
    env.setdefault("LC_ALL", "C")
    return env
