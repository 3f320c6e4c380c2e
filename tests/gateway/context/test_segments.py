"""Which range the next compression segment covers: the oldest entries, never the newest
kept verbatim, never a tool call parted from its result, a fallback planned over again."""

from __future__ import annotations

from gateway.context.segments import KEEP_MIN, plan_segment
from gateway.state.session import Entry, HistoryView


def entries(count: int, start: int = 0) -> list[Entry]:
    roles = ("user", "assistant")
    return [{"id": f"e{i}", "role": roles[i % 2], "text": f"t{i}"} for i in range(start, count)]


def view(history: list[Entry], segments: list[dict[str, object]] | None = None) -> HistoryView:
    return HistoryView({}, list(segments or []), 0, history)


def test_the_oldest_entries_are_planned_and_the_newest_stay() -> None:
    plan = plan_segment(view(entries(20)), limit=20)
    assert plan is not None
    assert plan.first_index == 0 and plan.last_index == 20 - KEEP_MIN - 1
    assert [e["id"] for e in plan.entries][:2] == ["e0", "e1"]
    assert plan.previous is None and plan.replaces is None


def test_nothing_is_planned_when_only_the_kept_entries_are_there() -> None:
    assert plan_segment(view(entries(KEEP_MIN)), limit=KEEP_MIN) is None


def test_the_limit_bounds_the_range() -> None:
    plan = plan_segment(view(entries(20)), limit=4)
    assert plan is not None and plan.last_index == 3


def test_a_boundary_never_parts_a_tool_call_from_its_result() -> None:
    history = entries(20)
    history[3] = {"id": "e3", "role": "assistant", "text": "", "tool_calls": [{"id": "c1"}]}
    history[4] = {"id": "e4", "role": "tool", "text": "result", "call_id": "c1"}
    plan = plan_segment(view(history), limit=4)  # would cut right after the call
    assert plan is not None and plan.last_index == 2


def test_the_next_segment_follows_the_last_and_a_fallback_is_planned_over() -> None:
    history = entries(30)
    done = {"first_id": "e0", "last_id": "e9", "first_index": 0, "last_index": 9}
    plan = plan_segment(view(history, [done]), limit=30)
    assert plan is not None and plan.first_index == 10 and plan.previous == done
    fallback = {**done, "first_id": "e10", "last_id": "e19", "fallback": True}
    plan = plan_segment(view(history, [done, fallback]), limit=30)
    assert plan is not None and plan.replaces == fallback and plan.previous == done
