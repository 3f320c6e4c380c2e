"""What every adapter shares: field checks of a platform's JSON, the approval buttons'
payload, Retry-After, attachments as the core's, and mention stripping."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from adapters.common import (
    Field,
    approval_payload,
    attachment,
    first_invalid,
    integer,
    invalid,
    is_text,
    one_of,
    optional,
    parse_approval_payload,
    pattern,
    refusal_text,
    retry_after_seconds,
    snowflake,
    strip_mentions,
)
from gateway.inbound.ingest import Verdict


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


def test_an_approval_payload_round_trips_and_nothing_else_parses() -> None:
    approval_id = "AbC_123-xyz"
    assert parse_approval_payload(approval_payload(approval_id, True)) == (approval_id, True)
    assert parse_approval_payload(approval_payload(approval_id, False)) == (approval_id, False)
    for other in ("a:short:y", f"a:{approval_id}:maybe", f"b:{approval_id}:y", None, 7):
        assert parse_approval_payload(other) is None


def test_only_a_click_that_does_not_count_gets_a_refusal() -> None:
    assert refusal_text(Verdict.NOT_YOURS) and refusal_text(Verdict.CLOSED)
    assert refusal_text(Verdict.NOT_YOURS) != refusal_text(Verdict.CLOSED)
    counted = [v for v in Verdict if v not in (Verdict.NOT_YOURS, Verdict.CLOSED)]
    assert counted and all(refusal_text(v) is None for v in counted)


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


def test_an_attachment_takes_its_kind_from_its_type_and_drops_wrong_typed_values() -> None:
    voice = attachment(url="https://x/a.ogg", name="a.ogg", mime_type="AUDIO/ogg", size=10)
    assert voice.kind == "voice" and voice.size == 10
    image = attachment(url="https://x/b.png", name=5, mime_type="image/png", size=-1)
    assert image.kind == "image" and image.name is None and image.size is None
    marked = attachment(url=None, name="note", mime_type=None, voice=True, file_id="F1")
    assert marked.kind == "voice" and marked.url is None and marked.file_id == "F1"
    assert attachment(url="u", name="c.pdf", mime_type="application/pdf").kind == "file"


def test_mentions_are_stripped_without_leaving_runs_of_spaces() -> None:
    mention = re.compile(r"<@U0BOT>")
    assert strip_mentions("<@U0BOT>  hello  <@U0BOT> there", mention) == "hello there"
