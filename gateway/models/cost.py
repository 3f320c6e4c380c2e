"""What a call cost, from litellm's own price map or the operator's prices.

Computed where litellm runs (in this process or a model process), and carried
back with the call's usage (`litellm_backend` passes the module in: it is the one
that imports litellm). A model with no price anywhere (a local model, the
offline `echo` model) gets None: its cost is unknown, which is not 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from gateway.models.types import Usage
from gateway.settings.defaults import ECHO_MODEL

log = logging.getLogger(__name__)

Prices = Mapping[str, tuple[float, float]]  # model -> USD per input token, per output token


def call_cost(litellm: ModuleType, model: str, usage: Usage, prices: Prices) -> float | None:
    """The USD cost of `usage` on `model`: the operator's price first, then litellm's map."""
    if model == ECHO_MODEL:
        return None
    kwargs: dict[str, Any] = {}
    if model in prices:
        per_input, per_output = prices[model]  # litellm's CostPerToken, a TypedDict
        kwargs["custom_cost_per_token"] = {
            "input_cost_per_token": per_input,
            "output_cost_per_token": per_output,
        }
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            **kwargs,
        )
    except Exception as exc:  # litellm raises plain Exception for a model it has no price of
        log.debug("no price for %s: %s", model, type(exc).__name__)
        return None
    return float(prompt_cost) + float(completion_cost)


def transcription_usage(
    litellm: ModuleType, model: str, response: Any, usage: Usage, prices: Prices
) -> None:
    """A transcription's tokens, where the provider reports them, and its cost: by tokens
    with a price for them, else as litellm reckons it (by the audio's seconds, which
    a plain JSON answer does not carry: then unknown)."""
    reported = getattr(response, "usage", None)
    if reported is not None:
        get = reported.get if isinstance(reported, dict) else lambda k: getattr(reported, k, 0)
        usage.prompt_tokens = int(get("input_tokens") or 0)
        usage.completion_tokens = int(get("output_tokens") or 0)
    if model in prices or usage.prompt_tokens:
        usage.cost = call_cost(litellm, model, usage, prices)
        return
    try:
        cost = litellm.completion_cost(
            completion_response=response, model=model, call_type="atranscription"
        )
    except Exception as exc:  # no price, or nothing to reckon it by
        log.debug("no transcription price for %s: %s", model, type(exc).__name__)
        cost = None
    usage.cost = float(cost) if cost else None
