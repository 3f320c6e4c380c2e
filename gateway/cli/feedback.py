"""`gateway feedback`: the thumbs up and down on replies since a day (UTC), newest first,
as a table or JSON; each with its clicker, so an operator can follow up (the /metrics
counter never names them)."""

from __future__ import annotations

import argparse
import datetime as dt
import json

from gateway.cli.usage import since_day
from gateway.feedback.store import FeedbackStore, Vote
from gateway.settings.env import Settings
from gateway.spend.usage import day_of
from gateway.state.keys import open_redis

COLUMNS = ("TIME (UTC)", "PLATFORM", "WORKSPACE", "SESSION", "MODEL", "VALUE", "USER")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    feedback = commands.add_parser("feedback", help="thumbs up and down on replies")
    feedback.add_argument(
        "--since", type=since_day, default=None, help="first day, YYYY-MM-DD (default: this month)"
    )
    feedback.add_argument("--json", action="store_true")
    feedback.set_defaults(handler=cmd_feedback)


async def cmd_feedback(settings: Settings, args: argparse.Namespace) -> int:
    since = args.since or day_of(dt.datetime.now(dt.UTC))[:8] + "01"
    start = dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC)
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        votes = await FeedbackStore(redis).since(start)
    if args.json:
        print(json.dumps({"since": since, "feedback": [v.as_dict() for v in votes]}, indent=2))
        return 0
    print(_table(since, votes))
    return 0


def _table(since: str, votes: list[Vote]) -> str:
    if not votes:
        return f"no feedback since {since}"
    lines = [COLUMNS] + [
        (
            v.at.strftime("%Y-%m-%d %H:%M:%S"),
            v.platform,
            v.workspace,
            v.session,
            v.model,
            v.value,
            v.user,
        )
        for v in votes
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
