"""python -m dropboxmq: the dropboxmq command."""

from .cli import main

main()
