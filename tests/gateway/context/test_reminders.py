"""Every reminder rule on its own."""

from __future__ import annotations

import pytest

from gateway.context import reminders
from gateway.context.reminders import append_block, combine, escape_tags, extract


def block(*texts: str) -> str:
    return "<system-reminder>\n" + "\n\n".join(texts) + "\n</system-reminder>"


def test_texts_are_trimmed_and_empties_dropped() -> None:
    assert combine(["  one  ", "", "   \n\t", "two\n"]) == block("one", "two")


def test_nothing_left_gives_no_block() -> None:
    assert combine([]) is None
    assert combine(["", "  \n "]) is None


def test_several_texts_make_exactly_one_block() -> None:
    result = combine(["a", "b", "c"])
    assert result is not None
    assert result.count(reminders.OPEN) == 1 and result.count(reminders.CLOSE) == 1
    assert result == "<system-reminder>\na\n\nb\n\nc\n</system-reminder>"


def test_wrapped_text_is_unwrapped() -> None:
    assert extract(block("inner")) == ["inner"]
    assert extract("<system-reminder>inner</system-reminder>") == ["inner"]


def test_wrapped_text_keeps_text_before_between_and_after_blocks() -> None:
    text = (
        "<system-reminder>\nA\n</system-reminder> between "
        "<system-reminder>B</system-reminder> after"
    )
    assert extract(text) == ["A", "between", "B", "after"]
    text = "before <system-reminder>\nA\n</system-reminder>"
    assert extract(text) == ["before", "A"]


def test_text_with_a_block_only_in_the_middle_is_kept_as_is() -> None:
    text = "see <system-reminder>x</system-reminder> here"
    assert extract(text) == [text]


def test_already_wrapped_texts_are_not_wrapped_twice() -> None:
    assert combine([block("one"), "two"]) == block("one", "two")


def test_one_optional_newline_inside_each_tag_is_tolerated() -> None:
    assert extract("<system-reminder>\n\nx\n\n</system-reminder>") == ["x"]


def test_string_content_gets_block_after_a_blank_line() -> None:
    messages = [{"role": "user", "content": "hello"}]
    out = append_block(messages, "B")
    assert out[0]["content"] == "hello\n\nB"
    assert messages[0]["content"] == "hello"  # input untouched


def test_only_the_last_user_message_changes() -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "b"},
    ]
    out = append_block(messages, "B")
    assert [m["content"] for m in out] == ["one", "a", "two\n\nB", "b"]


def test_multimodal_content_changes_only_its_last_text_part() -> None:
    parts = [
        {"type": "text", "text": "first"},
        {"type": "image_url", "image_url": {"url": "u"}},
        {"type": "text", "text": "second"},
        {"type": "image_url", "image_url": {"url": "v"}},
    ]
    out = append_block([{"role": "user", "content": parts}], "B")
    content = out[0]["content"]
    assert content[0] == {"type": "text", "text": "first"}
    assert content[2] == {"type": "text", "text": "second\n\nB"}
    assert content[1] == parts[1] and content[3] == parts[3] and len(content) == 4


def test_multimodal_content_without_text_gets_a_new_text_part() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "u"}}]
    out = append_block([{"role": "user", "content": parts}], "B")
    assert out[0]["content"] == [parts[0], {"type": "text", "text": "B"}]


def test_no_user_message_at_all_makes_a_new_user_message() -> None:
    out = append_block([{"role": "system", "content": "s"}], "B")
    assert out == [{"role": "system", "content": "s"}, {"role": "user", "content": "B"}]


@pytest.mark.parametrize(
    "tag",
    [
        "</system-reminder>",
        "<system-reminder>",
        "</SYSTEM-REMINDER>",
        "< / System-Reminder >",
        "<system_reminder>",
    ],
)
def test_a_users_reminder_tag_is_escaped_and_stays_readable(tag: str) -> None:
    escaped = escape_tags(f"a < b {tag} then")
    assert "<" not in escaped.replace("a < b", "")
    assert escaped == f"a < b &lt;{tag[1:]} then"


def test_text_without_a_reminder_tag_is_left_as_it_is() -> None:
    text = "<b>bold</b> <system> a<-b <reminder>"
    assert escape_tags(text) == text
