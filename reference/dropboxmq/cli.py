"""The ``dropboxmq`` command line.  Errors are one clear line and a non-zero exit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from . import __version__
from .errors import DropboxMQError
from .lifecycle import STATE_DIRS, State
from .message import DeliveryMode, Queue

console = Console()
err_console = Console(stderr=True)

DEFAULT_ROOT = "./var/dropbox"
ACK_MODES = {"auto": 1, "client": 2, "dups-ok": 3, "transacted": 0}


class _Group(click.Group):
    """Turns our own errors (bad names, full disks, ...) into one line and exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (DropboxMQError, ValueError, OSError) as exc:
            if isinstance(exc, click.ClickException):
                raise
            err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="DROPBOXMQ_ROOT",
    default=DEFAULT_ROOT,
    show_default="$DROPBOXMQ_ROOT, else ./var/dropbox",
    help="The dropbox root: the directory that holds every queue and topic.",
)
@click.option("--allow-network-fs", is_flag=True, help="Use a root on NFS/SMB anyway (weaker rename guarantees).")
@click.version_option(__version__, prog_name="dropboxmq")
@click.pass_context
def main(ctx: click.Context, root: Path, allow_network_fs: bool) -> None:
    """dropboxmq: JMS-style guaranteed messaging whose only broker is a directory tree.

    A message is a file; its state is the directory holding it
    (working/ target/ processing/ processed/ expired/ error/); every state
    change is one atomic rename.  Files are compatible with DropboxMQ 1.2.
    """
    ctx.obj = {"root": root, "allow_network_fs": allow_network_fs}


def _connect(ctx: click.Context, client_id: str | None = None):
    from .session import Connection

    return Connection(ctx.obj["root"], client_id, allow_network_fs=ctx.obj["allow_network_fs"])


_PROPERTY_TYPES = {"boolean": lambda v: v.lower() == "true", "byte": int, "short": int, "int": int,
                   "long": int, "float": float, "double": float, "string": str}


def _parse_property(text: str):
    """NAME=VALUE[:TYPE] with TYPE one of boolean byte short int long float double string."""
    from .message import Property

    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r}: expected NAME=VALUE[:TYPE]", param_hint="--property")
    value, colon, type_ = rest.rpartition(":")
    if not colon or type_ not in _PROPERTY_TYPES:
        value, type_ = rest, "string"
    try:
        return name, Property.of(_PROPERTY_TYPES[type_](value), type_)
    except (ValueError, DropboxMQError) as exc:
        raise click.BadParameter(f"{text!r}: {exc}", param_hint="--property") from None


@main.command()
@click.argument("queues", nargs=-1, required=True)
@click.pass_context
def init(ctx: click.Context, queues: tuple[str, ...]) -> None:
    """Create the root layout and the named QUEUES (each with its six state directories)."""
    from . import layout
    from .transaction import ensure_layout

    root = ctx.obj["root"]
    os.makedirs(root, exist_ok=True)
    ensure_layout(root)
    for q in queues:
        box = layout.queue_box(root, Queue(q)).ensure()
        console.print(f"created {box.path}", highlight=False)


@main.command()
@click.argument("queue")
@click.argument("body", required=False)
@click.option("-f", "--file", "body_file", type=click.File("rb"), help="Read the body from a file ('-' = stdin).")
@click.option("-n", "--count", default=1, show_default=True, type=click.IntRange(1), help="Send the body this many times.")
@click.option("--bytes", "as_bytes", is_flag=True, help="Send a BytesMessage (default: TextMessage).")
@click.option("-p", "--priority", default=4, show_default=True, type=click.IntRange(0, 9))
@click.option("--ttl", type=click.FloatRange(0), default=0, help="Time to live in seconds (0 = never expires).")
@click.option("--delay", type=click.FloatRange(0), default=0, help="Delivery delay in seconds.")
@click.option("--non-persistent", is_flag=True, help="Skip the fsyncs (faster; may be lost in a crash).")
@click.option("--correlation-id")
@click.option("--type", "jms_type", help="JMSType header.")
@click.option("--reply-to", help="Queue name for JMSReplyTo.")
@click.option("--property", "properties", multiple=True, metavar="NAME=VALUE[:TYPE]",
              help="A message property; TYPE: boolean byte short int long float double string (default).")
@click.option("--transacted", is_flag=True, help="Send all COUNT messages in one transaction (all or nothing).")
@click.option("--client-id", help="Client id to register (default: generated).")
@click.pass_context
def send(ctx, queue, body, body_file, count, as_bytes, priority, ttl, delay, non_persistent, correlation_id,
         jms_type, reply_to, properties, transacted, client_id) -> None:
    """Send a message (BODY, --file, or stdin when neither is given) to QUEUE; prints message ids."""
    from rich.progress import track

    from .message import BytesMessage, TextMessage

    if body is not None and body_file is not None:
        raise click.UsageError("give BODY or --file, not both")
    data = body.encode("utf-8") if body is not None else (body_file or click.get_binary_stream("stdin")).read()
    props = [_parse_property(p) for p in properties]
    dest = Queue(queue)
    with _connect(ctx, client_id) as conn:
        session = conn.create_session(transacted=transacted)
        producer = session.create_producer(dest)
        items = range(count)
        if count >= 1000:
            items = track(items, description=f"sending to {queue}", console=err_console)
        for _ in items:
            if as_bytes:
                msg = BytesMessage(body=data)
            else:
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    raise click.UsageError("body is not UTF-8 text: use --bytes") from None
                msg = TextMessage(body=data)
            msg.correlation_id, msg.jms_type = correlation_id, jms_type
            msg.reply_to = Queue(reply_to) if reply_to else None
            for name, prop in props:
                msg.properties[name] = prop
            producer.send(msg, delivery_mode=DeliveryMode.NON_PERSISTENT if non_persistent else DeliveryMode.PERSISTENT,
                          priority=priority, time_to_live=ttl, delivery_delay=delay)
            if count < 1000:
                console.print(msg.message_id, highlight=False)
        if transacted:
            session.commit()
        if count >= 1000:
            console.print(f"sent {count} messages to {queue}", highlight=False)


def _message_json(msg) -> dict:
    from .message import TextMessage

    d = {
        "id": msg.message_id, "priority": msg.priority, "timestamp": msg.timestamp,
        "class": msg.class_letter, "expiration": msg.expiration, "correlation_id": msg.correlation_id,
        "reply_to": str(msg.reply_to) if msg.reply_to else None, "type": msg.jms_type,
        "redelivered": msg.redelivered, "delivery_count": msg.delivery_count,
        "delivery_mode": DeliveryMode(msg.delivery_mode).name,
        "properties": {k: p.value if not isinstance(p.value, float) or p.value == p.value else "NaN"
                       for k, p in msg.properties.items()},
    }
    if isinstance(msg, TextMessage):
        try:
            d["text"] = msg.text
        except UnicodeDecodeError:
            d["body_hex"] = msg.body.hex()
    else:
        d["body_hex"] = msg.body.hex()
    return d


def _print_message(msg, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_message_json(msg), ensure_ascii=False, default=str))
    else:
        d = _message_json(msg)
        body = d.get("text", d.get("body_hex"))
        flag = " (redelivered)" if msg.redelivered else ""
        console.print(f"[bold]{msg.message_id}[/bold] p{msg.priority}{flag}: {body}", highlight=False)


@main.command()
@click.argument("queue")
@click.option("-n", "--count", default=1, show_default=True, type=click.IntRange(0),
              help="Messages to receive (0 = until the queue stays empty for --timeout).")
@click.option("-t", "--timeout", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds to wait for each message.")
@click.option("--selector", help="JMS message selector, e.g. \"JMSPriority > 4 AND region = 'eu'\".")
@click.option("--ack-mode", type=click.Choice(list(ACK_MODES)), default="auto", show_default=True,
              help="client/transacted: acknowledge/commit once after the last message.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@click.option("--client-id", help="Client id to register (default: generated).")
@click.pass_context
def receive(ctx, queue, count, timeout, selector, ack_mode, as_json, client_id) -> None:
    """Receive (consume) messages from QUEUE.  Exit status 3 when none arrived."""
    mode = ACK_MODES[ack_mode]
    got = 0
    with _connect(ctx, client_id) as conn:
        session = conn.create_session(transacted=mode == 0, ack_mode=mode or 1)
        consumer = session.create_consumer(Queue(queue), selector)
        while count == 0 or got < count:
            msg = consumer.receive(timeout)
            if msg is None:
                break
            _print_message(msg, as_json)
            got += 1
        if mode == 0:
            session.commit()
        elif mode == 2:
            session.acknowledge()
    if got == 0:
        if not as_json:
            err_console.print(f"no message in {queue}", highlight=False)
        sys.exit(3)


@main.command()
@click.argument("queue")
@click.option("--selector", help="Only messages matching this JMS selector.")
@click.option("-n", "--limit", type=click.IntRange(0), default=0, help="Show at most this many (0 = all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@click.pass_context
def browse(ctx, queue, selector, limit, as_json) -> None:
    """Show QUEUE's waiting messages in delivery order, moving nothing."""
    with _connect(ctx) as conn:
        browser = conn.create_session().create_browser(Queue(queue), selector)
        for i, msg in enumerate(browser):
            if limit and i >= limit:
                break
            _print_message(msg, as_json)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Counts as JSON.")
@click.pass_context
def stat(ctx, as_json) -> None:
    """Count messages per state for every destination under the root."""
    from . import layout

    rows = [(name, {d: box.count(State(d)) for d in STATE_DIRS}) for name, box in layout.all_dropboxes(ctx.obj["root"])]
    if as_json:
        click.echo(json.dumps({name: counts for name, counts in rows}))
        return
    table = Table(title=f"dropboxes under {ctx.obj['root']}")
    table.add_column("destination")
    for d in STATE_DIRS:
        table.add_column(f"{State(d).name}\n{d}/", justify="right")
    for name, counts in rows:
        table.add_row(name, *(str(counts[d]) for d in STATE_DIRS))
    console.print(table)


@main.command()
@click.option("--orphan-age", default=3600.0, show_default=True, type=click.FloatRange(0),
              help="Seconds after which a working/ file with no live owner is an orphan.")
@click.option("--discard-orphans", is_flag=True, help="Delete orphans instead of quarantining them to error/.")
@click.option("--assume-unknown-dead", is_flag=True,
              help="Also reclaim processing/ entries of clients never registered here (1.2, scripts).")
@click.pass_context
def recover(ctx, orphan_age, discard_orphans, assume_unknown_dead) -> None:
    """Recover after crashes: finish dead owners' transactions, redeliver their in-flight
    messages, quarantine orphaned working/ files and expire overdue messages."""
    from .recovery import recover as run_recovery

    report = run_recovery(ctx.obj["root"], orphan_age=orphan_age, quarantine_orphans=not discard_orphans,
                          assume_unknown_dead=assume_unknown_dead)
    click.echo(json.dumps(report.as_dict()))
    if report.errors:
        sys.exit(1)


@main.command()
@click.argument("queue")
@click.option("--state", "states", multiple=True, default=["target"], show_default=True,
              type=click.Choice(["target", "processed", "expired", "error"]),
              help="Which directory to empty (repeatable).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def purge(ctx, queue, states, yes) -> None:
    """Delete QUEUE's messages in the given states (default: the waiting ones)."""
    from . import layout
    from .lifecycle import Move

    box = layout.queue_box(ctx.obj["root"], Queue(queue))
    if not box.exists():
        raise click.UsageError(f"no queue {queue!r} under {ctx.obj['root']}")
    if not yes:
        click.confirm(f"delete every message of {queue} in {', '.join(states)}?", abort=True)
    removed = 0
    for d in states:
        st = State(d)
        for name in box.list(st):
            removed += box.move(Move.PURGE, st, name)
    console.print(f"purged {removed} messages", highlight=False)


@main.command()
@click.option("--producers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--consumers", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--messages", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--queue", default="demo", show_default=True)
@click.pass_context
def demo(ctx, producers, consumers, messages, queue) -> None:
    """Send and consume with several processes on one queue and check every message
    was processed exactly once (the README's `make run`)."""
    from .demo import run_demo

    ok = run_demo(ctx.obj["root"], queue, producers, consumers, messages, console)
    sys.exit(0 if ok else 1)


def _register_optional_groups() -> None:
    try:
        from .spec_check import spec
    except ImportError:  # spec tooling not installed
        return
    main.add_command(spec)


_register_optional_groups()


if __name__ == "__main__":
    main()
