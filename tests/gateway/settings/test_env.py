"""The environment's settings: GATEWAY_FEEDBACK's platforms, checked at start."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings.env import load_settings


def test_gateway_feedback_names_platforms_in_any_case() -> None:
    found = load_settings(_env_file=None, GATEWAY_FEEDBACK=" Telegram, discord ,slack")
    assert found.feedback_platforms == frozenset({"telegram", "discord", "slack"})
    assert load_settings(_env_file=None).feedback_platforms == frozenset()


@pytest.mark.parametrize("value", ["telegram,console", "whatsapp", "slack;discord"])
def test_gateway_feedback_with_another_platform_is_one_clear_line(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^GATEWAY_FEEDBACK: ") as refused:
        load_settings(_env_file=None, GATEWAY_FEEDBACK=value)
    message = str(refused.value)
    assert "\n" not in message and "telegram, discord, slack" in message
