"""The core's message types: the keys a conversation, a chat and a user are named by,
and that an adapter can build nothing the core does not expect."""

from __future__ import annotations

import pydantic
import pytest

from tests.support.helpers import inbound


def test_a_thread_is_a_conversation_of_its_own_in_its_channel() -> None:
    in_channel = inbound("hi", platform="slack", channel="C1")
    in_thread = inbound("hi", platform="slack", channel="C1", thread="1712.5")
    assert in_channel.session_key == "slack:W:C1"
    assert in_thread.session_key == "slack:W:C1:1712.5"
    assert in_thread.channel_key == in_channel.channel_key == "slack:W:C1"


def test_a_user_is_named_as_the_allowed_users_setting_names_them() -> None:
    assert inbound("hi", platform="telegram", user="42").user_key == "telegram:42"


def test_replies_are_paced_per_chat_whatever_the_thread() -> None:
    message = inbound("hi", platform="discord", channel="C9", thread="T1")
    assert message.reply.chat_key == "discord:W:C9"


def test_messages_are_frozen_and_take_no_unknown_fields() -> None:
    message = inbound("hi")
    with pytest.raises(pydantic.ValidationError):
        type(message).model_validate({**message.model_dump(), "colour": "blue"})
    with pytest.raises(pydantic.ValidationError):
        message.text = "changed"


def test_a_reply_token_is_never_shown_in_a_repr() -> None:
    address = inbound("hi").reply.model_copy(update={"token": "secret-interaction-token"})
    assert "secret-interaction-token" not in repr(address)
