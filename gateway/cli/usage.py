"""`gateway usage`: tokens and cost by user, workspace or model, since a day (UTC)."""

from __future__ import annotations

import argparse
import datetime as dt
import json

from gateway.settings.env import Settings
from gateway.spend.usage import Totals, UsageLedger, day_of
from gateway.state.keys import open_redis


def since_day(text: str) -> str:
    """`--since`'s argument: a calendar day, YYYY-MM-DD."""
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a day as YYYY-MM-DD, not {text!r}") from None


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    usage = commands.add_parser("usage", help="tokens and cost")
    usage.add_argument("--by", choices=["user", "workspace", "model"], default="user")
    usage.add_argument(
        "--since", type=since_day, default=None, help="first day, YYYY-MM-DD (default: this month)"
    )
    usage.add_argument("--json", action="store_true")
    usage.set_defaults(handler=cmd_usage)


async def cmd_usage(settings: Settings, args: argparse.Namespace) -> int:
    since = args.since or day_of(dt.datetime.now(dt.UTC))[:8] + "01"
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        rows = await UsageLedger(redis).by(args.by, since)
    if args.json:
        found = [{args.by: name, **totals.as_dict()} for name, totals in rows.items()]
        print(json.dumps({"since": since, "by": args.by, "rows": found}, indent=2))
        return 0
    print(_table(args.by, since, rows))
    return 0


def _table(by: str, since: str, rows: dict[str, Totals]) -> str:
    if not rows:
        return f"no usage since {since}"
    header = (by.upper(), "CALLS", "PROMPT", "COMPLETION", "COST (USD)")
    lines = [header] + [
        (name, str(t.calls), str(t.prompt), str(t.completion), t.cost_text.lstrip("$"))
        for name, t in rows.items()
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
