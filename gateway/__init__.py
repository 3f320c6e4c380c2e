"""The platform-neutral core of the chat gateway."""

__version__ = "0.1.0"
