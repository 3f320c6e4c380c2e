"""`gateway migrate`: a database of an older key layout moved to this one, once.

It refuses while workers are connected (their keys would move under them) unless
`--force`; it is safe to run again (a run that stopped midway is resumed, one that
finished finds nothing to move); it prints what it moved.
"""

from __future__ import annotations

import argparse
import sys

from gateway.settings.env import Settings
from gateway.state import keys, shards
from gateway.state.keys import open_redis
from gateway.state.migrate import Migration, workers_connected


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = commands.add_parser("migrate", help="move Redis to this version's key layout")
    migrate.add_argument(
        "--force", action="store_true", help="move even while workers seem to be connected"
    )
    migrate.set_defaults(handler=cmd_migrate)


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    async with open_redis(settings.redis_url, settings.data_dir, check_layout=False) as redis:
        found = await keys.stored_layout(redis)
        if found is None:
            await keys.record_layout(redis)
            print(f"nothing to move: an empty database, laid out for {shards.count()} shards")
            return 0
        if found.version == keys.LAYOUT_VERSION:
            return _already(found)
        workers = await workers_connected(redis)
        if workers and not args.force:
            print(
                f"gateway: {len(workers)} worker(s) seem connected ({', '.join(workers[:3])}): "
                "stop them first, or run with --force",
                file=sys.stderr,
            )
            return 1
        moved = await Migration(redis).run()
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(moved.items())) or "nothing"
    print(f"moved {kinds}; laid out for {shards.count()} shards")
    return 0


def _already(found: keys.Layout) -> int:
    if found.shards == shards.count():
        print(f"nothing to move: already laid out for {found.shards} shards")
        return 0
    print(
        f"gateway: laid out for {found.shards} shards, GATEWAY_JOB_SHARDS is "
        f"{shards.count()}: the count is fixed for a deployment (set it back)",
        file=sys.stderr,
    )
    return 1
