"""Hash counters gathered, then written in one step.

A finished model call adds to a dozen hashes (its usage by scope, the `/metrics`
counters, the spend its budgets count) and lets go of what its budgets held.
`Counters` gathers those writes with the names of the Redis commands they stand
for, and `write` sends them as one call of `bump.lua`: atomic like the MULTI it
replaces, at one command's cost to the client (a MULTI of thirty commands packs
and parses each of them, about 0.8 ms of the worker's event loop per call).
The `/metrics` writers (`gateway/metrics.py`) send theirs the same way.

On a Redis Cluster the hashes of one call are in several slots (a user's, a
session's, a workspace's, the global `/metrics`): `write` then sends one call per
slot, all at once. Each is atomic; together they are not: a process that dies
while they are on their way may leave one scope counted and another not (usage
is a report; what budgets hold and use of one owner is always in one slot).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from redis.exceptions import ResponseError

from gateway.state.keys import by_slot, on_cluster
from gateway.state.scripts import BoundScript, load

BUMP = load("bump")


class Counters:
    """Additions to hash fields and expiries, in the order they are first asked for; two
    additions to one field are one addition of their sum (an expiry: the last asked)."""

    def __init__(self) -> None:
        self._keys: dict[str, int] = {}
        self._ops: dict[tuple[str, int, str], float] = {}

    def __bool__(self) -> bool:
        return bool(self._ops)

    def hincrby(self, key: str, field: str, amount: int) -> None:
        self._add("i", key, field, int(amount))

    def hincrbyfloat(self, key: str, field: str, amount: float) -> None:
        self._add("f", key, field, float(amount))

    def expire(self, key: str, seconds: int) -> None:
        self._add("x", key, "", int(seconds))

    def merge(self, other: Counters) -> None:
        """`other`'s additions and expiries, added to these."""
        keys = list(other._keys)
        for (kind, index, field), amount in other._ops.items():
            self._add(kind, keys[index - 1], field, amount)

    async def write(self, bump: BoundScript) -> None:
        """All of them, in one step (`bump`: the script bound to a client, `BUMP.bind`);
        nothing is sent when nothing was asked. The operations go as one JSON argument:
        a hundred arguments would cost the client more to pack than the MULTI saved."""
        if not self._ops:
            return
        keys = list(self._keys)
        groups = by_slot(keys) if on_cluster(bump.redis) else [list(range(len(keys)))]
        calls = [self._call(bump, keys, group) for group in groups]
        refused = [failed for _, failed in await asyncio.gather(*calls) if failed]
        if refused:  # the others were written, as a MULTI writes around a failed command
            raise ResponseError(f"{len(self._ops)} counter writes, one refused: {refused[0]}")

    def _call(self, bump: BoundScript, keys: list[str], group: list[int]) -> Any:
        """One call of `bump` with the operations on the keys at `group`'s positions."""
        renumbered = {position + 1: index + 1 for index, position in enumerate(group)}
        ops = [
            (kind, renumbered[key], field, repr(amount) if kind == "f" else str(int(amount)))
            for (kind, key, field), amount in self._ops.items()
            if key in renumbered
        ]
        return bump(keys=[keys[position] for position in group], args={"ops": json.dumps(ops)})

    def _add(self, kind: str, key: str, field: str, amount: float) -> None:
        index = self._keys.setdefault(key, len(self._keys) + 1)
        op = (kind, index, field)
        held = self._ops.get(op)
        self._ops[op] = amount if held is None or kind == "x" else held + amount
