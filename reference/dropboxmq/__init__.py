"""dropboxmq: guaranteed, JMS-style messaging whose only broker is a directory tree."""

__version__ = "0.1.0"
