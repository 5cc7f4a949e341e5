"""``python -m dropboxmq_stress``: the same verbs as ``dropboxmq stress``."""

from .cli import stress

if __name__ == "__main__":
    stress(prog_name="python -m dropboxmq_stress")
