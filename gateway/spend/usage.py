"""Usage and cost of every model call, per user, session, workspace and model, by UTC day.

Each is a hash (`Keys.usage`) of fields `<day>|<part>`: `prompt` and
`completion` tokens, `calls`, `cost` (USD, of the calls with a price) and
`unpriced` (calls whose cost is unknown: a local model, the `echo` model).
One call is written in one step (`gateway/state/counters.py`), with its `/metrics`
counters (by platform, workspace and model: never by user, which would grow without
bound), and every hash it touches lives on for `RETENTION` after its last write.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.models import Charge, ModelCall, Usage
from gateway.spend.budgets import add_use, settling
from gateway.state.counters import BUMP, Counters
from gateway.state.keys import Keys

log = logging.getLogger(__name__)

RETENTION = 400 * 86_400
SCOPES = ("user", "session", "workspace", "model")
PARTS = ("prompt", "completion", "calls", "cost", "unpriced")


@dataclass
class Totals:
    """Tokens, calls and cost over some days; `unpriced` calls are not in `cost`."""

    prompt: int = 0
    completion: int = 0
    calls: int = 0
    cost: float = 0.0
    unpriced: int = 0

    def add(self, part: str, raw: str) -> None:
        if part == "cost":
            self.cost += float(raw)
        elif part in PARTS:
            setattr(self, part, getattr(self, part) + int(raw))

    @property
    def cost_text(self) -> str:
        """ "$0.0123", "cost unknown", or both when some calls had no price."""
        if self.unpriced and not self.calls - self.unpriced:
            return "cost unknown"
        known = f"${self.cost:.4f}"
        return f"{known} (+ cost unknown for {self.unpriced} calls)" if self.unpriced else known

    def as_dict(self) -> dict[str, object]:
        cost = None if self.unpriced and self.calls == self.unpriced else round(self.cost, 6)
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "calls": self.calls,
            "cost_usd": cost,
            "unpriced_calls": self.unpriced,
        }


def day_of(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%d")


def counted_ids(charge: Charge) -> dict[str, str]:
    """The ids a call is counted under; the session key names its platform and workspace."""
    platform, workspace, _ = [*charge.session_key.split(":", 2), "", ""][:3]
    ids = {
        "session": charge.session_key,
        "workspace": f"{platform}:{workspace}",
    }
    if charge.user:
        ids["user"] = f"{platform}:{charge.user}"
    return ids


class UsageLedger:
    """Writes each call's usage; reads it back for `/usage` and `gateway usage`."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._bump = BUMP.bind(redis)

    async def record(self, call: ModelCall, usage: Usage, now: dt.datetime | None = None) -> None:
        """Count a finished call against its charge (a call without one is not counted)."""
        if call.charge is None:
            return
        hold = settling(call)  # taken before anything is awaited
        now = now or dt.datetime.now(dt.UTC)
        day = day_of(now)
        ids = counted_ids(call.charge) | {"model": call.model}
        platform, workspace = ids["workspace"].split(":", 1)
        labels = f"{platform}|{workspace}|{call.model}"
        counters = Counters()
        for scope, ident in ids.items():
            key = Keys.usage(scope, ident)
            counters.hincrby(key, f"{day}|prompt", usage.prompt_tokens)
            counters.hincrby(key, f"{day}|completion", usage.completion_tokens)
            counters.hincrby(key, f"{day}|calls", 1)
            if usage.cost is None:
                counters.hincrby(key, f"{day}|unpriced", 1)
            else:
                counters.hincrbyfloat(key, f"{day}|cost", usage.cost)
            counters.expire(key, RETENTION)
        counters.hincrby(Keys.METRICS, f"usage_tokens|prompt|{labels}", usage.prompt_tokens)
        counters.hincrby(Keys.METRICS, f"usage_tokens|completion|{labels}", usage.completion_tokens)
        if usage.cost is None:
            counters.hincrby(Keys.METRICS, f"usage_unpriced|{labels}", 1)
        else:
            counters.hincrbyfloat(Keys.METRICS, f"usage_cost|{labels}", usage.cost)
        tokens = usage.prompt_tokens + usage.completion_tokens
        add_use(counters, call.charge, tokens, usage.cost, now)
        if hold is not None:
            hold.settle(counters)  # the use is counted: what the call held is let go of
        await counters.write(self._bump)

    async def safely(self, call: ModelCall, usage: Usage) -> None:
        """`record`, for a call whose answer is already given: Redis being down loses
        this count (said in the log), never the answer."""
        try:
            await self.record(call, usage)
        except RedisError as exc:
            log.warning("usage of a %s call not recorded: %s", call.model, exc)

    async def totals(self, scope: str, ident: str, since: str, until: str = "9999") -> Totals:
        """`ident`'s usage from day `since` through `until` (inclusive, "YYYY-MM-DD")."""
        fields = cast(dict[str, str], await self.redis.hgetall(Keys.usage(scope, ident)))
        return _sum(fields.items(), since, until)

    async def by(self, scope: str, since: str) -> dict[str, Totals]:
        """Every id of `scope` with usage since `since`, and its totals."""
        prefix = Keys.usage(scope, "")
        found: dict[str, Totals] = {}
        async for key in self.redis.scan_iter(match=f"{prefix}*", count=500):
            fields = cast(dict[str, str], await self.redis.hgetall(key))
            totals = _sum(fields.items(), since, "9999")
            if totals.calls:
                found[str(key)[len(prefix) :]] = totals
        return dict(sorted(found.items()))

    async def by_day(self, scope: str, since: str) -> dict[str, Totals]:
        """Every day since `since` with usage, and the totals of all ids of `scope` on it."""
        prefix = Keys.usage(scope, "")
        found: dict[str, Totals] = {}
        async for key in self.redis.scan_iter(match=f"{prefix}*", count=500):
            fields = cast(dict[str, str], await self.redis.hgetall(key))
            for field, raw in fields.items():
                day, _, part = field.partition("|")
                if day >= since:
                    found.setdefault(day, Totals()).add(part, raw)
        return dict(sorted(found.items()))


def _sum(fields: Iterable[tuple[str, str]], since: str, until: str) -> Totals:
    totals = Totals()
    for field, raw in fields:
        day, _, part = field.partition("|")
        if since <= day <= until:
            totals.add(part, raw)
    return totals


async def usage_text(
    ledger: UsageLedger, session_key: str, user: str, now: dt.datetime | None = None
) -> str:
    """What `/usage` answers: `user`'s usage today and this month, and the
    conversation's this month."""
    today = day_of(now or dt.datetime.now(dt.UTC))
    month = today[:8] + "01"
    ids: Mapping[str, str] = counted_ids(Charge(session_key, user, "usage"))
    user_id = ids.get("user", "")
    yours_today = await ledger.totals("user", user_id, today, today)
    yours_month = await ledger.totals("user", user_id, month)
    here = await ledger.totals("session", ids["session"], month)
    return "\n".join(
        (
            f"Your usage today: {_line(yours_today)}",
            f"Your usage this month: {_line(yours_month)}",
            f"This conversation this month: {_line(here)}",
        )
    )


def _line(totals: Totals) -> str:
    if not totals.calls:
        return "nothing yet"
    tokens = totals.prompt + totals.completion
    return (
        f"{tokens:,} tokens ({totals.prompt:,} in, {totals.completion:,} out), {totals.cost_text}"
    )
