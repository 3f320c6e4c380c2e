"""Hash counters gathered, then written in one step.

A finished model call adds to a dozen hashes (its usage by scope, the `/metrics`
counters, the spend its budgets count) and lets go of what its budgets held.
`Counters` gathers those writes with the names of the Redis commands they stand
for, and `write` sends them as one call of `bump.lua`: atomic like the MULTI it
replaces, at one command's cost to the client (a MULTI of thirty commands packs
and parses each of them, about 0.8 ms of the worker's event loop per call).
The `/metrics` writers (`gateway/metrics.py`) send theirs the same way.
"""

from __future__ import annotations

import json

from redis.exceptions import ResponseError

from gateway.state.scripts import BoundScript, load

BUMP = load("bump")


class Counters:
    """Additions to hash fields and expiries, in the order they are asked for."""

    def __init__(self) -> None:
        self._keys: dict[str, int] = {}
        self._ops: list[tuple[str, int, str, str]] = []

    def hincrby(self, key: str, field: str, amount: int) -> None:
        self._add("i", key, field, str(int(amount)))

    def hincrbyfloat(self, key: str, field: str, amount: float) -> None:
        self._add("f", key, field, repr(float(amount)))

    def expire(self, key: str, seconds: int) -> None:
        self._add("x", key, "", str(int(seconds)))

    async def write(self, bump: BoundScript) -> None:
        """All of them, in one step (`bump`: the script bound to a client, `BUMP.bind`);
        nothing is sent when nothing was asked. The operations go as one JSON argument:
        a hundred arguments would cost the client more to pack than the MULTI saved."""
        if not self._ops:
            return
        _, failed = await bump(keys=list(self._keys), args={"ops": json.dumps(self._ops)})
        if failed:  # the others were written, as a MULTI writes around a failed command
            raise ResponseError(f"{len(self._ops)} counter writes, one refused: {failed}")

    def _add(self, kind: str, key: str, field: str, amount: str) -> None:
        index = self._keys.setdefault(key, len(self._keys) + 1)
        self._ops.append((kind, index, field, amount))
