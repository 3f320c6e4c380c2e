"""The transcript renderer: what /btw and the summariser read of a conversation."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.context.transcript import PLACEHOLDER, render_transcript


def user(text: Any, name: str | None = None, entry_id: str = "m") -> dict[str, Any]:
    entry: dict[str, Any] = {"id": entry_id, "role": "user", "text": text}
    if name is not None:
        entry["speaker"] = {"id": "U1", "name": name}
    return entry


def assistant(text: Any, **extra: Any) -> dict[str, Any]:
    return {"id": "a", "role": "assistant", "text": text, **extra}


@pytest.mark.parametrize("entries", [None, [], [{"role": "system", "text": "be nice"}]])
def test_no_conversation_gives_the_placeholder(entries: list[Any] | None) -> None:
    assert render_transcript(entries) == PLACEHOLDER


def test_users_and_assistant_lines() -> None:
    text = render_transcript([user("hello", "Alice"), user("hi"), assistant("Hello both.")])
    assert text.splitlines() == ["USER (Alice): hello", "USER: hi", "ASSISTANT: Hello both."]


def test_the_system_prompt_is_skipped() -> None:
    entries = [{"role": "system", "text": "SECRET SYSTEM PROMPT"}, user("what now?")]
    text = render_transcript(entries)
    assert "SECRET SYSTEM PROMPT" not in text
    assert text == "USER: what now?"


def test_tool_calls_summarised_by_name_and_results_included() -> None:
    entries = [
        user("check the log"),
        assistant(
            "",
            tool_calls=[
                {"id": "c1", "name": "read_file", "arguments": "{}"},
                {"id": "c2", "name": "grep", "arguments": {"q": "x"}},
            ],
        ),
        {"role": "tool", "tool_call_id": "c1", "text": "deploy finished in 41s"},
        # The OpenAI message shape: `content`, and the name under `function`.
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "run_shell", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "README.md"},
        assistant("It took 41 seconds."),
    ]
    lines = render_transcript(entries).splitlines()
    assert lines == [
        "USER: check the log",
        "ASSISTANT [called tools: read_file, grep]",
        "TOOL RESULT (read_file): deploy finished in 41s",
        "ASSISTANT [called tools: run_shell]",
        "TOOL RESULT (run_shell): README.md",
        "ASSISTANT: It took 41 seconds.",
    ]
    assert "arguments" not in render_transcript(entries)


def test_assistant_text_and_tool_calls_in_one_entry() -> None:
    entry = assistant("Let me look.", tool_calls=[{"id": "c1", "name": "search"}])
    assert render_transcript([entry]).splitlines() == [
        "ASSISTANT: Let me look.",
        "ASSISTANT [called tools: search]",
    ]


def test_long_tool_result_is_truncated() -> None:
    entries = [{"role": "tool", "tool_call_id": "x", "text": "line\n" * 2000}]
    text = render_transcript(entries, message_cap=300)
    assert text.startswith("TOOL RESULT: line")
    assert len(text) == 300 and text.endswith("…")


def test_text_blocks_extracted_and_malformed_entries_ignored() -> None:
    entries: list[Any] = [
        "not a dict",
        42,
        None,
        {"text": "no role"},
        {"role": 7, "text": "role of the wrong type"},
        {"role": "user", "text": 12345},
        {"role": "user", "text": {"not": "a list"}},
        user(
            [
                {"type": "text", "text": "first block"},
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                {"type": "input_text", "text": "second block"},
                {"type": "text", "text": 99},
                "a bare string",
            ]
        ),
        {"role": "user", "speaker": "not a dict", "text": "speaker of the wrong type"},
        assistant("fine", tool_calls="not a list"),
        assistant("", tool_calls=[{"id": "c", "name": 3}, "junk", {"function": "junk"}]),
    ]
    lines = render_transcript(entries).splitlines()
    assert lines == [
        "USER: first block",
        "  second block",
        "  a bare string",
        "USER: speaker of the wrong type",
        "ASSISTANT: fine",
    ]


def test_attachments_are_named() -> None:
    entry = user("look")
    entry["attachments"] = [{"kind": "image", "name": "chart.png"}, {"kind": "file"}]
    assert render_transcript([entry]) == "USER: look [attached: chart.png, file]"


def test_a_message_keeps_its_line_structure_as_indented_continuations() -> None:
    text = render_transcript([user("one\r\ntwo\u2028three\n\nfour")])
    assert text.split("\n") == ["USER: one", "  two", "  three", "  ", "  four"]


def test_budget_keeps_the_newest_and_marks_the_omitted() -> None:
    entries = [user(f"message {n:03d} " + "x" * 408, entry_id=f"m{n}") for n in range(200)]
    text = render_transcript(entries, max_chars=3000)
    lines = text.splitlines()
    assert len(text) <= 3000
    assert "message 199 " in lines[-1]
    assert "message 000 " not in text
    kept = len(lines) - 1
    assert lines[0] == f"[... {200 - kept} earlier messages omitted ...]"
    assert kept >= 6  # the budget is used, not wasted
    numbers = [int(line.split()[2]) for line in lines[1:]]
    assert numbers == list(range(200 - kept, 200))


def test_everything_that_fits_is_kept_without_a_marker() -> None:
    entries = [user("a" * 100) for _ in range(5)]
    text = render_transcript(entries, max_chars=len("USER: " + "a" * 100) * 5 + 4)
    assert text.count("USER:") == 5 and "omitted" not in text


def test_one_message_over_the_cap_is_cut_to_it() -> None:
    text = render_transcript([user("y" * 5000)], message_cap=2000)
    assert len(text) == 2000
    assert text.startswith("USER: yyy") and text.endswith("…")
    assert render_transcript([user("y" * 10)], message_cap=2000) == "USER: " + "y" * 10


def test_live_reply_included_last_and_marked() -> None:
    text = render_transcript([user("write a poem")], live_reply="Roses are")
    assert text.splitlines() == [
        "USER: write a poem",
        "ASSISTANT (still writing, in progress): Roses are",
    ]
    assert render_transcript([], live_reply="working on it").startswith("ASSISTANT (still writing")
    assert render_transcript([user("q")], live_reply="   ") == "USER: q"


def test_live_reply_is_capped_and_always_kept() -> None:
    entries = [user("z" * 400) for _ in range(50)]
    text = render_transcript(entries, message_cap=1000, max_chars=2500, live_reply="w" * 5000)
    lines = text.splitlines()
    assert len(text) <= 2500
    assert lines[0].startswith("[... ")
    assert lines[-1].startswith("ASSISTANT (still writing, in progress): www")
    assert len(lines[-1]) == 1000 and lines[-1].endswith("…")


def test_a_summary_of_the_earlier_conversation_opens_the_transcript() -> None:
    text = render_transcript(
        [user("and the colour?", "Alice")],
        summary="- Alice counted 42 widgets\n- USER: not a line of its own",
    )
    assert text.splitlines() == [
        "EARLIER CONVERSATION (summary): - Alice counted 42 widgets",
        "  - USER: not a line of its own",
        "USER (Alice): and the colour?",
    ]
    assert render_transcript([], summary="- shipped on Friday") == (
        "EARLIER CONVERSATION (summary): - shipped on Friday"
    )
    assert render_transcript([user("q")], summary="  ") == "USER: q"


def test_a_long_summary_takes_at_most_half_the_budget_and_the_newest_messages_the_rest() -> None:
    entries = [user(f"message {n:02d} " + "x" * 90) for n in range(40)]
    text = render_transcript(entries, max_chars=2000, summary="s" * 5000)
    lines = text.splitlines()
    assert len(text) <= 2000
    assert lines[0].startswith("EARLIER CONVERSATION (summary): sss") and len(lines[0]) == 1000
    assert lines[1].startswith("[... ") and "message 39 " in lines[-1]
    assert len(lines) >= 2 + 8  # the other half holds the newest messages
