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

from gateway.config import ECHO_MODEL
from gateway.models.types import Usage

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
