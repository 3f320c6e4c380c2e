"""Token counting: the allowance, and the two bounds that spare counting a request (its
size, and the provider's count of the conversation's last request)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import litellm
import pytest

from gateway.context.compiler import entry_message
from gateway.context.tokens import (
    DEFAULT_ALLOWANCE,
    RequestShape,
    TokenCounter,
    request_prefix,
    token_allowance,
)
from gateway.models import Models
from gateway.settings.env import Settings
from gateway.state.session import HistoryView
from tests.fakes.llm_server import FakeLLM
from tests.support.conversation import (
    COMPRESSOR,
    MAIN,
    SYSTEM,
    assistant_entry,
    content_of,
    conversation,
    make_settings,
    user_entry,
)


def test_the_budget_comes_from_the_setting_else_the_model_window_else_a_default(
    redis_url: str, llm: FakeLLM
) -> None:
    def allowance(settings: Settings) -> int:
        return token_allowance(settings, Models.for_settings(settings))

    assert allowance(make_settings(redis_url, llm, GATEWAY_TOKEN_BUDGET=1234)) == 1234
    known = make_settings(redis_url, llm, GATEWAY_MODEL="openai/gpt-4o")
    assert allowance(known) == int(128_000 * 0.6)
    routed = make_settings(redis_url, llm, GATEWAY_MODEL="openai/responses/gpt-4o")
    assert allowance(routed) == int(128_000 * 0.6)
    assert allowance(make_settings(redis_url, llm)) == DEFAULT_ALLOWANCE


@pytest.mark.parametrize("model", [MAIN, "openai/gpt-4o"])
@pytest.mark.parametrize(
    "text",
    [
        "plain words about the release and the colour blue",
        "汉字的分词很少合并，每个字可能是一个或多个词元",
        "🦜🧪🫠👩‍👩‍👧‍👦 " * 8,
        "     \n\n\t  x  \n" * 10,
        "ǅǈǋǲ𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0301\u0302\u0303 ︎︎︎",
    ],
)
def test_the_size_bound_never_says_a_request_fits_when_its_count_does_not(
    model: str, text: str
) -> None:
    counter = TokenCounter(Models.for_settings(Settings(_env_file=None)), model)
    entries = [
        user_entry(f"{text} {n}", f"u{n}") if n % 2 == 0 else assistant_entry(text[::-1], f"a{n}")
        for n in range(6)
    ]
    view = HistoryView({}, [], 0, entries[:-1])
    extra = entries[-1:]
    reminder = f"<system-reminder>\n{text}\n</system-reminder>"
    shape = RequestShape("system", view, True, reminder, extra)
    exact = counter.count(replace(shape, extra=())) + counter.entry(extra[0], True)
    bound = counter.bound(shape)
    assert bound is not None and exact <= bound
    for limit in (*range(exact - 3, exact + 4), bound - 1, bound):
        assert counter.within(limit, shape) == (exact <= limit)


def test_a_request_with_an_image_part_is_always_counted() -> None:
    counter = TokenCounter(Models.for_settings(Settings(_env_file=None)), MAIN)
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}},
    ]
    entry = user_entry("", "u1") | {"text": parts}
    view = HistoryView({}, [], 0, [entry])
    shape = RequestShape("system", view, False)
    assert counter.bound(shape) is None
    assert counter.bound(shape) is None  # and when cached


def counter() -> TokenCounter:
    return TokenCounter(Models.for_settings(Settings(_env_file=None)), MAIN)


def long_history(turns: int, **sent: Any) -> list[dict[str, Any]]:
    """`turns` exchanges; the last reply records its request's count when `sent` is given."""
    entries = []
    for n in range(turns):
        entries.append(user_entry(f"question {n}: what is {n} times seven, in words?", f"u{n}"))
        entries.append(assistant_entry(f"{n} times seven is {n * 7}.", f"a{n}"))
    if sent:
        entries[-1]["sent"] = {"through": f"u{turns - 1}"} | sent
    return entries


def test_the_providers_count_of_the_last_request_bounds_the_next_one_without_counting() -> None:
    tokens = counter()
    entries = long_history(40)
    before = HistoryView({}, [], 0, entries[:-1])
    # What the provider counted for the last request: the whole of it, at once.
    sent_messages = [{"role": "system", "content": "system"}]
    sent_messages += [entry_message(e, False) for e in entries[:-1]]
    provider = litellm.token_counter(model=MAIN, messages=sent_messages)
    entries[-1]["sent"] = tokens.sent(RequestShape("system", before, False), provider)
    assert entries[-1]["sent"]["through"] == "u39"
    entries.append(user_entry("and what is forty times seven?", "u40"))
    shape = RequestShape("system", HistoryView({}, [], 0, entries), False, "<reminder/>")
    by_size = sum(len(str(entry_message(e, False)["content"])) + 16 for e in entries)

    bound = tokens.bound(shape)
    assert bound is not None and bound < by_size  # the provider's count is the smaller bound
    missing = len(tokens.missing(shape))
    assert tokens.within(bound, shape)
    assert len(tokens.missing(shape)) == missing  # told without counting anything
    assert tokens.count(shape) <= bound  # and it is an upper bound of the count


@pytest.mark.parametrize(
    "change",
    [
        "another system prompt",
        "a summary since",
        "a group now",
        "a count too small for its text",
        "a count of zero",
        "a count that is not a number",
        "a record without its last entry",
        "a last entry no longer in the view",
        "a tool call after it",
    ],
)
def test_the_providers_count_is_not_used_when_it_cannot_stand_for_the_request(
    change: str,
) -> None:
    tokens = counter()
    entries = long_history(40, tokens=900, prefix=request_prefix("system", None, False))
    prompt, segments, group = "system", [], False
    sent = entries[-1]["sent"]
    if change == "another system prompt":
        prompt = "another"
    elif change == "a summary since":
        segments = [{"last_id": "u1", "last_index": 1, "summary": "they counted"}]
    elif change == "a group now":
        group = True
    elif change == "a count too small for its text":
        sent["tokens"] = 10
    elif change == "a count of zero":
        sent["tokens"] = 0
    elif change == "a count that is not a number":
        sent["tokens"] = "many"
    elif change == "a record without its last entry":
        del sent["through"]
    elif change == "a last entry no longer in the view":
        sent["through"] = "u-gone"
    else:
        call = {"id": "c1", "name": "lookup", "arguments": "{}"}
        entries.append(assistant_entry("", "a-tool", tool_calls=[call]))
    shape = RequestShape(prompt, HistoryView({}, segments, 0, entries), group)
    assert tokens.bound(shape) == _size_bound(tokens, shape)
    sent["prefix"] = request_prefix(prompt, "x", group)  # and only its own prefix stands
    assert tokens.bound(shape) == _size_bound(tokens, shape)


def _size_bound(tokens: TokenCounter, shape: RequestShape) -> int | None:
    """The bound by size alone: the same request, its replies' records taken out."""
    entries = [{k: v for k, v in e.items() if k != "sent"} for e in shape.view.entries]
    bare = replace(shape, view=replace(shape.view, entries=entries))
    return TokenCounter(tokens.models, MAIN).bound(bare)


async def test_a_reply_records_its_requests_count_and_the_next_turn_is_told_by_it(
    redis_url: str, llm: FakeLLM
) -> None:
    # The provider counts fewer tokens than litellm's tokenizer would (a tokenizer of
    # its own): its count decides whether the conversation is past its allowance.
    llm.set_model_behaviour(MAIN, reported_prompt=420)
    llm.set_model_behaviour(COMPRESSOR, reply="SUMMARY")
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=1200) as talk:
        history = long_history(40, tokens=400, prefix=request_prefix(SYSTEM, None, False))
        await talk.preload(history)
        whole = RequestShape(SYSTEM, HistoryView({}, [], 0, history), False)
        assert counter().count(whole) > 1200  # counted, it would be compressed first
        await talk.say("what was the first question?")
        await talk.settled()
        assert talk.compression_requests() == []
        assert "question 0:" in content_of(talk.main_requests()[-1]["messages"])
        *_, user, reply = await talk.history()
        assert reply["sent"] == {
            "tokens": 420,
            "through": user["id"],
            "prefix": request_prefix(SYSTEM, None, False),
        }


async def test_a_count_too_small_to_be_true_is_not_believed(redis_url: str, llm: FakeLLM) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply="SUMMARY")
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=1200) as talk:
        await talk.preload(long_history(40, tokens=3, prefix=request_prefix(SYSTEM, None, False)))
        await talk.say("what was the first question?")
        await talk.settled()
        [asked] = talk.compression_requests()  # counted: over its allowance, compressed first
        assert asked.received_at < talk.main_requests()[-1].received_at
