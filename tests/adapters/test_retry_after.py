"""Retry-After read from every form a platform gives it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.retry_after import retry_after_seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (2, 2.0),
        (0.5, 0.5),
        (timedelta(seconds=3), 3.0),
        ("soon", 1.0),
        (None, 1.0),
        (True, 1.0),
    ],
)
def test_retry_after_is_read_from_any_form_a_platform_gives(value: object, seconds: float) -> None:
    assert retry_after_seconds(value) == seconds
