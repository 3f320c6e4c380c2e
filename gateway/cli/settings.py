"""`gateway settings`: get, set and unset a setting at a scope; show a scope's settings.

A scope is `platform[:workspace[:channel[:thread]]]` (gateway/settings/scoped.py). A change
bumps the settings' version, so every worker uses it from its next turn on.
"""

from __future__ import annotations

import argparse

from gateway.settings.env import Settings
from gateway.settings.scoped import (
    KEYS,
    ScopedSettings,
    SessionSettings,
    parse_scope,
    shorten,
    validate_key,
)
from gateway.state.keys import open_redis

SHOWN_CHARS = 60  # a long system prompt is cut to this in `show`


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    settings = commands.add_parser(
        "settings", help="settings per platform, workspace, channel or conversation"
    )
    actions = settings.add_subparsers(dest="action", required=True)
    get = actions.add_parser("get", help="a setting's value at a scope (its own or inherited)")
    get.add_argument("scope")
    get.add_argument("key", metavar="KEY")
    put = actions.add_parser("set", help="set a setting at a scope")
    put.add_argument("scope")
    put.add_argument("key", metavar="KEY")
    put.add_argument("value")
    unset = actions.add_parser("unset", help="remove a setting from a scope")
    unset.add_argument("scope")
    unset.add_argument("key", metavar="KEY")
    show = actions.add_parser("show", help="every setting at a scope, and where it comes from")
    show.add_argument("scope")
    settings.set_defaults(handler=cmd_settings)


async def cmd_settings(settings: Settings, args: argparse.Namespace) -> int:
    scope = parse_scope(args.scope)
    if args.action != "show":
        validate_key(args.key)
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        scoped = ScopedSettings(redis, settings)
        await scoped.load()
        if args.action == "set":
            stored = await scoped.set(scope, args.key, args.value)
            print(f"{scope} {args.key} = {shorten(stored, SHOWN_CHARS)}")
        elif args.action == "unset":
            removed = await scoped.unset(scope, args.key)
            print(f"{scope} {args.key} unset" if removed else f"{scope} does not set {args.key}")
        elif args.action == "get":
            print(scoped.resolve(scope).shown(args.key))
        else:
            print(table(scoped.resolve(scope)))
    return 0


def table(effective: SessionSettings) -> str:
    """Each setting, its value and where it comes from (a scope, or the environment)."""
    rows = [("KEY", "VALUE", "FROM")] + [
        (key, shorten(effective.shown(key), SHOWN_CHARS), effective.source(key)) for key in KEYS
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(
        f"{key.ljust(widths[0])}  {value.ljust(widths[1])}  {source}" for key, value, source in rows
    )
