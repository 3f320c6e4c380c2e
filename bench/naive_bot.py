"""A naive Slack bot, the yardstick of bench/cpu.py: no Redis, no queue, no edits.

An aiohttp server takes the Events API's signed POSTs at `/slack/events`,
checks the signature, answers 200 at once and, in a task of its own, streams
`litellm.acompletion(stream=True)` to its end, then posts the whole text with
one `chat.postMessage` (slack-sdk's AsyncWebClient on one shared HTTP session)
in the mention's thread. Each thread's history is kept in memory, so its model
requests carry what the gateway's carry.

    python bench/naive_bot.py --model openai/fake-model --api-base URL

Settings from the environment: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET,
SLACK_API_URL, GATEWAY_API_KEY. Prints its URL once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from typing import Any

import aiohttp
import litellm
from aiohttp import web
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

MENTION = re.compile(r"<@[A-Z0-9]+>\s*")
SYSTEM = "You are a helpful assistant."


class NaiveBot:
    def __init__(self, model: str, api_base: str) -> None:
        self.model, self.api_base = model, api_base
        self.key = os.environ.get("GATEWAY_API_KEY", "sk-bench")
        self.verifier = SignatureVerifier(os.environ["SLACK_SIGNING_SECRET"])
        self.histories: dict[tuple[str, str], list[dict[str, str]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.slack: AsyncWebClient | None = None

    async def start(self, app: web.Application) -> None:
        session = aiohttp.ClientSession()
        self.slack = AsyncWebClient(
            token=os.environ["SLACK_BOT_TOKEN"],
            base_url=os.environ["SLACK_API_URL"],
            session=session,
        )

    async def events(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self.verifier.is_valid(
            body,
            request.headers.get("X-Slack-Request-Timestamp", ""),
            request.headers.get("X-Slack-Signature", ""),
        ):
            return web.Response(status=401)
        payload = json.loads(body)
        if payload.get("type") == "url_verification":
            return web.json_response({"challenge": payload.get("challenge")})
        event = payload.get("event") or {}
        if event.get("type") == "app_mention" and not request.headers.get("X-Slack-Retry-Num"):
            task = asyncio.create_task(self.answer(event))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.Response(status=200)

    async def answer(self, event: dict[str, Any]) -> None:
        channel, thread = str(event["channel"]), str(event.get("thread_ts") or event["ts"])
        history = self.histories.setdefault(
            (channel, thread), [{"role": "system", "content": SYSTEM}]
        )
        history.append({"role": "user", "content": MENTION.sub("", str(event.get("text", "")))})
        response = await litellm.acompletion(
            model=self.model,
            messages=list(history),
            stream=True,
            api_base=self.api_base,
            api_key=self.key,
            timeout=60.0,
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in response if chunk.choices]
        text = "".join(parts)
        history.append({"role": "assistant", "content": text})
        assert self.slack is not None
        await self.slack.chat_postMessage(channel=channel, thread_ts=thread, text=text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    bot = NaiveBot(args.model, args.api_base)

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/slack/events", bot.events)
        await bot.start(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
