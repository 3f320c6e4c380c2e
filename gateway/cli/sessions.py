"""`gateway sessions`: list, show, reset and prune sessions from the command line."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gateway.errors import ConfigError
from gateway.settings.env import Settings
from gateway.state.keys import open_redis
from gateway.state.session import SessionStore


def positive_days(text: str) -> float:
    """`--older-than`'s argument: a number of days above 0 (fractions allowed)."""
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days > 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days above 0, not {text!r}")
    return days


async def cmd_sessions(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in {"show", "reset"} and not args.key:
        raise ConfigError(f"`gateway sessions {args.action}` needs a session KEY")
    if args.action == "prune":
        return await _prune_sessions(settings, args)
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        sessions = SessionStore(redis)
        if args.action == "list":
            _print_rows(await _rows(sessions), args.json)
        elif args.action == "show":
            await _show(sessions, args.key, args.json)
        else:
            await sessions.reset(args.key)
            print(json.dumps({"reset": args.key}) if args.json else f"reset {args.key}")
    return 0


async def _rows(sessions: SessionStore) -> list[dict[str, Any]]:
    rows = []
    for key, updated in await sessions.list_sessions(limit=1000):
        meta = await sessions.meta(key)
        rows.append(
            {
                "key": key,
                "updated": updated,
                "messages": int(meta.get("answered", 0) or 0),
                "turns": int(meta.get("turns", 0) or 0),
            }
        )
    return rows


async def _show(sessions: SessionStore, session_key: str, as_json: bool) -> None:
    entries = await sessions.history(session_key) + await sessions.inbox(session_key)
    if as_json:
        print(json.dumps(entries, ensure_ascii=False, indent=2))
    for entry in [] if as_json else entries:
        who = (entry.get("speaker") or {}).get("name") or entry.get("role")
        print(f"[{entry.get('role')}] {who}: {entry.get('text')}")


async def _prune_sessions(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.state.retention import DAY, Retention

    days = args.older_than or settings.session_retention_days
    if days is None:
        raise ConfigError(
            "`gateway sessions prune` needs GATEWAY_SESSION_RETENTION_DAYS or --older-than DAYS"
        )
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        result = await Retention(redis, days * DAY).prune()
    if args.json:
        print(json.dumps({"removed": result.removed, "kept": result.kept, "older_than_days": days}))
        return 0
    noun = "session" if result.removed == 1 else "sessions"
    busy = f"; {result.kept} kept, still busy or active again" if result.kept else ""
    print(f"removed {result.removed} {noun} idle for more than {days:g} days{busy}")
    return 0


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
        print(f"{row['key']}  {row['messages']} messages  {row['turns']} turns  {when}")
