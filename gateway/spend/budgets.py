"""Budgets: daily and monthly caps per user and per workspace, in USD or tokens.

Before a main turn or a side question calls its model, one script checks every
budget of its user and workspace and holds an estimate (the request's tokens
and its most output) on each, atomically across workers: calls in flight count
against the cap, so many at once overshoot it by no more than they hold. The
use itself is added by `UsageLedger.record` as the first call ends, and the hold,
carried on the call (`ModelCall.hold`), is settled in the same step (one round trip,
not two); a turn whose call
never ended lets go of its hold when it is done. A settlement whose write failed
(Redis away) leaves the hold until its period's key expires. At 80% of a budget
the user is told once; at 100% the call is refused with one line that names the
budget and when it resets.

A call whose cost is unknown adds its tokens, and nothing to a USD budget. A hold
whose worker died is let go of when its period's key expires.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.errors import BudgetExceeded
from gateway.models import Charge, Message, ModelCall
from gateway.models.cost import Prices
from gateway.settings.env import Settings
from gateway.settings.values import SLOTS, Budget
from gateway.state.counters import BUMP, Counters
from gateway.state.keys import Keys, by_slot, on_cluster
from gateway.state.scripts import load

DAY_TTL, MONTH_TTL = 2 * 86_400, 32 * 86_400
DEFAULT_OUTPUT = 4096  # a call's most output when no GATEWAY_MAX_TOKENS bounds it


@dataclass(slots=True)
class Hold:
    """What one call holds on the spend keys that have a budget, until it is settled
    (with its call's use) or let go of."""

    charge: Charge
    keys: tuple[str, ...]  # those with a budget: the script held on these alone
    tokens: int
    usd: float
    warning: str | None = None
    settled: bool = False

    def settle(self, counters: Counters) -> None:
        """Let go of the hold in the same step as the caller's other counters."""
        for key in self.keys:
            counters.hincrbyfloat(key, "held_tokens", -self.tokens)
            counters.hincrbyfloat(key, "held_usd", -self.usd)


def settling(call: ModelCall) -> Hold | None:
    """The unsettled hold `call` carries for its own charge, if any, marked settled now,
    before anything is awaited: whoever took it (the call's usage write, or the turn's
    end letting go) settles it, and the other finds nothing to do."""
    hold = call.hold
    if not isinstance(hold, Hold) or hold.settled or hold.charge != call.charge:
        return None
    hold.settled = True
    return hold


def spend_keys(charge: Charge, now: dt.datetime) -> tuple[str, ...]:
    """The user's and the workspace's spend keys of `now`'s day and month, in SLOTS order."""
    platform, workspace = [*charge.session_key.split(":", 2), "", ""][:2]
    day = now.astimezone(dt.UTC).strftime("%Y-%m-%d")
    ids = {"user": f"{platform}:{charge.user}", "workspace": f"{platform}:{workspace}"}
    return tuple(
        Keys.spend(scope, ids[scope], day if period == "daily" else day[:7])
        for scope, period in SLOTS
    )


class Budgets:
    """The budgets of the settings, checked and held before turns and side questions."""

    def __init__(
        self, redis: Redis, budgets: Sequence[Budget | None], prices: Prices | None = None
    ) -> None:
        self.redis = redis
        self.budgets = tuple(budgets)
        self.prices = prices or {}
        self._hold = load("budget_hold").bind(redis)
        self._bump = BUMP.bind(redis)

    @classmethod
    def of(cls, redis: Redis, settings: Settings) -> Budgets | None:
        """The settings' budgets, or None when none is set."""
        found = [
            Budget.parse(getattr(settings, f"budget_{scope}_{period}")) for scope, period in SLOTS
        ]
        return cls.priced(redis, settings).limited(found)

    @classmethod
    def priced(cls, redis: Redis, settings: Settings) -> Budgets:
        """No budget yet, at the settings' prices: `limited` gives each call its own."""
        prices = {name: price.per_token() for name, price in settings.model_prices.items()}
        return cls(redis, (), prices)

    def limited(self, budgets: Sequence[Budget | None]) -> Budgets | None:
        """These prices and this script with `budgets` (a session's, by scope: a copy,
        no new script), or None when none is set."""
        if not any(budgets):
            return None
        if tuple(budgets) == self.budgets:
            return self
        other = copy.copy(self)
        other.budgets = tuple(budgets)
        return other

    async def hold_call(
        self, charge: Charge, model: str, messages: Sequence[Message], max_output: int | None
    ) -> Hold:
        """`hold` with a call's estimate: its request's tokens (about 4 characters each)
        and its most output; in USD only at a price set in GATEWAY_MODEL_PRICES (the
        worker has no price map: a call of another model holds tokens alone)."""
        prompt = len(json.dumps(list(messages), ensure_ascii=False)) // 4
        output = max_output or DEFAULT_OUTPUT
        per_input, per_output = self.prices.get(model, (0.0, 0.0))
        return await self.hold(charge, prompt + output, prompt * per_input + output * per_output)

    async def hold(
        self, charge: Charge, tokens: int, usd: float, now: dt.datetime | None = None
    ) -> Hold:
        """Check every budget and hold the estimate; BudgetExceeded when one is used up."""
        now = now or dt.datetime.now(dt.UTC)
        keys = spend_keys(charge, now)
        terms: list[list[str | float]] = [
            [budget.limit, budget.unit, ttl] if budget else [0, "tokens", ttl]
            for budget, ttl in zip(self.budgets, (DAY_TTL, MONTH_TTL) * 2, strict=True)
        ]
        verdict, index = await self._check_and_hold(keys, terms, tokens, usd)
        if verdict == "over":
            raise BudgetExceeded(self._text(index, now, "is used up"))
        warning = self._text(index, now, "is 80% used") if index >= 0 else None
        held = tuple(key for key, budget in zip(keys, self.budgets, strict=True) if budget)
        return Hold(charge, held, tokens, usd, warning)

    async def _check_and_hold(
        self, keys: Sequence[str], terms: Sequence[list[str | float]], tokens: int, usd: float
    ) -> tuple[str, int]:
        """`budget_hold.lua` on the keys: ("over", the budget used up) or ("ok", the first
        to warn of, -1 for none). One call on a single Redis; on a cluster one per slot
        (the user's keys, then the workspace's), and when a later one refuses, what the
        earlier ones held is let go of in another step. If that step never runs (the
        process dies between), the hold stays until its period's key expires, as the
        hold of a worker that died mid-call does."""
        groups = by_slot(keys) if on_cluster(self.redis) else [list(range(len(keys)))]
        args = {"tokens": tokens, "usd": usd}
        warn, held = -1, list[str]()
        for group in groups:
            rest = [term for position in group for term in terms[position]]
            verdict, index = await self._hold(keys=[keys[p] for p in group], args=args, rest=rest)
            found = group[int(index) - 1] if int(index) else -1
            if verdict == "over":
                await self._let_go(held, tokens, usd)
                return "over", found
            warn = warn if warn >= 0 else found
            held += [keys[p] for p in group if terms[p][0]]
        return "ok", warn

    async def _let_go(self, keys: Sequence[str], tokens: int, usd: float) -> None:
        if keys:
            counters = Counters()
            Hold(Charge("", "", ""), tuple(keys), tokens, usd).settle(counters)
            await counters.write(self._bump)

    async def release(self, hold: Hold) -> None:
        """Let go of what a call held, unless its usage write settled it already."""
        if hold.settled:
            return
        hold.settled = True
        counters = Counters()
        hold.settle(counters)
        await counters.write(self._bump)

    def _text(self, slot: int, now: dt.datetime, state: str) -> str:
        scope, period = SLOTS[slot]
        whose = "Your" if scope == "user" else "This workspace's"
        return f"{whose} {period} budget ({self.budgets[slot]}) {state}; {_resets(period, now)}."


@asynccontextmanager
async def spend_hold(caps: Budgets | None, call: ModelCall) -> AsyncIterator[Hold | None]:
    """`call`'s budgets held while it runs (None without budgets); BudgetExceeded when
    one is used up. The call made carries the hold (`ModelCall.hold`), so that its
    usage write settles it."""
    if caps is None or call.charge is None:
        yield None
        return
    hold = await caps.hold_call(call.charge, call.model, call.messages, call.max_tokens)
    try:
        yield hold
    finally:
        await caps.release(hold)


def _resets(period: str, now: dt.datetime) -> str:
    if period == "daily":
        return "it resets at 00:00 UTC"
    first = (now.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    return f"it resets on {first:%Y-%m-%d} at 00:00 UTC"


def add_use(
    counters: Counters, charge: Charge, tokens: int, usd: float | None, now: dt.datetime
) -> None:
    """A finished call's use, added to its spend keys in the same step as the caller's
    other counters (a call for nobody in particular, a summary, only to its workspace's)."""
    keys = spend_keys(charge, now)
    for (scope, _), key, ttl in zip(SLOTS, keys, (DAY_TTL, MONTH_TTL) * 2, strict=True):
        if scope == "user" and not charge.user:
            continue
        counters.hincrby(key, "tokens", tokens)
        if usd:
            counters.hincrbyfloat(key, "usd", usd)
        counters.expire(key, ttl)
