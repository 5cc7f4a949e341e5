"""``python -m dropboxmq_conformance``: the same verbs as ``dropboxmq conformance``."""

from .cli import conformance

if __name__ == "__main__":
    conformance(prog_name="python -m dropboxmq_conformance")
