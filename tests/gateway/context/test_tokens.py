"""Token counting: the allowance, and the size bound that spares counting a request."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.context.tokens import DEFAULT_ALLOWANCE, RequestShape, TokenCounter, token_allowance
from gateway.models import Models
from gateway.settings.env import Settings
from gateway.state.session import HistoryView
from tests.fakes.llm_server import FakeLLM
from tests.support.conversation import MAIN, assistant_entry, make_settings, user_entry


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
    bound = counter.byte_bound(shape)
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
    assert counter.byte_bound(shape) is None
    assert counter.byte_bound(shape) is None  # and when cached
