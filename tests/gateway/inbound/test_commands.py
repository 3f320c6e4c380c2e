"""Chat commands as the gateway reads them from a message's text."""

from __future__ import annotations

import pytest

from gateway.inbound.commands import HELP_TEXT, MENU, NAMES, Command, parse


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/btw what did we decide?", Command("btw", "what did we decide?")),
        ("!btw in a thread", Command("btw", "in a thread")),
        ("  /STOP  ", Command("stop", "")),
        ("/new", Command("reset", "")),
        ("/status@gw_test_bot", Command("status", "")),
        ("/config set model\nopenai/x", Command("config", "set model\nopenai/x")),
    ],
)
def test_a_command_is_its_name_and_the_rest_of_the_text(text: str, expected: Command) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    ["hello /stop", "/stopping now", "!stop", "/frobnicate", "/", "", "/btw@", "btw"],
)
def test_other_texts_are_not_commands(text: str) -> None:
    assert parse(text) is None


def test_the_help_names_every_command_and_the_menu_only_known_ones() -> None:
    for name in NAMES - {"new"}:
        assert f"/{name}" in HELP_TEXT
    assert {name for name, _ in MENU} <= NAMES
