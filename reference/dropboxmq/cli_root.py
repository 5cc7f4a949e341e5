"""The root every verb group reads from the top-level ``dropboxmq`` context (``--root``), shared
by ``cli`` and the groups it registers (``xa_cli``), so that no group imports ``cli`` back."""

from __future__ import annotations

import os
from pathlib import Path

import click

__all__ = ["require_root"]


def require_root(ctx: click.Context) -> Path:
    """The root for verbs that only look (or clean up): it must already exist."""
    root = ctx.obj["root"]
    if not os.path.isdir(root):
        raise click.ClickException(f"no dropbox root at {root} (create one with 'dropboxmq --root {root} init "
                                   "QUEUE', or pick another with --root or $DROPBOXMQ_ROOT)")
    return root
