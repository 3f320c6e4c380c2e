"""Settings by scope: a platform's, a workspace's, a channel's or a conversation's own
    "feedback",
    *BUDGET_KEYS,
    "suggested_prompts",
)
FEEDBACK_SWITCH = ("on", "off")

A scope is a prefix of a session key (`platform:workspace:channel[:thread]`):
`slack`, `slack:T1`, `slack:T1:C1`, `slack:T1:C1:1710000000.000100`. A session
takes each setting from the most specific scope that sets it, else from the
environment (GATEWAY_*).

They are few, so every process keeps all of them in memory, loaded in one read
together with the version each change bumps. The claim script returns that
version with the session, so a turn learns of a change made by any process at
its next claim, at no extra round trip, and reloads before it prepares; jobs
that claim nothing (side questions, /status, /config) read the version with one
GET.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from gateway.errors import ConfigError
from gateway.settings.env import Settings
from gateway.settings.prompts import Prompt, parse_prompts, stored_prompts
from gateway.settings.values import SLOTS, Budget, budget_amount
from gateway.state import shards
from gateway.state.keys import Keys
from gateway.state.scripts import load

log = logging.getLogger(__name__)

BUDGET_KEYS = tuple(f"budget_{scope}_{period}" for scope, period in SLOTS)
KEYS = (
    "model",
    "side_model",
    "system_prompt",
    "token_budget",
    "tools",
    "feedback",
    *BUDGET_KEYS,
    "suggested_prompts",
)
FEEDBACK_SWITCH = ("on", "off")
ENVIRONMENT = "environment"
NO_TOOLS = "none"
MAX_PROMPT_CHARS = 20_000
_SCOPE_PART = re.compile(r"^[^\s|:]+$")
_MODEL = re.compile(r"^\S{1,200}$")
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def parse_scope(text: str) -> str:
    """A scope as typed (`slack:T1:C1`), checked; ConfigError names what is wrong."""
    platform, *rest = parts = text.strip().split(":", 3)
    if len(parts) > 4 or not all(_SCOPE_PART.match(part) for part in parts):
        raise ConfigError(
            f"scope must be platform[:workspace[:channel[:thread]]], such as slack:T1:C1 "
            f"(got {text!r})"
        )
    return ":".join([platform.lower(), *rest])


def enclosing_scopes(session_key: str) -> list[str]:
    """The scopes a session is in, most specific first."""
    parts = session_key.split(":", 3)
    return [":".join(parts[:length]) for length in range(len(parts), 0, -1)]


def validate(key: str, value: str) -> str:
    """`value` in its stored form; ConfigError, one line naming `key`, when it is not valid."""
    validate_key(key)
    try:
        return _CHECKS[key](value.strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _model(value: str) -> str:
    if not _MODEL.match(value):
        raise ValueError(f"must be a litellm model name such as openai/gpt-4o-mini (got {value!r})")
    return value


def _prompt(value: str) -> str:
    if not value or len(value) > MAX_PROMPT_CHARS:
        raise ValueError(f"must be 1 to {MAX_PROMPT_CHARS:,} characters")
    return value


def _token_budget(value: str) -> str:
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"must be a whole number of tokens, 1 or more (got {value!r})")
    return str(int(value))


def _tools(value: str) -> str:
    if value.lower() == NO_TOOLS:
        return NO_TOOLS
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names or not all(_TOOL.match(name) for name in names):
        raise ValueError(
            "must be `none` or comma-separated tool names (server__tool) or server names "
            f"(got {value!r})"
        )
    return ",".join(names)


def _feedback(value: str) -> str:
    if value.lower() not in FEEDBACK_SWITCH:
        raise ValueError(f"must be on or off (got {value!r})")
    return value.lower()


def _budget(value: str) -> str:
    amount = budget_amount(value)
    if amount is None:
        raise ValueError("must be an amount above 0 in usd or tokens, such as 2usd")
    return amount


_CHECKS: dict[str, Callable[[str], str]] = {
    "model": _model,
    "side_model": _model,
    "system_prompt": _prompt,
    "token_budget": _token_budget,
    "tools": _tools,
    "feedback": _feedback,
    **dict.fromkeys(BUDGET_KEYS, _budget),
    "suggested_prompts": parse_prompts,
}


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """One session's settings: what its scopes set (`values`, each from `sources[key]`),
    over the environment's."""

    env: Settings
    values: Mapping[str, str]
    sources: Mapping[str, str]

    @property
    def scoped(self) -> bool:
        """Whether any scope sets anything for this session."""
        return bool(self.values)

    @property
    def model(self) -> str:
        return self.values.get("model") or self.env.model

    @property
    def side_model(self) -> str:
        """The scope's side model; else GATEWAY_SIDE_MODEL; else the effective main model."""
        return self.values.get("side_model") or self.env.side_model_name or self.model

    @property
    def system_prompt(self) -> str:
        return self.values.get("system_prompt") or self.env.system_prompt

    def feedback(self, platform: str) -> bool:
        """Whether replies on `platform` carry feedback buttons: the scope's `feedback`
        (on or off), else GATEWAY_FEEDBACK (Slack's native streams carry them either way)."""
        found = self.values.get("feedback")
        if found:
            return found == "on"
        return platform in self.env.feedback_platforms

    @property
    def token_budget(self) -> int | None:
        """The scope's budget of history tokens; None: the environment's own rule."""
        found = self.values.get("token_budget")
        return int(found) if found else self.env.token_budget

    def allows_tool(self, name: str, server: str) -> bool:
        """Whether a tool (by its public name, or its server's) may be offered and run."""
        allowed = self.values.get("tools")
        if allowed is None:
            return True
        names = set(allowed.split(",")) - {NO_TOOLS}
        return name in names or server in names

    @property
    def budgets(self) -> tuple[Budget | None, ...]:
        """The daily and monthly caps, in `gateway.settings.values.SLOTS` order."""
        return tuple(
            Budget.parse(self.values.get(key) or getattr(self.env, key)) for key in BUDGET_KEYS
        )

    @property
    def suggested_prompts(self) -> tuple[Prompt, ...]:
        """What a new conversation offers (Slack's assistant threads): the scope's, else the
        built-in set; empty for `none`."""
        return stored_prompts(self.values.get("suggested_prompts"))

    def source(self, key: str) -> str:
        return self.sources.get(key, ENVIRONMENT)

    def shown(self, key: str) -> str:
        """The value as `show` and `/config` print it (the environment's, when unset)."""
        if key in self.values:
            return self.values[key]
        if key == "side_model":
            return self.side_model
        if key == "token_budget":
            return str(self.env.token_budget or "from the model's context window")
        if key == "tools":
            return "all" if self.env.mcp_config else "none configured"
        if key == "feedback":
            return ", ".join(sorted(self.env.feedback_platforms)) or "Slack's streams only"
        if key in BUDGET_KEYS:
            return str(getattr(self.env, key) or "none")
        if key == "suggested_prompts":
            return "the built-in set"
        return str(getattr(self, key))


class ScopedSettings:
    """Every scope's settings, kept in this process and reloaded when their version moves."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis, self.settings = redis, settings
        self.version: int | None = None  # None: not loaded yet
        self._by_scope: dict[str, dict[str, str]] = {}
        self._raise = load("raise_version").bind(redis)

    async def load(self) -> None:
        """Every scope's settings and their version, in one read."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(Keys.SETTINGS)
            pipe.get(Keys.SETTINGS_VERSION)
            raw, version = await pipe.execute()
        by_scope: dict[str, dict[str, str]] = {}
        for field, value in cast(dict[str, str], raw).items():
            scope, _, key = field.rpartition("|")
            by_scope.setdefault(scope, {})[key] = value
        self._by_scope, self.version = by_scope, int(version or 0)
        log.debug("settings by scope loaded at version %d", self.version)

    async def spread(self, version: int | None = None) -> None:
        """Raise every shard's copy of the version (what claims and ingest read, in
        their slot) to `version`, or to the stored one: a step after the change's own,
        idempotent. A change whose copies were not all raised (the process died
        between) is spread again by the next change, or by any worker's start."""
        if version is None:
            version = int(await self.redis.get(Keys.SETTINGS_VERSION) or 0)
        await asyncio.gather(
            *(
                self._raise(
                    keys={"version": Keys.shard_settings_version(shard)}, args={"value": version}
                )
                for shard in range(shards.count())
            )
        )

    async def seen(self, version: int) -> None:
        """A version read elsewhere (the claim's): reload when it is newer than the one held."""
        if self.version is None or version > self.version:
            await self.load()

    async def fresh(self) -> None:
        """Up to date, for a job that claims nothing: one GET, and a reload if it moved."""
        await self.seen(int(await self.redis.get(Keys.SETTINGS_VERSION) or 0))

    def resolve(self, session_key: str) -> SessionSettings:
        """The session's settings, from its most specific scope that sets each."""
        values: dict[str, str] = {}
        sources: dict[str, str] = {}
        for scope in reversed(enclosing_scopes(session_key)):
            for key, value in self._by_scope.get(scope, {}).items():
                values[key], sources[key] = value, scope
        return SessionSettings(self.settings, values, sources)

    def at(self, scope: str) -> dict[str, str]:
        """What `scope` itself sets."""
        return dict(self._by_scope.get(scope, {}))

    async def set(self, scope: str, key: str, value: str) -> str:
        """Set `key` at `scope` (ConfigError when it is not valid); returns the stored value."""
        stored = validate(key, value)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(Keys.SETTINGS, f"{scope}|{key}", stored)
            pipe.incr(Keys.SETTINGS_VERSION)
            _, version = await pipe.execute()
        await self.spread(int(version))
        await self.load()
        return stored

    async def unset(self, scope: str, key: str) -> bool:
        """Remove `key` at `scope`; False when the scope did not set it."""
        validate_key(key)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(Keys.SETTINGS, f"{scope}|{key}")
            pipe.incr(Keys.SETTINGS_VERSION)
            removed, version = await pipe.execute()
        await self.spread(int(version))
        await self.load()
        return bool(removed)


def shorten(value: str, limit: int) -> str:
    """A value as `show` and `/config` print it: one line, at most `limit` characters."""
    line = " ".join(value.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def validate_key(key: str) -> None:
    if key not in _CHECKS:
        raise ConfigError(f"unknown setting {key!r}; the settings are: {', '.join(KEYS)}")
