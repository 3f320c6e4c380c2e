"""A tool call's step on the timeline: its title short and safe to show."""

from __future__ import annotations

from gateway.models import ToolCall
from gateway.tools import ToolResult
from gateway.turn import timeline


def test_a_title_names_the_tool_and_its_arguments() -> None:
    call = ToolCall("c1", "search__web", '{"query": "weather in Oslo", "limit": 3}')
    assert timeline.title(call) == 'search__web (query: "weather in Oslo", limit: 3)'


def test_credentials_are_masked_by_name_and_by_look() -> None:
    arguments = (
        '{"api_key": "k", "Authorization": "x", "note": "Bearer abc.def",'
        ' "blob": "AKIAIOSFODNN7EXAMPLEAKIAIOSFODNN7EXAMPLE", "password": 12}'
    )
    summary = timeline.summarize(arguments)
    assert 'k"' not in summary and "abc.def" not in summary and "AKIA" not in summary
    assert summary.count(timeline.MASK) == 5


def test_a_summary_is_capped_and_long_values_are_cut() -> None:
    call = ToolCall("c1", "notes__write", '{"text": "' + "lorem ipsum " * 50 + '", "n": 1}')
    summary = timeline.summarize(call.arguments)
    assert len(summary) <= timeline.SUMMARY_MAX
    assert '"lorem ipsum lorem ipsum…"' in summary
    long = timeline.summarize({f"k{i}": i for i in range(40)})
    assert len(long) == timeline.SUMMARY_MAX and long.endswith("…")


def test_arguments_that_are_not_an_object_show_nothing() -> None:
    assert timeline.summarize('{"id": ') == ""
    assert timeline.summarize("[1, 2]") == ""
    assert timeline.title(ToolCall("c1", "x__y", "")) == "x__y"


def test_a_finished_step_is_complete_only_when_the_call_answered() -> None:
    call = ToolCall("c1", "x__y", "{}")
    assert timeline.finished(call, ToolResult("fine", "ok")).state == "complete"
    failed = timeline.finished(call, ToolResult("nope", "timeout"))
    assert (failed.state, failed.details) == ("error", "timeout")
    assert timeline.pending(call).state == "pending"
    assert timeline.running(call).state == "in_progress"
