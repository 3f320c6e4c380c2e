"""`gateway users`: approve pairing codes, list and revoke paired users."""

from __future__ import annotations

import argparse
import json
import sys

from gateway.errors import ConfigError
from gateway.inbound.pairing import Pairing
from gateway.settings.env import Settings
from gateway.state.keys import open_redis


async def cmd_users(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in {"approve", "revoke"} and not args.value:
        what = "CODE" if args.action == "approve" else "USER (platform:id)"
        raise ConfigError(f"`gateway users {args.action}` needs a {what}")
    async with open_redis(settings.redis_url, settings.data_dir, settings.redis_options) as redis:
        pairing = Pairing(redis)
        if args.action == "list":
            return await _list(pairing, args.json)
        if args.action == "revoke":
            return _report(await pairing.revoke(args.value), f"revoked {args.value}", args)
        status, detail = await pairing.approve(args.value)
    if status == "locked":
        print(f"gateway: too many wrong codes; approving is locked for {detail} s", file=sys.stderr)
        return 1
    return _report(status == "approved", f"approved {detail}", args)


async def _list(pairing: Pairing, as_json: bool) -> int:
    paired, pending = await pairing.paired(), await pairing.pending()
    if as_json:
        print(json.dumps({"paired": paired, "pending": pending}))
        return 0
    for user in paired:
        print(f"paired   {user}")
    for code, user in sorted(pending.items()):
        print(f"pending  {user}  code {code}")
    return 0


def _report(done: bool, line: str, args: argparse.Namespace) -> int:
    if not done:
        what = "pending code (or it expired)" if args.action == "approve" else "paired user"
        print(f"gateway: no such {what}: {args.value}", file=sys.stderr)
        return 1
    print(json.dumps({args.action: line.split(" ", 1)[1]}) if args.json else line)
    return 0
