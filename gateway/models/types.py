"""The values that cross the model boundary: a call, its usage, the tool calls it asked
for, a provider's chain, settings.

Plain data only, with nothing to import but the settings: every side of the
boundary (the turn, a backend, the model process) shares them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.settings.defaults import MODEL_RETRIES, STREAM_IDLE_TIMEOUT

if TYPE_CHECKING:  # a model process builds its ModelSettings from a line, not from these
    from gateway.settings.env import Settings

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One request to a model.

    `tools` are OpenAI function tools in the chat format
    (`{"type": "function", "function": {"name", "description", "parameters"}}`);
    None or empty sends none. Only streamed calls offer them: a one-shot answer
    (a side question, a summary) has no loop to run a tool in.
    """

    model: str
    messages: Sequence[Message]
    # Seconds for the attempts before any text (gateway/models/retries.py); all of a
    # one-shot call.
    timeout: float
    max_tokens: int | None = None
    temperature: float | None = None
    tools: Sequence[Message] | None = None
    charge: Charge | None = None
    # What the call holds on its budgets, carried to its usage write, which settles it
    # in the same step as the call's counts (`gateway.spend.budgets.Hold`).
    hold: BudgetHold | None = field(default=None, compare=False)


class BudgetHold(Protocol):
    """What a call holds on its user's and workspace's budgets until it is settled
    (`gateway.spend.budgets.Hold`): for the call of this charge only, once."""

    charge: Charge
    settled: bool


@dataclass(frozen=True, slots=True)
class Charge:
    """Who a call's usage is counted against: the session it serves, the user it answers
    ("" for work nobody asked for, such as a summary), and the kind of call."""

    session_key: str
    user: str
    kind: str  # "turn", "side", "compression", "transcription"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    `id` pairs it with its result (`tool_call_id` of a `tool` message; `call_id`
    in the Responses API). `arguments` is the JSON text the model wrote, as it
    wrote it: whoever runs the tool parses it, and tells the model when it cannot.
    Its fields are those of a history entry's `tool_calls` item (see gateway/context/compiler.py).
    """

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Usage:
    """A call's tokens, and its cost in USD where a price is known (None: unknown, not 0)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None


@dataclass(slots=True)
class ResponseChain:
    """A stateful provider's chain: the response a call continues, and the one it made."""

    previous_id: str | None = None
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What a backend needs to make calls, as plain values.

    The worker builds it from the settings (`of`); a model process from the
    line it is started with (`from_init`), without reading the environment.
    """

    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    retries: int = MODEL_RETRIES  # the settings' defaults, for values a process is not given
    idle_timeout: float = STREAM_IDLE_TIMEOUT
    # model -> (USD per input token, USD per output token), used before litellm's map
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> ModelSettings:
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        prices = {name: price.per_token() for name, price in settings.model_prices.items()}
        return cls(
            settings.api_base,
            api_key,
            settings.model_retries,
            settings.stream_idle_timeout,
            prices,
        )

    @classmethod
    def from_init(cls, init: Mapping[str, Any]) -> ModelSettings:
        """From `to_init`'s values; a missing idle timeout is the settings' default."""
        idle_timeout = init.get("idle_timeout")
        return cls(
            init.get("api_base"),
            init.get("api_key"),
            int(init["retries"]),
            float(idle_timeout) if idle_timeout else STREAM_IDLE_TIMEOUT,
            {str(m): (float(p[0]), float(p[1])) for m, p in (init.get("prices") or {}).items()},
        )

    def to_init(self) -> dict[str, Any]:
        """The values a model process is started with (the key included)."""
        return asdict(self)
