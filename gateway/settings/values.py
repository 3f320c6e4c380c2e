"""The values settings are written in: a rate of messages, and a budget's amount.

The environment's settings (`env.py`) and the settings by scope (`scoped.py`) both
parse them here, so each form has one parser, and the parts that use the values
(rate limits, budgets) read them from here rather than from each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RATE = re.compile(
    r"^\s*(\d+)\s*/\s*(s|sec|second|min|minute|h|hour)\s*(?:,\s*burst\s+(\d+)\s*)?$",
    re.IGNORECASE,
)
_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0}
_PERIODS |= {"h": 3600.0, "hour": 3600.0}
_PERIOD_NAMES = {1.0: "second", 60.0: "minute", 3600.0: "hour"}
RATE_FORMAT = "N/min (or N/s, N/h), optionally followed by ',burst B'"


@dataclass(frozen=True, slots=True)
class Rate:
    """`count` messages per `period` seconds, `burst` of them at once."""

    count: int
    period: float
    burst: int

    @property
    def interval_ms(self) -> float:
        return self.period * 1000 / self.count

    def describe(self) -> str:
        return f"{self.count} per {_PERIOD_NAMES[self.period]}"


def parse_rate(text: str, default_burst: int | None = None) -> Rate:
    """ "20/min", "1/s,burst 5": the burst is the setting's own, else `default_burst`,
    else the count. Raises ValueError naming the expected form."""
    match = _RATE.match(text)
    if not match or int(match.group(1)) < 1 or match.group(3) == "0":
        raise ValueError(f"must be {RATE_FORMAT}, with N and B 1 or more (got {text!r})")
    count, unit, burst = match.groups()
    chosen = int(burst) if burst else default_burst or int(count)
    return Rate(int(count), _PERIODS[unit.lower()], chosen)


# A budget's amount: a number and its unit, `2usd` or `500000tokens` (any case, spaced).
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(usd|tokens)\s*$", re.IGNORECASE)


def budget_amount(value: str | None) -> str | None:
    """A budget's amount in its one form (`2usd`, `500000tokens`); None when empty.
    ValueError names what was wrong (GATEWAY_BUDGET_* and settings by scope alike)."""
    if value is None or not value.strip():
        return None
    match = _AMOUNT.match(value)
    if not match or float(match[1]) <= 0:
        raise ValueError(
            f"must be an amount above 0 in usd or tokens, such as 2usd (got {value!r})"
        )
    return f"{match[1]}{match[2].lower()}"


# The spend keys a call touches, in the script's order: (scope, period).
SLOTS = (("user", "daily"), ("user", "monthly"), ("workspace", "daily"), ("workspace", "monthly"))


@dataclass(frozen=True, slots=True)
class Budget:
    """A spend cap's amount: its limit in its unit."""

    limit: float
    unit: str  # "usd" or "tokens"

    @classmethod
    def parse(cls, text: str | None) -> Budget | None:
        """The amount `budget_amount` wrote; None when `text` is not one (no budget)."""
        match = _AMOUNT.match(text or "")
        return cls(float(match[1]), match[2].lower()) if match else None

    def __str__(self) -> str:
        return f"${self.limit:,.2f}" if self.unit == "usd" else f"{self.limit:,.0f} tokens"
