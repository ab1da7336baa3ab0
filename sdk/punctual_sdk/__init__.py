"""punctual's Python SDK: an API client, a receiver kit and a test scheduler (see the package README)."""

__version__ = "0.1.0"
