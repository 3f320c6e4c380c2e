"""A platform's Retry-After, whatever form its SDK gives it in, as seconds."""

from __future__ import annotations

from datetime import timedelta


def retry_after_seconds(value: object, default: float = 1.0) -> float:
    """A Retry-After in seconds: a header's text, a number or a timedelta; `default` when
    it is absent or unreadable."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return default
    try:
        return float(value)
    except ValueError:
        return default
