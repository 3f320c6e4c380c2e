"""Settings by scope against a real Redis: resolution, unset, refusals, versions."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.errors import ConfigError
from gateway.settings.scoped import (
    ENVIRONMENT,
    ScopedSettings,
    enclosing_scopes,
    parse_scope,
    validate,
)
from gateway.settings.values import Budget
from tests.support.helpers import settings

THREAD = "slack:T1:C1:1710000000.000100"


@pytest.fixture
async def scoped(redis_url: str, redis_client: aioredis.Redis) -> ScopedSettings:
    env = settings(redis_url, GATEWAY_MODEL="env-model", GATEWAY_BUDGET_USER_DAILY="5usd")
    store = ScopedSettings(redis_client, env)
    await store.load()
    return store


def test_a_session_is_in_its_thread_channel_workspace_and_platform() -> None:
    assert enclosing_scopes(THREAD) == [THREAD, "slack:T1:C1", "slack:T1", "slack"]
    assert enclosing_scopes("telegram:42:42") == ["telegram:42:42", "telegram:42", "telegram"]


@pytest.mark.parametrize(
    ("scope", "setter"),
    [
        ("slack", "platform"),
        ("slack:T1", "workspace"),
        ("slack:T1:C1", "channel"),
        (THREAD, "thread"),
    ],
)
async def test_the_most_specific_scope_that_sets_a_key_wins(
    scoped: ScopedSettings, scope: str, setter: str
) -> None:
    for outer in enclosing_scopes(THREAD)[::-1]:
        await scoped.set(outer, "system_prompt", f"prompt of {outer}")
        if outer == scope:
            break
    effective = scoped.resolve(THREAD)
    assert effective.system_prompt == f"prompt of {scope}", setter
    assert effective.source("system_prompt") == scope
    assert effective.model == "env-model" and effective.source("model") == ENVIRONMENT


async def test_unset_falls_back_to_the_next_scope_then_the_environment(
    scoped: ScopedSettings,
) -> None:
    await scoped.set("slack:T1", "model", "workspace-model")
    await scoped.set("slack:T1:C1", "model", "channel-model")
    assert scoped.resolve(THREAD).model == "channel-model"
    assert await scoped.unset("slack:T1:C1", "model")
    assert scoped.resolve(THREAD).model == "workspace-model"
    assert await scoped.unset("slack:T1", "model")
    assert not await scoped.unset("slack:T1", "model")  # nothing left to remove
    effective = scoped.resolve(THREAD)
    assert effective.model == "env-model" and not effective.scoped


async def test_other_channels_and_platforms_keep_their_own(scoped: ScopedSettings) -> None:
    await scoped.set("slack:T1:C1", "token_budget", "5000")
    assert scoped.resolve("slack:T1:C2").token_budget is None
    assert scoped.resolve("telegram:T1:C1").token_budget is None
    assert scoped.resolve("slack:T1:C1").token_budget == 5000


async def test_side_model_follows_the_scope_model_unless_set(scoped: ScopedSettings) -> None:
    await scoped.set("slack", "model", "platform-model")
    assert scoped.resolve(THREAD).side_model == "platform-model"
    await scoped.set("slack:T1", "side_model", "side")
    assert scoped.resolve(THREAD).side_model == "side"


async def test_budgets_by_scope_over_the_environment(scoped: ScopedSettings) -> None:
    await scoped.set("slack:T1:C1", "budget_workspace_monthly", "1000 Tokens")
    budgets = scoped.resolve(THREAD).budgets
    assert budgets == (Budget(5.0, "usd"), None, None, Budget(1000.0, "tokens"))


async def test_tools_allow_names_or_servers_or_none(scoped: ScopedSettings) -> None:
    assert scoped.resolve(THREAD).allows_tool("files__read", "files")  # unset: all
    await scoped.set("slack:T1", "tools", "files, web__fetch")
    effective = scoped.resolve(THREAD)
    assert effective.allows_tool("files__read", "files")
    assert effective.allows_tool("web__fetch", "web")
    assert not effective.allows_tool("web__post", "web")
    await scoped.set("slack:T1:C1", "tools", "NONE")
    assert not scoped.resolve(THREAD).allows_tool("files__read", "files")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model", "two words"),
        ("model", ""),
        ("token_budget", "0"),
        ("token_budget", "lots"),
        ("tools", ","),
        ("tools", "files;rm"),
        ("budget_user_daily", "2 euros"),
        ("budget_workspace_monthly", "0usd"),
        ("system_prompt", " "),
        ("feedback", "yes"),
        ("feedback", ""),
    ],
)
async def test_a_bad_value_is_refused_in_one_line_naming_its_key(
    scoped: ScopedSettings, key: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: ") as refused:
        await scoped.set("slack:T1", key, value)
    assert "\n" not in str(refused.value)
    assert scoped.at("slack:T1") == {}


async def test_feedback_is_on_or_off_by_scope_over_gateway_feedback(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    scoped = ScopedSettings(redis_client, settings(redis_url, GATEWAY_FEEDBACK="Telegram"))
    await scoped.load()
    telegram, discord = "telegram:1:42", "discord:9:7"
    assert scoped.resolve(telegram).feedback("telegram")
    assert not scoped.resolve(discord).feedback("discord")
    assert scoped.resolve(discord).shown("feedback") == "telegram"
    await scoped.set("telegram:1", "feedback", "OFF")
    await scoped.set("discord:9:7", "feedback", "on")
    assert not scoped.resolve(telegram).feedback("telegram")
    assert scoped.resolve(discord).feedback("discord")
    assert scoped.resolve(discord).shown("feedback") == "on"


def test_budgets_take_the_environment_syntax() -> None:
    assert validate("budget_user_daily", " 2.5USD ") == "2.5usd"


def test_an_unknown_key_or_a_malformed_scope_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        validate("colour", "red")
    for scope in ("", "slack::C1", "slack:T1 x", "a:b:c:d:e"):
        with pytest.raises(ConfigError, match="scope must be"):
            parse_scope(scope)
    assert parse_scope("Slack:T1") == "slack:T1"


async def test_another_process_change_is_seen_once_its_version_is(
    scoped: ScopedSettings, redis_url: str, redis_client: aioredis.Redis
) -> None:
    elsewhere = ScopedSettings(redis_client, scoped.settings)
    await elsewhere.load()
    await elsewhere.set("slack:T1:C1", "model", "new-model")
    assert scoped.resolve(THREAD).model == "env-model"  # not yet told
    assert elsewhere.version is not None
    await scoped.seen(elsewhere.version)
    assert scoped.resolve(THREAD).model == "new-model"
    await elsewhere.unset("slack:T1:C1", "model")
    await scoped.fresh()
    assert scoped.resolve(THREAD).model == "env-model"
