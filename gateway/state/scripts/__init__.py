"""The Lua scripts, one file each, loaded once and called with named keys and arguments.

Each file opens with two comment lines that name its keys and arguments, in
the order the script reads them:

    -- KEYS: lease queued inbox
    -- ARGV: token ttl_ms

A trailing `...` on the ARGV line takes any number of further arguments (as
field/value pairs, say); a KEYS line of `...` alone, a list of any keys (a script
that writes wherever its arguments say, as `bump.lua` does). An optional third
line, `-- USES: turn_job`, names snippets of shared local functions (files
without a header, Lua scripts cannot call each other) placed before the script's
own source when it is loaded. `Script.bind(redis)` registers the source with
that client (EVALSHA, loading it on first use); the bound script takes mappings
and refuses a missing or unknown name, so no call site can pass them out of order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from redis.asyncio import Redis

Arg = str | int | float


@dataclass(frozen=True, slots=True)
class Script:
    """One script's source and the names of its keys and arguments."""

    name: str
    source: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    variadic: bool = False
    any_keys: bool = False  # KEYS: ... (called with a list of keys, not names)

    def bind(self, redis: Redis) -> BoundScript:
        return BoundScript(self, redis)


class BoundScript:
    """A script registered with one client."""

    def __init__(self, script: Script, redis: Redis) -> None:
        self.script = script
        self.redis = redis
        self._call = redis.register_script(script.source)

    async def __call__(
        self,
        keys: Mapping[str, str] | Sequence[str],
        args: Mapping[str, Arg] | None = None,
        rest: Sequence[Arg] = (),
    ) -> Any:
        values = args or {}
        if isinstance(keys, Mapping) == self.script.any_keys:
            wanted = "a list of keys" if self.script.any_keys else "keys by name"
            raise TypeError(f"script {self.script.name} takes {wanted}")
        if isinstance(keys, Mapping):
            _check(self.script.name, "keys", self.script.keys, keys)
            keys = [keys[name] for name in self.script.keys]
        _check(self.script.name, "args", self.script.args, values)
        if rest and not self.script.variadic:
            raise TypeError(f"script {self.script.name} takes no further arguments")
        ordered = [values[name] for name in self.script.args]
        return await self._call(keys=list(keys), args=[*ordered, *rest])


def _check(script: str, what: str, expected: Sequence[str], given: Mapping[str, Any]) -> None:
    if set(given) != set(expected):
        missing = sorted(set(expected) - set(given))
        unknown = sorted(set(given) - set(expected))
        raise TypeError(f"script {script}: {what} missing {missing}, unknown {unknown}")


@cache
def load(name: str) -> Script:
    """The script in `<name>.lua` beside this module (read once per process)."""
    source = _read(name)
    lines = source.splitlines()
    header = dict(_header_line(line) for line in lines[:2])
    if len(lines) > 2 and lines[2].startswith("-- USES:"):
        source = "\n".join([*(_read(used) for used in lines[2][8:].split()), source])
    keys = tuple(header.get("KEYS", "").split())
    args = header.get("ARGV", "").split()
    variadic = bool(args) and args[-1] == "..."
    any_keys = keys == ("...",)
    return Script(
        name,
        source,
        () if any_keys else keys,
        tuple(args[:-1] if variadic else args),
        variadic,
        any_keys,
    )


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


def _header_line(line: str) -> tuple[str, str]:
    if not line.startswith("-- KEYS:") and not line.startswith("-- ARGV:"):
        raise ValueError(f"a script must open with '-- KEYS:' and '-- ARGV:' lines: {line!r}")
    label, _, names = line[3:].partition(":")
    return label, names.strip()
