"""``dropboxmq xa list|commit|rollback XID``: settle in-doubt two-phase branches by hand.

An operator uses these when a coordinator is gone for good: ``list`` shows the
prepared branches (after finishing those already decided and rolling back
those whose preparing process died before the prepare completed); ``commit`` /
``rollback`` decide one of them.  Decide consistently with the branch's other
resources (``SELECT gid FROM pg_prepared_xacts`` on PostgreSQL): a wrong manual
decision is exactly the heuristic outcome two-phase commit exists to avoid.
"""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["xa"]
from dropboxmq.cli_root import require_root

console = Console()


def _root(ctx: click.Context):
    return require_root(ctx.find_root())


def _resolve(root, text: str):
    from . import Xid, list_branches, find_branch

    try:
        xid = Xid.parse(text)
    except ValueError:
        xid = None
    if xid is not None and find_branch(root, xid) is not None:
        return xid
    matches = [b.xid for b in list_branches(root) if b.xid.gtrid == text]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise click.ClickException(f"gtrid {text!r} names {len(matches)} branches; give the full XID "
                                   "as 'dropboxmq xa list' prints it")
    raise click.ClickException(f"no prepared branch {text!r} (see 'dropboxmq xa list')")


@click.group()
def xa() -> None:
    """Two-phase-commit branches (XA): list the in-doubt ones, commit or roll one back."""


@xa.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per branch.")
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Prepared branches waiting for a decision (XID = the name to pass to commit/rollback)."""
    from . import list_branches, recover

    root = _root(ctx)
    recover(root)
    branches = list_branches(root)
    if as_json:
        for b in branches:
            click.echo(json.dumps({"xid": b.xid.log_name, **b.xid.to_json(), "owner": b.owner,
                                   "prepared_at": b.prepared_at,
                                   "sends": sum(e.kind == "send" for e in b.entries),
                                   "receives": sum(e.kind == "receive" for e in b.entries)}))
        return
    if not branches:
        console.print("no in-doubt branches")
        return
    table = Table("XID", "format", "gtrid", "bqual", "owner", "sends", "receives", "prepared")
    for b in branches:
        table.add_row(Text(b.xid.log_name), str(b.xid.format_id), Text(b.xid.gtrid), Text(b.xid.bqual),
                      Text(b.owner), str(sum(e.kind == "send" for e in b.entries)),
                      str(sum(e.kind == "receive" for e in b.entries)),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.prepared_at)))
    console.print(table)


@xa.command("commit")
@click.argument("xid")
@click.pass_context
def commit_cmd(ctx: click.Context, xid: str) -> None:
    """Commit the prepared branch XID: its sends become visible, its receives are acked."""
    _finish(ctx, xid, commit=True)


@xa.command("rollback")
@click.argument("xid")
@click.pass_context
def rollback_cmd(ctx: click.Context, xid: str) -> None:
    """Roll back the prepared branch XID: its sends vanish, its receives are redelivered."""
    _finish(ctx, xid, commit=False)


def _finish(ctx: click.Context, xid: str, commit: bool) -> None:
    from . import finish_branch

    root = _root(ctx)
    x = _resolve(root, xid)
    console.print(Text(f"{x.log_name}: {finish_branch(root, x, commit=commit)}"))
