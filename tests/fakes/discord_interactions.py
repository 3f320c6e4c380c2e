"""The fake Discord's application commands and interactions, a part of `FakeDiscord`.

Registration (the bulk overwrites, checked by `discord_rules`), the INTERACTION_CREATE
payloads tests dispatch (`interaction()` for `/btw`, `invoke()` for any registered
command where Discord would offer it, `click()` on a button), and the endpoints that
answer an interaction: its callback, then follow-ups through its webhook. Tokens can run
out (`expire()`); an interaction through a user install alone takes five follow-ups.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from tests.fakes import discord_rules
from tests.fakes.discord_responses import components_refused, error, json_response, public
from tests.fakes.discord_rules import GUILD_CONTEXT, PRIVATE_CHANNEL_CONTEXT, Refusal

MAX_USER_INSTALL_FOLLOWUPS = 5


class FakeInteractions:
    """Commands and interactions. `FakeDiscord` supplies the state below, and
    `snowflake()`, `dispatch()` and `_bot_message()`."""

    application_id: str
    messages: dict[str, dict[str, Any]]
    callbacks: dict[str, dict[str, Any]]
    commands: dict[str, list[dict[str, Any]]]
    _interactions: dict[str, dict[str, Any]]
    _expired: set[str]

    def interaction_routes(self) -> list[tuple[str, str, Any]]:
        """The REST routes this part answers, as `FakeDiscord._routes` lists them."""
        return [
            ("POST", r"/interactions/(\d+)/([^/]+)/callback", self._callback),
            ("POST", r"/webhooks/(\d+)/([^/]+)", self._followup),
            ("PATCH", r"/webhooks/(\d+)/([^/]+)/messages/(\d+|@original)", self._edit_followup),
            ("PUT", r"/applications/(\d+)/commands", self._register_global),
            ("PUT", r"/applications/(\d+)/guilds/(\d+)/commands", self._register_guild),
        ]

    def interaction(
        self,
        channel_id: str,
        question: str,
        user: dict[str, Any],
        *,
        guild_id: str | None = None,
        channel_type: int = 0,
        context: int | None = None,
        user_install: bool = False,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for `/btw question`.

        `context` is where it is used (0 a server, 1 the bot's DM, 2 another private
        channel: a group DM or a DM between two people); `user_install` says the
        app answers it as installed to the user's account, not to the server, so
        `authorizing_integration_owners` names the user alone.
        """
        interaction_id = self.snowflake()
        if context is None:
            context = GUILD_CONTEXT if guild_id else 1
        payload: dict[str, Any] = {
            "id": interaction_id,
            "application_id": self.application_id,
            "type": 2,
            "token": f"itoken-{interaction_id}",
            "version": 1,
            "data": {
                "id": "1",
                "name": "btw",
                "type": 1,
                "options": [{"name": "question", "type": 3, "value": question}],
            },
            "channel_id": channel_id,
            "channel": {
                "id": channel_id,
                "type": channel_type,
                "name": "general",
                "position": 0,
                "guild_id": guild_id,
            },
            "locale": "en-US",
            "app_permissions": "0",
            "attachment_size_limit": 8388608,
            "entitlements": [],
            "authorizing_integration_owners": (
                {"1": user["id"]} if user_install else {"0": guild_id or "0"}
            ),
            "context": context,
        }
        if guild_id:
            payload["guild_id"] = guild_id
            payload["member"] = {
                "user": user,
                "roles": [],
                "permissions": "2147483647",
                "joined_at": "2025-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        else:
            group = context == PRIVATE_CHANNEL_CONTEXT and channel_type == 3
            payload["channel"] = {"id": channel_id, "type": 3 if group else 1, "recipients": [user]}
            payload["user"] = user
        self._interactions[payload["token"]] = payload
        return payload

    def invoke(
        self,
        name: str,
        channel_id: str,
        user: dict[str, Any],
        *,
        guild_id: str | None = None,
        context: int | None = None,
        user_install: bool = False,
        question: str = "",
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for the registered command `name`, used where
        Discord offers it; an AssertionError when Discord would not offer it there (not
        registered, or not for this install type or context)."""
        payload = self.interaction(
            channel_id,
            question,
            user,
            guild_id=guild_id,
            context=context,
            user_install=user_install,
        )
        command = self._offered(name, guild_id, payload["context"], user_install)
        payload["data"] = {"id": command["id"], "name": name, "type": 1}
        if command.get("guild_id"):
            payload["data"]["guild_id"] = command["guild_id"]
        if command.get("options"):
            payload["data"]["options"] = [{"name": "question", "type": 3, "value": question}]
        return payload

    def _offered(
        self, name: str, guild_id: str | None, context: int, user_install: bool
    ) -> dict[str, Any]:
        scopes = [(guild_id, True)] if guild_id else []
        for scope, guild_scoped in [*scopes, ("global", False)]:
            for command in self.commands.get(scope or "", []):
                if command["name"] == name and discord_rules.usable(
                    command, guild_scoped=guild_scoped, context=context, user_install=user_install
                ):
                    return command
        raise AssertionError(f"Discord offers no /{name} there (context {context})")

    def expire(self, token: str) -> None:
        """Let an interaction's token run out (15 minutes, or 3 s without an answer)."""
        self._expired.add(token)

    def click(
        self, message_id: str, custom_id: str, user: dict[str, Any], *, guild_id: str | None = None
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for a click on a button of the bot's message."""
        message = public(self.messages[message_id])
        payload = self.interaction(message["channel_id"], "", user, guild_id=guild_id)
        payload["type"] = 3  # MESSAGE_COMPONENT
        payload["data"] = {"custom_id": custom_id, "component_type": 2}
        payload["message"] = message
        return payload

    # endpoints ---------------------------------------------------------

    async def _callback(
        self, request: web.Request, body: Any, interaction_id: str, token: str
    ) -> web.Response:
        interaction = self._interactions.get(token)
        if interaction is None or interaction["id"] != interaction_id or token in self._expired:
            return error(404, 10062, "Unknown interaction")
        if token in self.callbacks:
            return error(400, 40060, "Interaction has already been acknowledged.")
        refused = components_refused((body.get("data") or {}).get("components"))
        if refused is not None:
            return refused
        self.callbacks[token] = {**body, "at": time.time()}
        return json_response(
            {
                "interaction": {
                    "id": interaction_id,
                    "type": interaction["type"],
                    "response_message_loading": body.get("type") == 5,
                    "response_message_ephemeral": bool(
                        int((body.get("data") or {}).get("flags") or 0) & 64
                    ),
                },
                "resource": {"type": body.get("type")},
            }
        )

    async def _followup(
        self, request: web.Request, body: Any, app_id: str, token: str
    ) -> web.Response:
        interaction = self._interactions.get(token)
        if app_id != self.application_id or interaction is None or token not in self.callbacks:
            return error(404, 10015, "Unknown Webhook")
        if token in self._expired:
            return error(401, 50027, "Invalid Webhook Token")
        if self._followups_spent(interaction):
            return error(
                400, 40094, "This interaction has hit the maximum number of follow up messages"
            )
        refused = components_refused((body or {}).get("components"))
        if refused is not None:
            return refused
        message = self._bot_message(interaction["channel_id"], body or {}, webhook_id=app_id)
        message["interaction_token"] = token
        await self.dispatch("MESSAGE_CREATE", public(message))
        return json_response(public(message))

    def _followups_spent(self, interaction: dict[str, Any]) -> bool:
        """Discord allows 5 follow-ups to an interaction from an app installed to the
        user alone (its authorizing owners only USER_INSTALL), and no limit otherwise."""
        if set(interaction["authorizing_integration_owners"]) != {"1"}:
            return False
        token = interaction["token"]
        sent = [m for m in self.messages.values() if m.get("interaction_token") == token]
        return len(sent) >= MAX_USER_INSTALL_FOLLOWUPS

    async def _edit_followup(
        self, request: web.Request, body: Any, app_id: str, token: str, message_id: str
    ) -> web.Response:
        if token in self._expired:
            return error(401, 50027, "Invalid Webhook Token")
        message = self.messages.get(message_id)
        if message is None or message.get("interaction_token") != token:
            return error(404, 10008, "Unknown Message")
        refused = components_refused((body or {}).get("components"))
        if refused is not None:
            return refused
        if (body or {}).get("content") is not None:
            message["content"] = body["content"]
        if "components" in (body or {}):
            message["components"] = list(body["components"])
        message["edits"] += 1
        return json_response(public(message))

    async def _register_global(self, request: web.Request, body: Any, app_id: str) -> web.Response:
        return self._register("global", app_id, body, None)

    async def _register_guild(
        self, request: web.Request, body: Any, app_id: str, guild_id: str
    ) -> web.Response:
        return self._register(guild_id, app_id, body, guild_id)

    def _register(self, scope: str, app_id: str, body: Any, guild_id: str | None) -> web.Response:
        """A bulk overwrite: the scope's commands become `body`'s, each keeping the id it
        had under its name, and are returned with their ids."""
        if app_id != self.application_id:
            return error(403, 50001, "Missing Access")
        try:
            discord_rules.check_commands(body)
        except Refusal as refusal:
            return error(refusal.status, refusal.code, refusal.message)
        known = {c["name"]: c["id"] for c in self.commands.get(scope, [])}
        commands = [
            {
                "type": 1,
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                "integration_types": [0],
                "contexts": None,
                **command,
                "id": known.get(command["name"]) or self.snowflake(),
                "application_id": app_id,
                "version": self.snowflake(),
                "guild_id": guild_id,
            }
            for command in body
        ]
        self.commands[scope] = commands
        return json_response(commands)
