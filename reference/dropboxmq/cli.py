"""The ``dropboxmq`` command line.  Errors are one clear line and a non-zero exit."""

from __future__ import annotations

import errno
import functools
import importlib.metadata
import json
import math
import os
import shutil
import stat as stat_module
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from rich.table import Table

from . import __version__, extras
from .cli_root import require_root
from .errors import DropboxMQError
from .hints import did_you_mean
from .lifecycle import STATE_DIRS, State
from .message import DeliveryMode, Queue

__all__ = [
    "main", "hoist_global_options", "message_environment", "queue_stats", "stat_growth",
    "prometheus_text", "ACK_MODES", "STAT_FORMATS",
]

console = Console()
err_console = Console(stderr=True)

ACK_MODES = {"auto": 1, "client": 2, "dups-ok": 3, "transacted": 0}

#: The group's own options, accepted after the verb too (`dropboxmq receive q --root DIR`).
GLOBAL_FLAGS = ("--allow-network-fs", "--quiet", "-q")
GLOBAL_WITH_VALUE = ("--root",)


def hoist_global_options(args: list[str], commands: Mapping[str, click.Command]) -> list[str]:
    """Move global options given after the verb in front of it, unless that verb has an
    option of the same name.  Nothing after a '--' moves."""
    i = 0
    while i < len(args):  # skip the global options already in front
        name = args[i].split("=", 1)[0]
        if name in GLOBAL_WITH_VALUE:
            i += 1 if "=" in args[i] else 2
        elif name in GLOBAL_FLAGS:
            i += 1
        else:
            break
    if i >= len(args) or not isinstance(commands.get(args[i]), click.Command) \
            or isinstance(commands[args[i]], click.Group):
        return args
    own = {opt for param in commands[args[i]].params for opt in param.opts}
    moved: list[str] = []
    kept: list[str] = []
    rest = args[i + 1:]
    j = 0
    while j < len(rest):
        arg = rest[j]
        name = arg.split("=", 1)[0]
        if arg == "--":
            kept += rest[j:]
            break
        if name in own or name not in GLOBAL_FLAGS + GLOBAL_WITH_VALUE:
            kept.append(arg)
            j += 1
        elif name in GLOBAL_WITH_VALUE and "=" not in arg:
            moved += rest[j:j + 2]
            j += 2
        else:
            moved.append(arg)
            j += 1
    return args[:i] + moved + [args[i]] + kept


class _Group(click.Group):
    """Every user mistake is ONE line on stderr and a non-zero exit, never a traceback.

    Our own errors (bad names, full disks, bad selectors, ...) exit 1; click's usage
    errors (bad options) exit 2; ``receive`` on an empty queue exits 3.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = hoist_global_options(args, _Verbs(self, ctx))
        return super().parse_args(ctx, args)

    # The other packages' verbs (stress, conformance, spec, xa, audit, demo) come from the entry
    # point group TOOL_VERBS, loaded when named (or listed by --help): the CLI imports none of them.
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(tool_verbs()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None or cmd_name not in tool_verbs():
            return own
        entry = tool_verbs()[cmd_name]
        try:
            command = entry.load()
        except ImportError as exc:  # the extra (or the package) that brings it is not installed
            return _not_installed(cmd_name, entry, exc)
        if not isinstance(command, click.Command):
            raise TypeError(f"entry point {TOOL_VERBS}:{cmd_name} is {command!r}, not a click command")
        return command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (DropboxMQError, ValueError, OSError) as exc:
            if isinstance(exc, click.ClickException):
                raise
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # a closed pipe (`dropboxmq browse q | head`): quiet, handled in main()
            _fail(str(exc))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError):
                path = exc.ctx.command_path if exc.ctx is not None else (prog_name or "dropboxmq")
                hint = f" (see '{path} --help')"
            _fail(exc.format_message().rstrip(".") + hint, exc.exit_code)
        except click.Abort:
            _fail("aborted")
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            sys.stdout = _Discard()  # the reader went away: exit quietly, like `cat | head`
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


class _Verbs(Mapping[str, click.Command]):
    """The group's verbs, its own and the entry points', as a mapping (hoist_global_options)."""

    def __init__(self, group: click.Group, ctx: click.Context):
        self.group, self.ctx = group, ctx

    def __getitem__(self, name: str) -> click.Command:
        command = self.group.get_command(self.ctx, name)
        if command is None:
            raise KeyError(name)
        return command

    def __iter__(self) -> Iterator[str]:
        return iter(self.group.list_commands(self.ctx))

    def __len__(self) -> int:
        return len(self.group.list_commands(self.ctx))


#: the entry point group other packages register their verbs in (pyproject [project.entry-points])
TOOL_VERBS = "dropboxmq.commands"


@functools.cache
def tool_verbs() -> dict[str, importlib.metadata.EntryPoint]:
    """verb -> its entry point; an entry point's ``[extra]`` names the extra its verb needs."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=TOOL_VERBS)}


def _not_installed(verb: str, entry: importlib.metadata.EntryPoint, exc: ImportError) -> click.Command:
    """A stand-in for a verb that cannot load: listed by --help, and run, one line naming the extra."""
    extra = entry.extras[0] if entry.extras else None
    line = (extras.needs(f"dropboxmq {verb}", extra, exc.name) if extra and exc.name else None) or \
        f"dropboxmq {verb} cannot load: {exc}" + (f" (pip install 'dropboxmq[{extra}]')" if extra else "")

    def fail() -> None:
        raise click.ClickException(line)

    return click.Command(verb, callback=fail, help=line, short_help="(not installed) " + line.split(": ")[-1],
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                         add_help_option=False)


class _Discard:
    def write(self, *_):
        pass

    def flush(self):
        pass


def _fail(message: str, code: int = 1) -> "NoReturn":
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


@click.group(cls=_Group, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="DROPBOXMQ_ROOT",
    default="./var/dropbox",
    show_default="$DROPBOXMQ_ROOT, else ./var/dropbox",
    help="The dropbox root: the directory that holds every queue and topic.",
)
@click.option("--allow-network-fs", is_flag=True, help="Use a root on NFS/SMB anyway (weaker rename guarantees).")
@click.option("-q", "--quiet", is_flag=True, help="No progress display or closing summary (they are shown only "
              "when standard output is a terminal anyway).")
@click.version_option(__version__, prog_name="dropboxmq")
@click.pass_context
def main(ctx: click.Context, root: Path, allow_network_fs: bool, quiet: bool) -> None:
    """dropboxmq: JMS-style guaranteed messaging whose only broker is a directory tree.

    A message is a file; its state is the directory holding it
    (working/ target/ processing/ processed/ expired/ error/); every state
    change is one atomic rename.  Files are compatible with DropboxMQ 1.2.
    The options above may also follow the command (dropboxmq receive q --root DIR).

    \b
    Everyday tasks:
      dropboxmq init orders                          create a queue
      dropboxmq send orders 'hello'                  send text (or: --file blob.gz, a BytesMessage)
      dropboxmq receive orders --body > out.bin      the body, raw
      dropboxmq receive orders -n 0 --exec ./handle  one run per message, ack on exit 0
      dropboxmq receive orders --follow --exec ./handle   a worker; SIGTERM/Ctrl-C stop it cleanly
      dropboxmq browse orders --state error          dead letters; 'dropboxmq redrive orders' sends them back
      dropboxmq stat --watch                         depth, oldest age, error/ growth
      dropboxmq prune --older-than 7d                retention of processed/ and expired/
    """
    ctx.obj = {"root": root, "allow_network_fs": allow_network_fs, "quiet": quiet}
    if ctx.invoked_subcommand is None:  # bare `dropboxmq`: the help, and success
        click.echo(ctx.get_help())


def _connect(ctx: click.Context, client_id: str | None = None, *, create: bool = False, settings: Any = None):
    """A connection to the root; ``create`` (the verb's --create) makes the root and the queue."""
    from .connection import Connection

    if not create:
        require_root(ctx)  # the CLI's own one-line error, naming --root and $DROPBOXMQ_ROOT
    return Connection(ctx.find_root().obj["root"], client_id, settings, create=create,
                      allow_network_fs=ctx.find_root().obj["allow_network_fs"])


def _parse_boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"a boolean is true or false, not {text!r}")
    return text.lower() == "true"


_PROPERTY_TYPES: dict[str, Callable[[str], Any]] = {"boolean": _parse_boolean, "byte": int, "short": int, "int": int,
                   "long": int, "float": float, "double": float, "string": str}


def _parse_property(text: str):
    """NAME=VALUE[:TYPE] with TYPE one of boolean byte short int long float double string."""
    from .values import Property

    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r}: expected NAME=VALUE[:TYPE]", param_hint="--property")
    value, colon, type_ = rest.rpartition(":")
    if not colon or type_ not in _PROPERTY_TYPES:
        value, type_ = rest, "string"  # 'url=http://x' stays one string
    try:
        return name, Property.of(_PROPERTY_TYPES[type_](value), type_)
    except (ValueError, DropboxMQError) as exc:
        raise click.BadParameter(f"{text!r}: {exc}", param_hint="--property") from None


@main.command()
@click.argument("queues", nargs=-1)
@click.pass_context
def init(ctx: click.Context, queues: tuple[str, ...]) -> None:
    """Create the root layout and the named QUEUES, each with its six state directories
    (working/ target/ processing/ processed/ expired/ error/).  Safe to repeat.

    \b
    Example:  dropboxmq --root /srv/mq init orders invoices
    """
    from . import layout
    from .dirs import ensure_layout
    from .making import ensure_dropbox

    root = ctx.obj["root"]
    boxes = [layout.queue_box(root, Queue(q)) for q in queues]  # validate every name first
    os.makedirs(root, exist_ok=True)
    ensure_layout(root)
    for box in boxes:
        ensure_dropbox(box)
        console.print(Text(f"created {box.path}"), soft_wrap=True)
    if not boxes:
        console.print(Text(f"initialised {root}"), soft_wrap=True)


def _send_options(f):
    """The options shared by `send` (queues) and `publish` (topics)."""
    for option in reversed([
        click.argument("body", required=False),
        click.option("-f", "--file", "body_file", type=click.File("rb"),
                     help="Read the body from a file ('-' = stdin) and send it as a BytesMessage (unless "
                          "--text), streamed: a large file is never held in memory."),
        click.option("-n", "--count", default=1, show_default=True, type=click.IntRange(1),
                     help="Send the body this many times (ids are printed below 1000, a summary above)."),
        click.option("--bytes", "as_bytes", is_flag=True,
                     help="Send a BytesMessage (default for --file, and for standard input that is not "
                          "UTF-8 text)."),
        click.option("--text", "as_text", is_flag=True,
                     help="Send a TextMessage (default for BODY and UTF-8 standard input); the body must be "
                          "UTF-8."),
        click.option("--lines", is_flag=True, help="One TextMessage per line of standard input (or of --file), "
                     "sent as each line arrives; the line ends are not part of the bodies."),
        click.option("--create", is_flag=True, help="Create the queue if it does not exist (without it, an "
                     "unknown queue is an error, so a typo creates nothing)."),
        click.option("-p", "--priority", default=4, show_default=True, type=click.IntRange(0, 9),
                     help="JMSPriority, 0 (lowest) to 9; higher priorities are delivered first."),
        click.option("--ttl", type=click.FloatRange(0), default=0, help="Time to live in seconds (0 = never expires)."),
        click.option("--delay", type=click.FloatRange(0), default=0, help="Delivery delay in seconds."),
        click.option("--non-persistent", is_flag=True,
                     help="NON_PERSISTENT: skip the fsyncs (faster; lost in a power cut)."),
        click.option("--correlation-id", help="JMSCorrelationID header."),
        click.option("--type", "jms_type", help="JMSType header."),
        click.option("--reply-to", metavar="QUEUE", help="Queue name for JMSReplyTo."),
        click.option("--property", "properties", multiple=True, metavar="NAME=VALUE[:TYPE]",
                     help="A message property (repeatable); TYPE: boolean byte short int long float double "
                          "string (default)."),
        click.option("--transacted", is_flag=True,
                     help="Send all COUNT messages in one transaction (all or nothing)."),
        click.option("--client-id", help="Client id to register (default: generated)."),
    ]):
        f = option(f)
    return click.pass_context(f)


@main.command()
@click.argument("queue")
@_send_options
def send(ctx, queue, **options) -> None:
    """Send a message to QUEUE; prints each message id.  The body is BODY, or the
    contents of --file, or standard input when neither is given.

    \b
    Examples:
      dropboxmq send orders 'hello' --priority 7 --property region=eu --property n=3:int
      dropboxmq send images --file cat.png --ttl 3600    # a BytesMessage
      seq 10 | dropboxmq send numbers                    # UTF-8 input: one TextMessage
      seq 10 | dropboxmq send numbers --lines            # ten TextMessages, one per line
    """
    create = options.pop("create")
    _send(ctx, _known_queue(ctx, queue, create), create=create, **options)


@main.command()
@click.argument("topic")
@_send_options
def publish(ctx, topic, **options) -> None:
    """Publish a message on TOPIC: one copy goes to every matching subscription of the
    topic and of every ancestor topic (a.b.c also reaches a.b and a).  Without
    subscriptions the message goes nowhere, as JMS says.

    \b
    Examples:
      dropboxmq publish news.sport 'goal' --property team=red
    """
    from .message import Topic

    del options["create"]  # publishing to a topic nobody subscribes to is fine (JMS)
    _send(ctx, Topic(topic), **options)


def _is_regular_file(stream) -> bool:
    try:
        return stat_module.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False  # CliRunner's in-memory stdin, pipes, terminals


def _check_utf8_file(stream) -> None:
    """--text --file: the file must be UTF-8; checked in chunks, not read whole."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    seen = 0
    try:
        while chunk := os.pread(stream.fileno(), 1 << 20, seen):
            decoder.decode(chunk)
            seen += len(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise click.UsageError(f"the file is not UTF-8 text (near byte {seen + exc.start}): "
                               "send it without --text") from None


def _send(ctx, dest, body, body_file, count, as_bytes, as_text, priority, ttl, delay, non_persistent,
          correlation_id, jms_type, reply_to, properties, transacted, client_id, lines=False, create=False) -> None:
    from .bodies import BytesMessage
    from .message import TextMessage

    if body is not None and body_file is not None:
        raise click.UsageError("give BODY or --file, not both")
    if as_bytes and as_text:
        raise click.UsageError("--bytes or --text, not both")
    if lines and (body is not None or as_bytes or count != 1):
        raise click.UsageError("--lines reads the bodies from standard input or --file: drop BODY, --bytes and -n")
    if lines:
        _send_lines(ctx, dest, body_file or sys.stdin.buffer, priority, ttl, delay, non_persistent, correlation_id,
                    jms_type, reply_to, properties, transacted, client_id, create)
        return
    reply = Queue(reply_to) if reply_to else None
    props = [_parse_property(p) for p in properties]
    data: bytes | None = None
    source = None  # a regular file, streamed by the store instead of read here
    if body is not None:
        data = body.encode("utf-8", "surrogateescape")
        text = not as_bytes
    elif body_file is not None and _is_regular_file(body_file):
        source, text = body_file, as_text
        if text:
            _check_utf8_file(source)
    else:
        stream = body_file or sys.stdin.buffer
        if body_file is None and sys.stdin is not None and sys.stdin.isatty():
            err_console.print("reading the body from standard input (end with Ctrl-D)", highlight=False)
        data = stream.read()
        text = as_text or (body_file is None and not as_bytes and _is_utf8(data))
    if text and data is not None and not _is_utf8(data):
        raise click.UsageError("the body is not UTF-8 text: send it without --text")
    headers = dict(delivery_mode=DeliveryMode.NON_PERSISTENT if non_persistent else DeliveryMode.PERSISTENT,
                   priority=priority, time_to_live=ttl, delivery_delay=delay)
    ids: list[str] = []
    with _connect(ctx, client_id, create=create) as conn, \
            _Activity(ctx, "sent", f"to {dest.name}", count) as activity:
        session = conn.create_session(transacted=transacted)
        producer = session.create_producer(dest)
        for _ in range(count):
            msg = TextMessage(data or b"") if text else BytesMessage(data or b"")
            msg.correlation_id, msg.jms_type, msg.reply_to = correlation_id, jms_type, reply
            msg.properties.update(props)
            if source is not None:
                producer.send_file(source, msg, **headers)
            else:
                producer.send(msg, **headers)
            activity.advance()
            if count < 1000:
                if transacted:
                    ids.append(str(msg.message_id))  # printed once the commit made them real
                else:
                    click.echo(msg.message_id)
        if transacted:
            session.commit()
            for mid in ids:
                click.echo(mid)
        if count >= 1000:
            click.echo(f"sent {count} messages to {dest.name}")


def _send_lines(ctx, dest, stream, priority, ttl, delay, non_persistent, correlation_id, jms_type, reply_to,
               properties, transacted, client_id, create) -> None:
    """send --lines: one TextMessage per line, each sent (and its id printed) as it is read."""
    from .message import TextMessage

    reply = Queue(reply_to) if reply_to else None
    props = [_parse_property(p) for p in properties]
    headers = dict(delivery_mode=DeliveryMode.NON_PERSISTENT if non_persistent else DeliveryMode.PERSISTENT,
                   priority=priority, time_to_live=ttl, delivery_delay=delay)
    ids: list[str] = []
    with _connect(ctx, client_id, create=create) as conn, _Activity(ctx, "sent", f"to {dest.name}", None) as activity:
        session = conn.create_session(transacted=transacted)
        producer = session.create_producer(dest)
        for number, raw in enumerate(stream, 1):
            line = raw.removesuffix(b"\n").removesuffix(b"\r")
            if not _is_utf8(line):
                raise click.UsageError(f"line {number} is not UTF-8 text: --lines sends TextMessages")
            msg = TextMessage(line)
            msg.correlation_id, msg.jms_type, msg.reply_to = correlation_id, jms_type, reply
            msg.properties.update(props)
            producer.send(msg, **headers)
            activity.advance()
            if transacted:
                ids.append(str(msg.message_id))  # printed once the commit made them real
            else:
                click.echo(msg.message_id)
                sys.stdout.flush()
        if transacted:
            session.commit()
            for mid in ids:
                click.echo(mid)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _Activity:
    """Progress on stderr while a run works, and a closing summary (count, elapsed, rate) —
    only when standard output is a terminal and --quiet is not given: scripts see none."""

    def __init__(self, ctx: click.Context, verb: str, where: str, total: int | None) -> None:
        self.verb, self.where, self.total = verb, where, total or None
        self.shown = not ctx.find_root().obj.get("quiet") and sys.stdout.isatty()
        self.done = 0
        self.started = time.perf_counter()
        self._progress: Any = None

    def __enter__(self) -> "_Activity":
        if self.shown and self.total != 1:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn(f"{self.verb.replace('sent', 'sending').replace('received', 'receiving')} "
                                  f"{escape(self.where)}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
            self._progress = Progress(*columns, console=err_console, transient=True)
            self._task = self._progress.add_task("", total=self.total)
            self._progress.start()
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self.shown and self.total != 1 and exc[0] is None:
            elapsed = time.perf_counter() - self.started
            rate = self.done / elapsed if elapsed > 0 else 0.0
            err_console.print(Text(f"{self.verb} {self.done} message(s) {self.where} in {elapsed:.2f} s "
                                   f"({rate:,.0f}/s)"), soft_wrap=True, highlight=False)


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v


def _message_json(msg, state: str = "processing", size: int | None = None) -> dict:
    """One message as --json prints it: id, destination, the state directory it was read
    in, body size, headers, properties, and 'text' (a TextMessage in UTF-8) or 'body_base64'."""
    import base64

    from .message import TextMessage

    d = {
        "id": msg.message_id, "destination": str(msg.destination) if msg.destination else None, "state": state,
        "size": len(msg.body) if size is None else size,
        "priority": msg.priority, "timestamp": msg.timestamp,
        "class": msg.class_letter, "expiration": msg.expiration, "correlation_id": msg.correlation_id,
        "reply_to": str(msg.reply_to) if msg.reply_to else None, "type": msg.jms_type,
        "redelivered": msg.redelivered, "delivery_count": msg.delivery_count,
        "delivery_mode": DeliveryMode(msg.delivery_mode).name,
        "properties": {k: _json_value(p.value) for k, p in msg.properties.items()},
    }
    if isinstance(msg, TextMessage) and _is_utf8(msg.body):
        d["text"] = msg.text
    else:
        d["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    return d


def _print_message(msg, as_json: bool, state: str = "processing") -> None:
    if as_json:
        click.echo(json.dumps(_message_json(msg, state), ensure_ascii=False, default=str))
    else:
        from .message import TextMessage

        text = isinstance(msg, TextMessage) and _is_utf8(msg.body)
        body = msg.text if text else msg.body.hex()
        flag = f" (delivery {msg.delivery_count})" if msg.redelivered else ""
        line = Text.assemble((msg.message_id, "bold"), f" p{msg.priority}{flag}: ", body)  # never markup
        console.print(line, highlight=False, soft_wrap=True)


def _check_selector(selector: str | None) -> None:
    """Parse the selector before touching the root, so a typo costs nothing."""
    from .selector import selector_for

    selector_for(selector)  # InvalidSelectorError: one line, exit 1


def _delimiter(ctx, param, value: str | None) -> bytes | None:
    """--delimiter: backslash escapes as in C (\\n, \\t, \\0, \\x1e)."""
    import codecs

    if value is None:
        return None
    try:
        return codecs.escape_decode(value.encode("utf-8", "surrogateescape"))[0]
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}") from None


def _consume_options(f):
    """The options `receive` and `subscribe` share: how many, how long, where the messages go."""
    for option in reversed([
        click.option("-n", "--count", default=None, type=click.IntRange(0),
                     help="Messages to take (0 = every message until none arrives within --timeout). "
                          "[default: 1; 0 with --follow]"),
        click.option("-t", "--timeout", default=0.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds to wait for each message (0 = do not wait)."),
        click.option("-f", "--follow", is_flag=True,
                     help="Keep waiting for messages, like tail -f, until stopped: Ctrl-C or SIGTERM ends the run "
                          "with exit 0 once the message at hand is done (see --grace)."),
        click.option("--ack-mode", type=click.Choice(list(ACK_MODES)), default=None,
                     help="auto (default): each message is acknowledged as it is received; dups-ok: lazily, in "
                          "batches; client / transacted: acknowledge / commit once after the last message.  "
                          "--exec and --output-dir acknowledge each message after its handling succeeded."),
        click.option("--json", "as_json", is_flag=True, help="One JSON object per line and message: id, "
                     "destination, state, size, headers, properties, and 'text' (UTF-8 text) or 'body_base64'."),
        click.option("--body", "raw_body", is_flag=True,
                     help="Write the raw bodies to standard output, nothing else (streamed, any size)."),
        click.option("--delimiter", callback=_delimiter, metavar="TEXT",
                     help="With --body: write TEXT after each body (C escapes: '\\n', '\\0'); default none."),
        click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Write each body to DIR/<message id without 'ID:'>, atomically (a dot-file renamed "
                          "when complete and synced), print the path, then acknowledge."),
        click.option("--exec", "command", metavar="CMD",
                     help="Run the shell command CMD once per message, the body on its standard input and "
                          "the headers and properties in its environment (JMSMessageID, JMSPriority, ..., "
                          "DROPBOXMQ_PROP_<name>); exit 0 acknowledges, anything else redelivers after a delay. "
                          "CMD runs in its own process group and never outlives this command."),
        click.option("--grace", type=click.FloatRange(0), default=30.0, show_default=True,
                     help="On SIGTERM or Ctrl-C, take no new message and give a running --exec this many seconds "
                          "to finish (then it is acknowledged as usual); past it, its process group is killed and "
                          "its message returned to the queue, redelivered.  A second signal ends the grace."),
        click.option("--max-deliveries", type=click.IntRange(1), default=None,
                     help="Deliveries before a message goes to error/ (dead letter) instead of back to the "
                          "queue [default: 10]."),
        click.option("--redelivery-delay", type=click.FloatRange(0), default=None,
                     help="Seconds before a message whose --exec failed is tried again; doubles with every "
                          "attempt up to 30 s (default 0.1)."),
        click.option("--client-id", help="Client id to register (default: generated)."),
    ]):
        f = option(f)
    return f


@dataclass
class _ConsumeRun:
    """What one `receive` / `subscribe` run does, from its options."""

    client_id: str | None
    count: int
    timeout: float
    nothing: str  # the line for "nothing arrived", e.g. "no message in orders"
    make_consumer: Callable[[Any], Any]
    grace: float
    max_deliveries: int | None
    create: bool = False

    def settings(self) -> Any:
        from .connection import Settings

        return None if self.max_deliveries is None else Settings(max_delivery_attempts=self.max_deliveries)


def _start_consuming(ctx, selector, count, timeout, follow, ack_mode, as_json, raw_body, delimiter, output_dir,
                     command, grace, max_deliveries, redelivery_delay, client_id, nothing, make_consumer,
                     create=False) -> None:
    """`receive` and `subscribe` after their own checks: validate the shared options, then run."""
    outputs = [flag for flag, given in (("--json", as_json), ("--body", raw_body),
                                        ("--output-dir", output_dir is not None), ("--exec", command is not None))
               if given]
    if len(outputs) > 1:
        raise click.UsageError(f"{' and '.join(outputs)} do not go together: pick one")
    if ack_mode is not None and (command is not None or output_dir is not None):
        raise click.UsageError(f"{outputs[0]} acknowledges each message after handling it: drop --ack-mode")
    if redelivery_delay is not None and command is None:
        raise click.UsageError("--redelivery-delay applies to --exec")
    if delimiter is not None and not raw_body:
        raise click.UsageError("--delimiter applies to --body")
    if follow and timeout:
        raise click.UsageError("--follow waits without end: drop --timeout")
    if follow:
        timeout = math.inf
    if count is None:
        count = 0 if follow else 1

    def make(session):
        consumer = make_consumer(session)
        if redelivery_delay is not None:
            consumer.redelivery_delay = redelivery_delay
        return consumer

    run = _ConsumeRun(client_id, count, timeout, nothing, make, grace, max_deliveries, create)
    if command is not None:
        _handle_each(ctx, run, lambda runner, max_deliveries: _exec_handler(command, runner, max_deliveries))
    elif output_dir is not None:
        os.makedirs(output_dir, exist_ok=True)
        _handle_each(ctx, run, lambda runner, max_deliveries: _directory_handler(output_dir))
    else:
        _consume(ctx, run, ack_mode or "auto", as_json, raw_body, delimiter or b"")


@main.command()
@click.argument("queue")
@click.option("--selector", help="JMS message selector, e.g. \"JMSPriority > 4 AND region = 'eu'\".")
@_consume_options
@click.option("--create", is_flag=True, help="Create the queue if it does not exist (otherwise an error).")
@click.pass_context
def receive(ctx, queue, selector, create, **options) -> None:
    """Receive (consume) messages from QUEUE in delivery order (priority, then send order)
    and print them, or hand each to a command or a directory.  Exit status 3 when no
    message arrived, except with -n 0 (drain: an already empty queue is success) or after
    a stop; 1 when --exec failed for a message on its last try (it went to error/) or was
    killed past --grace.  SIGTERM and Ctrl-C stop it cleanly: exit 0, nothing handled twice.

    \b
    Examples:
      dropboxmq receive orders --json
      dropboxmq receive orders -n 0 --selector "region = 'eu'" --ack-mode client
      dropboxmq receive orders --timeout 30      # wait up to 30 s
      dropboxmq receive orders --follow --exec ./handle --max-deliveries 3   # a worker, until stopped
      dropboxmq receive images --body > cat.png
      dropboxmq receive jobs -n 0 --exec 'import-order "$JMSMessageID"'
      dropboxmq receive uploads -n 0 --output-dir ./inbox
    """
    _check_selector(selector)
    dest = _known_queue(ctx, queue, create)
    _start_consuming(ctx, selector=selector, nothing=f"no message in {queue}",
                     make_consumer=lambda session: session.create_consumer(dest, selector), create=create,
                     **options)


def _known_queue(ctx: click.Context, name: str, create: bool) -> Queue:
    """The queue NAME; unless ``create``, it must exist already (a typo is an error with a
    did-you-mean, never a new queue)."""
    from . import codec, inventory, layout

    queue = Queue(name)
    if create or layout.queue_box(ctx.obj["root"], queue).exists() or codec.temporary_owner(name) is not None:
        return queue  # (a temporary queue's own rules, in the library, say why it is gone)
    root = require_root(ctx)
    known = [n for n, _ in inventory.all_dropboxes(root) if not n.startswith("topic:")]
    hint = did_you_mean(name, known)
    raise click.ClickException(f"no queue {name!r} under {root}{hint} (create it with 'dropboxmq init {name}' "
                               "or --create)")


def _receive_until(consumer, timeout: float, stop, streamed: bool):
    """consumer.receive(timeout), in short slices so that a stop request is seen at once."""
    deadline = None if math.isinf(timeout) else time.monotonic() + timeout
    while True:
        left = math.inf if deadline is None else max(0.0, deadline - time.monotonic())
        wait = min(0.2, left)
        got = consumer.receive_streamed(wait) if streamed else consumer.receive(wait)
        if got is not None or stop.requested or left <= wait:
            return got


def _consume(ctx, run: _ConsumeRun, ack_mode: str, as_json: bool, raw_body: bool, delimiter: bytes) -> None:
    """The receive loop shared by `receive` and `subscribe`: print each message (or its raw body)."""
    from .graceful import StopSignals

    mode = ACK_MODES[ack_mode]
    got = 0
    out = sys.stdout.buffer
    stop = StopSignals(run.grace)
    with stop, _connect(ctx, run.client_id, create=run.create, settings=run.settings()) as conn, \
            _Activity(ctx, "received", run.nothing.split()[-1], run.count) as activity:
        session = conn.create_session(transacted=mode == 0, ack_mode=mode or 1)
        consumer = run.make_consumer(session)
        while (run.count == 0 or got < run.count) and not stop.requested:
            if raw_body:
                delivered = _receive_until(consumer, run.timeout, stop, streamed=True)
                if delivered is None:
                    break
                with delivered[1] as body:
                    shutil.copyfileobj(body, out, 1 << 20)
                out.write(delimiter)
                out.flush()
            else:
                msg = _receive_until(consumer, run.timeout, stop, streamed=False)
                if msg is None:
                    break
                _print_message(msg, as_json)
                sys.stdout.flush()
            got += 1
            activity.advance()
        sys.stdout.flush()  # a closed pipe fails here, before commit/acknowledge: nothing is lost
        out.flush()
        if mode == 0:
            session.commit()
        elif mode == 2:
            session.acknowledge()
    if got == 0 and run.count != 0 and not stop.requested:
        if not as_json:
            err_console.print(Text(run.nothing), soft_wrap=True)
        sys.exit(3)


def _handle_each(ctx, run: _ConsumeRun, make_handler) -> None:
    """--exec / --output-dir: each message is acknowledged only once its handler succeeded; a
    failure puts it back, and this consumer tries it again after its redelivery delay (the
    JMS delivery count decides when it is dead-lettered instead).  A stop request (SIGTERM,
    Ctrl-C) takes no new message and lets the running handler finish within the grace."""
    from .graceful import HandlerRunner, StopSignals
    from .ackmode import CLIENT_ACKNOWLEDGE

    done = 0
    failing: set[str] = set()  # ids whose last try failed
    dead: list[str] = []  # ids that failed on their last delivery: dead letters
    killed: list[str] = []  # ids whose handler outlasted the grace
    stop = StopSignals(run.grace)
    runner = HandlerRunner(stop)
    try:
        with stop, _connect(ctx, run.client_id, create=run.create, settings=run.settings()) as conn, \
                _Activity(ctx, "handled", run.nothing.split()[-1], run.count) as activity:
            handle = make_handler(runner, conn.settings.max_delivery_attempts)
            session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
            consumer = run.make_consumer(session)
            while (run.count == 0 or done < run.count) and not stop.requested:
                retry = consumer.next_retry_in() if failing else None
                delivered = _receive_until(consumer, run.timeout if retry is None else max(run.timeout, retry),
                                           stop, streamed=True)
                if delivered is None:
                    if stop.requested:
                        break
                    if failing and consumer.next_retry_in() is not None:
                        continue  # a failed message is due again soon: wait for it
                    break
                msg, body = delivered
                if stop.requested:  # claimed as the stop came, never handled: back it goes
                    body.close()
                    session.recover()
                    break
                with body:
                    outcome = handle(msg, body)
                if outcome is None:  # killed past the grace
                    session.recover()
                    killed.append(msg.message_id)
                    break
                if outcome:
                    session.acknowledge()
                    failing.discard(msg.message_id)
                    done += 1
                    activity.advance()
                elif msg.delivery_count >= conn.settings.max_delivery_attempts:
                    session.recover()  # without a delay: the next claim dead-letters it at once
                    dead.append(msg.message_id)
                    failing.discard(msg.message_id)
                else:
                    session.recover(back_off=True)
                    failing.add(msg.message_id)
    finally:
        runner.close()
    if killed:
        _fail(f"--exec for {killed[0]} outlasted --grace {run.grace:g} s: killed; the message is back in the "
              "queue, redelivered")
    if dead:
        _fail(f"dead-lettered to error/ after their last delivery: {', '.join(dead)} (see 'dropboxmq browse "
              f"{run.nothing.split()[-1]} --state error', 'dropboxmq redrive')")
    if failing and not stop.requested:
        _fail(f"{len(failing)} message(s) not handled, back in the queue for a later run: {', '.join(sorted(failing))}")
    if done == 0 and run.count != 0 and not stop.requested:
        err_console.print(Text(run.nothing), soft_wrap=True)
        sys.exit(3)


def message_environment(msg) -> dict[str, str]:
    """A message's headers (by their JMS names) and properties (DROPBOXMQ_PROP_<name>) as
    environment variables for --exec handlers."""
    def text(value) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    env = {
        "JMSMessageID": msg.message_id, "JMSDestination": str(msg.destination), "JMSPriority": str(msg.priority),
        "JMSTimestamp": str(msg.timestamp), "JMSExpiration": str(msg.expiration),
        "JMSDeliveryMode": DeliveryMode(msg.delivery_mode).name, "JMSRedelivered": text(msg.redelivered),
        "JMSXDeliveryCount": str(msg.delivery_count), "DROPBOXMQ_MESSAGE_CLASS": type(msg).__name__,
        "JMSCorrelationID": msg.correlation_id or "", "JMSType": msg.jms_type or "",
        "JMSReplyTo": str(msg.reply_to) if msg.reply_to else "",
    }
    for name, prop in msg.properties.items():
        env[f"DROPBOXMQ_PROP_{name}"] = text(prop.value)
    return env


def _exec_handler(command: str, runner, max_deliveries: int):
    def run(msg, body) -> bool | None:
        sys.stdout.flush()  # the handler writes to the same standard output
        env = {**os.environ, **message_environment(msg)}
        status = runner.run(command, body, env)
        if status is None:
            return None
        if status != 0:
            last = msg.delivery_count >= max_deliveries
            what = "no retries left: it goes to error/" if last else "it will be redelivered"
            err_console.print(Text(f"--exec exited with status {status} for {msg.message_id} (delivery "
                                   f"{msg.delivery_count} of {max_deliveries}): {what}"), soft_wrap=True)
        return status == 0
    return run


def _output_file_name(message_id: str) -> str:
    """The file --output-dir writes a message to: its id without ``ID:``, escaped as a name
    field is (``/`` -> ``%2F``, ``.`` -> ``%2E``) when that id is no plain file name -- a path
    separator, ``..``, a leading dot -- so a dropped file can never write outside DIR."""
    from . import codec

    name = message_id.removeprefix("ID:")
    if not name or name.startswith(".") or "/" in name or "\0" in name:
        return codec.encode_field(name) or "%00"
    return name


def _partial_file_name(name: str) -> str:
    """The hidden name --output-dir writes ``name`` under before its rename: ``.<name>.part``, or,
    when that would pass 255 bytes (an id of 250 bytes or more is legal, N-3/N-8), a digest of
    ``name`` -- the same for every try of one message, so a retry overwrites what a crash left."""
    import hashlib

    from . import codec

    partial = f".{name}.part"
    if len(os.fsencode(partial)) <= codec.MAX_NAME_BYTES:
        return partial
    return f".{hashlib.sha256(os.fsencode(name)).hexdigest()[:32]}.part"


def _directory_handler(directory: Path):
    def write(msg, body) -> bool:
        name = _output_file_name(msg.message_id)
        final, partial = directory / name, directory / _partial_file_name(name)
        try:
            with open(partial, "wb") as out:
                shutil.copyfileobj(body, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, final)  # a redelivery after a crash rewrites the same file
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # the name is durable before the message is acknowledged
        finally:
            os.close(fd)
        click.echo(str(final))
        return True
    return write


@main.command()
@click.argument("topic")
@click.option("--durable", "durable_name", metavar="NAME",
              help="A durable subscription called NAME: keeps messages while nobody listens "
                   "(unshared durable subscriptions need --client-id).")
@click.option("--shared", is_flag=True, help="Share the subscription: consumers compete, each message "
              "goes to one of them.  Needs --durable NAME or --name NAME.")
@click.option("--name", "shared_name", metavar="NAME", help="Name of a shared non-durable subscription.")
@click.option("--selector", help="JMS message selector, applied when messages are published.")
@click.option("--no-local", is_flag=True, help="Skip messages published with the same client id.")
@_consume_options
@click.pass_context
def subscribe(ctx, topic, durable_name, shared, shared_name, selector, no_local, **options) -> None:
    """Subscribe to TOPIC and print the messages received, or hand each to a command or a
    directory (--exec, --body, --output-dir: as for receive).  Exit status 3 when none
    arrived.  A non-durable subscription only sees what is published while it waits.

    \b
    Examples:
      dropboxmq subscribe news.sport --durable scores --client-id board -n 0
      dropboxmq subscribe jobs --shared --durable workers --follow --exec ./work
      dropboxmq subscribe news --selector "team = 'red'" --timeout 60
    """
    from .message import Topic

    dest = Topic(topic)
    _check_selector(selector)
    if shared and not (durable_name or shared_name):
        raise click.UsageError("--shared needs --durable NAME or --name NAME")
    if shared_name and not shared:
        raise click.UsageError("--name names a shared subscription: add --shared")
    if shared and no_local:
        raise click.UsageError("shared subscriptions have no --no-local (JMS 2.0)")
    if durable_name and not shared and not options["client_id"]:
        raise click.UsageError("an unshared durable subscription needs --client-id")

    def make(session):
        if shared and durable_name:
            return session.create_shared_durable_consumer(dest, durable_name, selector)
        if shared:
            return session.create_shared_consumer(dest, shared_name, selector)
        if durable_name:
            return session.create_durable_consumer(dest, durable_name, selector, no_local)
        return session.create_consumer(dest, selector, no_local)

    _start_consuming(ctx, selector=selector, nothing=f"no message on {topic}", make_consumer=make, **options)


@main.command()
@click.argument("name")
@click.option("--client-id", help="The client id the durable subscription was made with.")
@click.pass_context
def unsubscribe(ctx, name, client_id) -> None:
    """Remove the durable subscription NAME (shared or not) and its messages.
    Fails while it has an active consumer."""
    require_root(ctx)
    with _connect(ctx, client_id) as conn:
        conn.create_session().unsubscribe(name)
    click.echo(f"unsubscribed {name}")


@main.command()
@click.option("--follow", is_flag=True, help="Keep distributing until interrupted (Ctrl-C).")
@click.option("--client-id", help="Client id of this distributor (default: generated).")
@click.pass_context
def distribute(ctx, follow, client_id) -> None:
    """Fan out files that other programs dropped into a topic's .incoming/target/ to
    every matching subscription, each exactly once (several distributors may run)."""
    from .distributor import distribute as run_distributor

    root = require_root(ctx)

    def show(topic, name, copies):
        click.echo(f"{topic.name}: {name} -> {copies} subscription(s)")

    try:
        total = run_distributor(root, follow=follow, client_id=client_id, on_file=show)
    except KeyboardInterrupt:
        return
    click.echo(f"distributed {total} file(s)")


@main.command()
@click.argument("queue")
@click.option("--state", default="target", show_default=True, type=click.Choice(list(STATE_DIRS)),
              help="Which state directory to show: target (waiting), processing (in flight), processed, "
                   "expired, error (dead letters), working (not yet sent).")
@click.option("--selector", help="Only messages matching this JMS selector.")
@click.option("-n", "--limit", type=click.IntRange(0), default=0, help="Show at most this many (0 = all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line and message (as receive --json, "
              "with the state it is in).")
@click.pass_context
def browse(ctx, queue, state, selector, limit, as_json) -> None:
    """Show QUEUE's messages in one state directory in delivery order (priority, then send
    order), moving nothing.  In target/ (the default), expired and delayed messages are not
    shown; --state error lists the dead letters (send them back with 'dropboxmq redrive').

    \b
    Examples:
      dropboxmq browse orders --json | jq .text
      dropboxmq browse orders --state error          # dead letters, with their delivery counts
    """
    from . import layout
    from .operations import messages_in
    from .selector import selector_for

    _check_selector(selector)
    dest = _known_queue(ctx, queue, create=False)
    if state != State.NEW.value:
        matches = selector_for(selector)
        box = layout.queue_box(require_root(ctx), dest)
        shown = 0
        for stored in messages_in(box, State(state)):
            if limit and shown >= limit:
                break
            if matches is not None and not matches.matches(stored.message):
                continue
            stored.message.destination = dest
            _print_message(stored.message, as_json, state)
            shown += 1
        return
    with _connect(ctx) as conn:
        browser = conn.create_session().create_browser(dest, selector)
        for i, msg in enumerate(browser):
            if limit and i >= limit:
                break
            _print_message(msg, as_json, state)


@main.command()
@click.argument("queue")
@click.option("-n", "--limit", type=click.IntRange(0), default=0, help="Redrive at most this many, oldest "
              "first (0 = all).")
@click.pass_context
def redrive(ctx, queue, limit) -> None:
    """Send QUEUE's dead letters (error/) back to the queue to be consumed again: the same
    message id, class, headers, properties and body, the delivery count starting over
    (as SQS's redrive and RabbitMQ's shovel do).  Prints each message id.

    \b
    Examples:
      dropboxmq browse orders --state error      # look first
      dropboxmq redrive orders --limit 10
    """
    from . import layout
    from .operations import redrive as redrive_box

    root = require_root(ctx)
    box = layout.queue_box(root, _known_queue(ctx, queue, create=False))
    done = 0
    for msg in redrive_box(root, box, queue, limit):
        click.echo(f"{msg.message_id} redriven to {queue}")
        done += 1
    err_console.print(Text(f"redrove {done} dead letter(s) to {queue}"), soft_wrap=True, highlight=False)


STAT_FORMATS = ("table", "json", "prometheus")


@main.command()
@click.argument("destinations", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(STAT_FORMATS), default="table", show_default=True,
              help="table; json: {\"time\": ..., \"destinations\": {name: {state directory: count, ..., "
                   "oldest_age_seconds}}} (with --watch, one such line per refresh, plus *_growth); prometheus: "
                   "the node_exporter textfile-collector format, gauges and counters.")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C, with the growth of "
              "error/ and expired/ since the start (json: one line per refresh).")
@click.option("--interval", type=click.FloatRange(0.01), default=2.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--times", type=click.IntRange(0), default=0, help="With --watch: stop after this many refreshes "
              "(0 = until Ctrl-C).")
@click.pass_context
def stat(ctx, destinations, fmt, as_json, watch, interval, times) -> None:
    """Count the messages in each state of the named DESTINATIONS (queues, or topic:NAME!SUB
    as listed), or of every destination under the root, with the age of the oldest waiting
    message (target/).

    \b
    Examples:
      dropboxmq stat
      dropboxmq stat orders invoices --json | jq '.destinations.orders.target'
      dropboxmq stat --watch --interval 5
      dropboxmq stat --format prometheus > /var/lib/node_exporter/dropboxmq.prom.tmp && \
        mv /var/lib/node_exporter/dropboxmq.prom.tmp /var/lib/node_exporter/dropboxmq.prom
    """
    root = require_root(ctx)
    fmt = "json" if as_json else fmt
    if destinations:
        known = [name for name, _ in _all_dropboxes(root)]
        for name in destinations:
            if name not in known:
                raise click.UsageError(f"no destination {name!r} under {root}{did_you_mean(name, known)}")

    def queue_stats(root: Path) -> dict[str, dict[str, Any]]:
        return _queue_stats(root, destinations)

    if not watch:
        _show_stat(root, fmt, queue_stats(root), None)
        return
    first = queue_stats(root)
    refreshes = 0
    try:
        if fmt == "table" and console.is_terminal:
            from rich.live import Live

            with Live(_stat_table(root, first, first), console=console, auto_refresh=False) as live:
                while not times or refreshes < times - 1:
                    time.sleep(interval)
                    live.update(_stat_table(root, queue_stats(root), first), refresh=True)
                    refreshes += 1
            return
        current = first
        while True:
            _show_stat(root, fmt, current, first)
            sys.stdout.flush()
            refreshes += 1
            if times and refreshes >= times:
                return
            time.sleep(interval)
            current = queue_stats(root)
    except KeyboardInterrupt:
        return


def _all_dropboxes(root: Path):
    from . import inventory

    return inventory.all_dropboxes(root)


def queue_stats(root: Path) -> dict[str, dict[str, Any]]:
    """destination -> {state directory: count, ..., "oldest_age_seconds": age of the oldest
    file in target/ (seconds since it was written), or None when target/ is empty}."""
    return _queue_stats(root, ())


def _queue_stats(root: Path, only: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    now = time.time()
    stats: dict[str, dict[str, Any]] = {}
    for name, box in _all_dropboxes(root):
        if only and name not in only:
            continue
        row: dict[str, Any] = {d: len(box.list(State(d))) for d in STATE_DIRS}
        row["oldest_age_seconds"] = _oldest_age(box.dir(State.NEW), now)
        stats[name] = row
    return stats


def _oldest_age(directory: str, now: float) -> float | None:
    oldest = None
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue  # claimed meanwhile
                oldest = mtime if oldest is None else min(oldest, mtime)
    except FileNotFoundError:
        return None
    return None if oldest is None else round(max(0.0, now - oldest), 3)


def stat_growth(current: dict[str, dict[str, Any]], first: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How many more files error/ and expired/ hold than at the start of a watch."""
    return {name: {f"{d}_growth": row[d] - first.get(name, {}).get(d, 0) for d in ("error", "expired")}
            for name, row in current.items()}


#: counter name -> (help, the state directories whose files and removals it adds up)
PROMETHEUS_COUNTERS = {
    "dropboxmq_messages_sent_total": ("Messages ever sent (now in target/ or later, or removed from there).",
                                      ("target", "processing", "processed", "expired", "error")),
    "dropboxmq_messages_acknowledged_total": ("Messages ever acknowledged (processed/, pruned included).",
                                              ("processed",)),
    "dropboxmq_messages_expired_total": ("Messages ever expired (expired/, pruned included).", ("expired",)),
    "dropboxmq_messages_dead_lettered_total": ("Messages ever dead-lettered (error/, pruned or redriven "
                                               "included).", ("error",)),
}


def prometheus_text(stats: dict[str, dict[str, Any]], removed: dict[str, dict[str, int]] | None = None) -> str:
    """The textfile-collector format: gauges per destination (and state directory), and
    counters that stay monotonic when prune removes files (``removed``: what was ever removed
    from each state directory, operations.removed_totals)."""
    def label(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    lines = ["# HELP dropboxmq_messages Messages in each state directory of a destination.",
             "# TYPE dropboxmq_messages gauge"]
    for name, row in stats.items():
        for d in STATE_DIRS:
            lines.append(f'dropboxmq_messages{{destination="{label(name)}",state="{d}"}} {row[d]}')
    lines += ["# HELP dropboxmq_oldest_message_age_seconds Age of the oldest message waiting in target/ "
              "(0 when none waits).", "# TYPE dropboxmq_oldest_message_age_seconds gauge"]
    for name, row in stats.items():
        lines.append(f'dropboxmq_oldest_message_age_seconds{{destination="{label(name)}"}} '
                     f'{row["oldest_age_seconds"] or 0}')
    removed = removed or {}
    for metric, (text, states) in PROMETHEUS_COUNTERS.items():
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter"]
        for name, row in stats.items():
            gone = removed.get(name, {})
            total = sum(row[d] + gone.get(d, 0) for d in states)
            lines.append(f'{metric}{{destination="{label(name)}"}} {total}')
    return "\n".join(lines) + "\n"


def _show_stat(root: Path, fmt: str, stats: dict[str, dict[str, Any]], first: dict[str, dict[str, Any]] | None) -> None:
    if fmt == "json":  # one shape, watched or not
        if first is not None:
            growth = stat_growth(stats, first)
            stats = {name: {**row, **growth[name]} for name, row in stats.items()}
        click.echo(json.dumps({"time": round(time.time(), 3), "destinations": stats}))
    elif fmt == "prometheus":
        from .operations import removed_totals

        click.echo(prometheus_text(stats, removed_totals(root)), nl=False)
    else:
        # piped: as wide as the table needs (a terminal's width is the terminal's)
        table = _stat_table(root, stats, first)
        if console.is_terminal:
            console.print(table)
        else:
            Console(width=10_000).print(table)


def _age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _stat_table(root: Path, stats: dict[str, dict[str, Any]], first: dict[str, dict[str, Any]] | None) -> Table:
    table = Table(title=Text(f"dropboxes under {root}"),
                  caption="states: " + ", ".join(f"{d}={State(d).name}" for d in STATE_DIRS))
    table.add_column("destination", no_wrap=True)
    for d in STATE_DIRS:
        table.add_column(d, justify="right", no_wrap=True)
    table.add_column("oldest", justify="right", no_wrap=True)  # age of the oldest waiting message
    growth = stat_growth(stats, first) if first is not None else {}
    for name, row in stats.items():
        cells = [str(row[d]) for d in STATE_DIRS]
        for d in ("expired", "error"):
            added = growth.get(name, {}).get(f"{d}_growth", 0)
            if added:
                cells[STATE_DIRS.index(d)] += f" (+{added})"
        table.add_row(Text(name), *cells, _age_text(row["oldest_age_seconds"]))
    if not stats:
        table.add_row(Text("(none: dropboxmq init QUEUE)", style="dim"), *("" for _ in range(len(STATE_DIRS) + 1)))
    return table


@main.command()
@click.option("--orphan-age", default=3600.0, show_default=True, type=click.FloatRange(0),
              help="Seconds after which a working/ file with no live owner is an orphan.")
@click.option("--discard-orphans", is_flag=True, help="Delete orphans instead of quarantining them to error/.")
@click.option("--assume-unknown-dead", is_flag=True,
              help="Also reclaim processing/ entries of clients never registered here (1.2, scripts).")
@click.option("--release", "release", multiple=True, metavar="CLIENT",
              help="CLIENT (e.g. a Spark query's spark-<hash>) is gone for good: drop its checkpoint "
                   "hold so its claims are redelivered like any dead owner's. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_context
def recover(ctx, orphan_age, discard_orphans, assume_unknown_dead, release, as_json) -> None:
    """Recover after crashes: finish dead owners' transactions (roll forward or back),
    redeliver their in-flight messages, quarantine orphaned working/ files and expire
    overdue messages.  Prints what it did (--json: a JSON report); exit status 1 if
    anything could not be fixed.
    Safe to run at any time: live clients, and clients whose claims a still existing
    checkpoint holds (Spark queries), are never touched."""
    from .liveness import release_hold
    from .recovery import recover as run_recovery

    root = require_root(ctx)
    for client in release:
        if not release_hold(root, client):
            raise click.UsageError(f"--release {client}: no checkpoint hold for that client id")
    report = run_recovery(root, orphan_age=orphan_age, quarantine_orphans=not discard_orphans,
                          assume_unknown_dead=assume_unknown_dead)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        _print_recovery(report.as_dict())
    if report.errors:
        sys.exit(1)


def _print_recovery(report: dict[str, Any]) -> None:
    """The recovery report for people: one line per kind of work done, then each error."""
    done = [f"{len(v) if isinstance(v, (list, dict)) else v} {k.replace('_', ' ')}" for k, v in report.items()
            if k not in ("errors", "transactions") and v]
    done += [f"{n} transaction(s) {how}" for how, n in report["transactions"].items() if n]
    click.echo("recovered: " + (", ".join(done) if done else "nothing to do"))
    for error in report["errors"]:
        click.echo(f"could not fix: {error}")


@main.command()
@click.argument("queue")
@click.option("--state", "states", multiple=True, default=["target"], show_default=True,
              type=click.Choice(["target", "processed", "expired", "error"]),
              help="Which directory to empty (repeatable).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def purge(ctx, queue, states, yes) -> None:
    """Delete QUEUE's messages in the given states (default: the waiting ones in target/).
    Asks first unless --yes.  Messages being processed (processing/) are never purged."""
    from . import layout
    from .lifecycle import Move

    from .operations import record_removed

    box = layout.queue_box(ctx.obj["root"], _known_queue(ctx, queue, create=False))
    if not yes:
        question = f"delete every message of {queue} in {', '.join(states)}?"
        if sys.stdin.isatty():
            click.confirm(question, abort=True)
        else:  # a script: an answer on standard input, or --yes; no prompt left hanging
            answer = sys.stdin.readline()
            if not answer:
                raise click.UsageError("purge deletes messages: confirm with --yes (no answer on standard input)")
            if answer.strip().lower() not in ("y", "yes"):
                _fail(f"not confirmed ({answer.strip()!r}): nothing purged")
    removed = 0
    per_state: dict[str, int] = {}
    for d in states:
        st = State(d)
        for name in box.list(st):
            try:
                regular = stat_module.S_ISREG(os.lstat(box.file(st, name)).st_mode)
            except FileNotFoundError:
                continue  # taken meanwhile
            if regular and box.move(Move.PURGE, st, name):  # (no message, e.g. a directory: left alone)
                removed += 1
                per_state[d] = per_state.get(d, 0) + 1
    record_removed(ctx.obj["root"], queue, per_state)
    click.echo(f"purged {removed} messages from {queue}")


def _states_list(ctx, param, value: str) -> list[str]:
    from .retention import TERMINAL

    states = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in states if v not in TERMINAL]
    if bad or not states:
        raise click.BadParameter(f"{value!r}: a comma-separated list of {', '.join(TERMINAL)}")
    return states


def _age(ctx, param, value: str) -> float:
    from .retention import parse_age

    try:
        return parse_age(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command()
@click.argument("queues", nargs=-1)
@click.option("--older-than", "older_than", required=True, callback=_age, metavar="AGE",
              help="Delete messages that entered their state more than AGE ago: 90s, 15m, 12h, 7d, 2w.")
@click.option("--state", "states", default="processed,expired", show_default=True, callback=_states_list,
              help="Comma-separated terminal states to prune: processed, expired, error.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.pass_context
def prune(ctx, queues, older_than, states, dry_run) -> None:
    """Retention: delete old messages from the terminal states (processed/, expired/,
    error/) of the named QUEUES, or of every queue and subscription.  Safe while producers
    and consumers run: messages never leave a terminal state, so only finished messages
    are deleted.  Consumers can do the same as they go (Settings.retention).

    \b
    Examples:
      dropboxmq prune --older-than 7d
      dropboxmq prune orders --older-than 30d --state error --dry-run
    """
    from . import inventory, layout
    from .retention import PruneResult, prune as prune_box

    root = require_root(ctx)
    boxes = [(q, layout.queue_box(root, _known_queue(ctx, q, create=False))) for q in queues] \
        or list(inventory.all_dropboxes(root))
    total = PruneResult()
    for name, box in boxes:
        done = prune_box(box, states, older_than, dry_run, root=root)
        if done.matched:
            verb = "would delete" if dry_run else "deleted"
            click.echo(f"{name}: {verb} {done.matched if dry_run else done.removed} "
                       f"({', '.join(f'{d} {n}' for d, n in done.per_state.items())})")
        total.matched += done.matched
        total.removed += done.removed
        total.bytes += done.bytes
    if dry_run:
        click.echo(f"would delete {total.matched} message(s), {total.bytes:,} bytes (dry run)")
    else:
        click.echo(f"deleted {total.removed} message(s), {total.bytes:,} bytes")


# ---------------------------------------------------------------- doctor (issue 28)


@main.command()
@click.argument("directory", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--other", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="MOUNT",
              help="The same root seen through another mount (another host's view): probe across the two.")
@click.option("--trials", default=300, show_default=True, type=click.IntRange(1),
              help="Races per property (rename, link, O_EXCL); a broken property stops its races early.")
@click.option("--timeout", "visibility_timeout", default=30.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds to wait for a file made through one mount to show through the other.")
@click.option("--no-record", is_flag=True, help="Do not keep the verdict in the root (.dropboxmq-doctor.json).")
@click.option("--json", "as_json", is_flag=True, help="Print the probes and the verdict as one JSON object.")
@click.pass_context
def doctor(ctx, directory, other, trials, visibility_timeout, no_record, as_json) -> None:
    """Qualify the file system of a root (DIRECTORY, else --root) before trusting it.

    Races renames, link() and O_CREAT|O_EXCL (one process per mount), checks
    renameat2(RENAME_NOREPLACE), flock and fcntl locks across the mounts, how soon a
    new file shows on the other mount, the mtime clock and resolution, and fsync, in a
    scratch directory it removes.  Give --other with a second mount of the same root
    (e.g. the NFS/sshfs/MooseFS mount of another host, here) to probe across hosts.
    The verdict is kept in the root: the library then refuses an unsafe root with its
    reason and opens a qualified network root without --allow-network-fs.

    \b
    Exit status:
      0  supported              every property holds
      3  supported with leases  claims are safe; locks do not cross hosts (liveness by leases)
      4  unsafe                 a claim or create is not exclusive, files do not show, fsync fails
      1  the probes could not run (the message says why); 2  bad usage
    """
    from dataclasses import asdict

    from . import doctor as doc

    root = Path(directory) if directory is not None else ctx.find_root().obj["root"]
    if not root.is_dir():
        _fail(f"{root}: no such directory (give DIRECTORY or --root)")
    show = not as_json and not ctx.find_root().obj["quiet"] and sys.stderr.isatty()
    try:
        probes = doc.probe(root, other, trials=trials, visibility_timeout=visibility_timeout,
                           progress=(lambda m: click.echo(f"  probing: {m}", err=True)) if show else None)
    except OSError as e:
        _fail(f"doctor {root}: the probes could not run: {e}")
    verdict = doc.judge(probes)
    if not no_record:
        try:
            doc.record(root, probes, verdict)
        except OSError as e:
            _fail(f"doctor {root}: cannot record the verdict: {e}")
    if as_json:
        click.echo(json.dumps({"root": str(root), "other": str(other) if other else None, "verdict": verdict.level,
                               "reasons": list(verdict.reasons), "notes": list(verdict.notes),
                               "probes": asdict(probes)}))
    else:
        across = f" and {other}" if other else ""
        click.echo(f"{root}{across} ({probes.fs_type}): {verdict.level}")
        for reason in verdict.reasons:
            click.echo(f"  - {reason}")
        for note in verdict.notes:
            click.echo(f"  note: {note}")
    sys.exit(doc.EXIT_CODES[verdict.level])


if __name__ == "__main__":
    main()
