"""A call's cost through the real litellm price map, or the operator's prices."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.models.cost import call_cost, transcription_usage
from gateway.models.litellm_backend import load_litellm
from gateway.models.types import Usage
from gateway.settings.defaults import ECHO_MODEL

USAGE = Usage(prompt_tokens=1000, completion_tokens=500)


def test_the_operators_price_comes_before_litellms() -> None:
    litellm = load_litellm()
    prices = {"openai/gpt-4o-mini": (0.001, 0.002)}
    assert call_cost(litellm, "openai/gpt-4o-mini", USAGE, prices) == pytest.approx(2.0)
    listed = call_cost(litellm, "openai/gpt-4o-mini", USAGE, {})
    assert listed is not None and 0 < listed < 0.01


def test_a_model_with_no_price_anywhere_costs_unknown_not_zero() -> None:
    litellm = load_litellm()
    assert call_cost(litellm, "openai/a-model-nobody-prices", USAGE, {}) is None
    assert call_cost(litellm, ECHO_MODEL, USAGE, {ECHO_MODEL: (1.0, 1.0)}) is None
    priced = call_cost(
        litellm,
        "openai/a-model-nobody-prices",
        USAGE,
        {"openai/a-model-nobody-prices": (0.01, 0.0)},
    )
    assert priced == pytest.approx(10.0)


def test_a_transcriptions_reported_tokens_are_its_usage_and_priced() -> None:
    litellm = load_litellm()
    usage = Usage()
    response = SimpleNamespace(text="hello", usage={"input_tokens": 300, "output_tokens": 20})
    prices = {"openai/whisper-x": (0.001, 0.01)}
    transcription_usage(litellm, "openai/whisper-x", response, usage, prices)
    assert (usage.prompt_tokens, usage.completion_tokens) == (300, 20)
    assert usage.cost == pytest.approx(0.5)


def test_a_transcription_with_nothing_to_reckon_by_costs_unknown() -> None:
    usage = Usage()
    transcription_usage(load_litellm(), "openai/a-model-nobody-prices", {}, usage, {})
    assert usage.cost is None and usage.prompt_tokens == 0
