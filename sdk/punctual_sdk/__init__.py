"""punctual's Python SDK: an API client, a receiver kit and a test scheduler (see the package README)."""

__version__ = "0.1.0"

# The client at the package's top (`punctual_sdk.Client`); the receiver kit and the test scheduler stay in their
# own modules, imported only by who uses them.
from punctual_sdk.client import Client

__all__ = ["Client", "__version__"]
