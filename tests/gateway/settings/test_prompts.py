"""The setting `suggested_prompts`: both forms an operator types, their refusals, and how a
session reads it (the scope's, the built-in set, or none)."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from gateway.errors import ConfigError
from gateway.settings.prompts import (
    DEFAULT_PROMPTS,
    MAX_PROMPTS,
    MESSAGE_CHARS,
    TITLE_CHARS,
    Prompt,
    parse_prompts,
)
from gateway.settings.scoped import ScopedSettings, validate
from tests.support.helpers import settings


def test_the_short_form_and_the_json_form_are_stored_as_one_json_list() -> None:
    short = validate("suggested_prompts", " Plan | Plan my  week ;Help|Help me; ")
    typed = json.dumps(
        [{"title": "Plan", "message": "Plan my week"}, {"title": "Help", "message": "Help me"}]
    )
    assert short == validate("suggested_prompts", typed) == typed
    assert validate("suggested_prompts", "NONE") == "none"


def test_json_keeps_the_characters_the_short_form_splits_on() -> None:
    typed = json.dumps([{"title": "A|B", "message": "one; two"}])
    assert json.loads(parse_prompts(typed)) == [{"title": "A|B", "message": "one; two"}]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("just some words", "has no `|` between title and message"),
        (
            ";".join(f"T{i}|m{i}" for i in range(MAX_PROMPTS + 1)),
            f"(got {MAX_PROMPTS + 1} prompts)",
        ),
        ("", "(got 0 prompts)"),
        ("|a message without a title", "a prompt's title must be 1 to"),
        ("A title|", "a prompt's message must be 1 to"),
        ("x" * (TITLE_CHARS + 1) + "|m", f"title must be 1 to {TITLE_CHARS} characters"),
        ("t|" + "m" * (MESSAGE_CHARS + 1), f"message must be 1 to {MESSAGE_CHARS} characters"),
        ('[{"title": "t"}]', "each item an object with a title and a message"),
        ("[not json", "not valid JSON"),
    ],
)
def test_a_malformed_value_is_refused_with_one_line_naming_the_forms(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate("suggested_prompts", value)
    line = str(refused.value)
    assert line.startswith("suggested_prompts: ") and says in line and "\n" not in line


async def test_a_session_reads_its_scope_s_prompts_else_the_built_in_set(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    scoped = ScopedSettings(redis_client, settings(redis_url))
    await scoped.load()
    assert scoped.resolve("slack:T1:D1:1.2").suggested_prompts == DEFAULT_PROMPTS
    assert scoped.resolve("slack:T1:D1:1.2").shown("suggested_prompts") == "the built-in set"
    await scoped.set("slack:T1", "suggested_prompts", "Go|Go on")
    await scoped.set("slack:T1:C2", "suggested_prompts", "none")
    assert scoped.resolve("slack:T1:D1:1.2").suggested_prompts == (Prompt("Go", "Go on"),)
    assert scoped.resolve("slack:T1:C2").suggested_prompts == ()
    assert scoped.resolve("slack:T2").suggested_prompts == DEFAULT_PROMPTS


def test_the_built_in_set_fits_the_limits() -> None:
    assert 1 <= len(DEFAULT_PROMPTS) <= MAX_PROMPTS
    stored = parse_prompts(
        json.dumps([{"title": p.title, "message": p.message} for p in DEFAULT_PROMPTS])
    )
    assert [Prompt(**item) for item in json.loads(stored)] == list(DEFAULT_PROMPTS)
