"""Celery and kombu on a dropbox: the ``dropboxmq://`` transport.

    import dropboxmq_kombu                       # registers the dropboxmq:// scheme with kombu
    from celery import Celery

    app = Celery("tasks", broker="dropboxmq:///srv/dropbox")   # three slashes: an absolute root

kombu 5 finds transports only in ``kombu.transport.TRANSPORT_ALIASES`` (it does not read entry
points), so importing this package is what makes the scheme known; the library never imports it.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

__all__ = ["SCHEME", "TRANSPORT"]

#: the URL scheme: ``dropboxmq:///absolute/path/to/root``
SCHEME = "dropboxmq"
#: what kombu resolves the scheme to
TRANSPORT = "dropboxmq_kombu.transport:Transport"

TRANSPORT_ALIASES.setdefault(SCHEME, TRANSPORT)
