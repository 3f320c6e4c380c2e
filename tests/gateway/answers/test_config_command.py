"""`/config` in the core: parsing, what it shows, refusals where no one is an admin."""

from __future__ import annotations

import pytest

from gateway.answers.config_command import REFUSED, USAGE, ConfigRequest, parse
from gateway.inbound import commands
from gateway.settings.scoped import KEYS
from tests.support.harness import Harness, texts
from tests.support.helpers import inbound

PROMPT = "Be  brief.\nNo more."


@pytest.mark.parametrize(
    ("argument", "request_"),
    [
        ("", ConfigRequest("show")),
        ("show", ConfigRequest("show")),
        ("set model openai/x", ConfigRequest("set", "model", "openai/x")),
        (
            "SET system_prompt Be  brief.\nNo more.",
            ConfigRequest("set", "system_prompt", PROMPT),
        ),
        ("unset tools", ConfigRequest("unset", "tools")),
        ("set model", ConfigRequest("usage")),
        ("unset", ConfigRequest("usage")),
        ("colour", ConfigRequest("usage")),
    ],
)
def test_config_arguments_parse(argument: str, request_: ConfigRequest) -> None:
    assert parse(argument) == request_


def test_config_is_a_command_listed_in_help_and_menus() -> None:
    assert commands.parse("/config set model x") == commands.Command("config", "set model x")
    assert "/config" in commands.HELP_TEXT
    assert "config" in dict(commands.MENU)


async def test_config_shows_every_setting_and_refuses_changes_without_admins(
    harness: Harness,
) -> None:
    message = inbound("/config")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    shown = texts(harness.sender)[-1]
    assert shown.startswith("Settings here:")
    for key in KEYS:
        assert f"• {key}: " in shown
    assert "model: `openai/main-model` (the gateway's default)" in shown
    # The recording sender's platform says nobody administers it.
    change = inbound("/config set model openai/x")
    await harness.ingest.receive(change)
    await harness.idle(change.session_key)
    assert texts(harness.sender)[-1] == REFUSED
    wrong = inbound("/config frobnicate")
    await harness.ingest.receive(wrong)
    await harness.idle(wrong.session_key)
    assert texts(harness.sender)[-1] == USAGE
