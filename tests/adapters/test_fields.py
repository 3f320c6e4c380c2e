"""How a platform's JSON fields are checked: the forms each takes, the first failing
field named in one line."""

from __future__ import annotations

import pytest

from adapters.fields import (
    Field,
    first_invalid,
    integer,
    invalid,
    is_text,
    one_of,
    optional,
    pattern,
    snowflake,
)


def test_field_checks_take_only_the_platforms_form() -> None:
    small = integer(0, 10)
    assert small(3) and not small(11) and not small(True) and not small("3")
    digits = pattern(r"\d+")
    assert digits("123") and not digits("12a") and not digits("١٢٣")  # Arabic-Indic digits
    kind = one_of("message", "edit")
    assert kind("edit") and not kind("delete") and not kind(None)
    assert optional(kind)(None) and not optional(kind)("delete")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        ("1200000000000000001", True),
        (2**64, False),
        (-5, False),
        ("-5", False),
        ("1" * 21, False),
        (True, False),
        (1.0, False),
    ],
)
def test_a_snowflake_is_an_unsigned_64_bit_id(value: object, ok: bool) -> None:
    assert snowflake(value) is ok


def test_the_first_failing_field_is_named_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    fields: list[Field] = [
        ("chat", 5, integer(0, 9)),
        ("user", "x", integer(0, 9)),
        ("text", 1, is_text),
    ]
    assert first_invalid(fields) == "user"
    assert invalid("telegram", fields)
    assert caplog.messages == [
        "telegram: event dropped, its user is missing or not of the platform's form"
    ]
    assert not invalid("telegram", [("chat", 5, integer(0, 9))])
