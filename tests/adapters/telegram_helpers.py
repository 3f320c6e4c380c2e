"""Helpers of the Telegram end-to-end tests: gateway subprocesses and update builders."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram

SECRET = "e2e_webhook-secret"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}
BOB = {"id": 43, "is_bot": False, "first_name": "Bob", "last_name": "Stone"}
GROUP = {"id": -1001234, "type": "supergroup", "title": "Team", "is_forum": True}
ROOT = Path(__file__).resolve().parents[2]
_message_ids = itertools.count(100)


@dataclass
class Gateway:
    """Running `gateway` subprocesses (their stderr kept for the failure report)."""

    port: int
    logs: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/webhook"

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in self.logs)


def environment(redis_url: str, llm: FakeLLM, fake: FakeTelegram, port: int,
                **extra: str) -> dict[str, str]:
    """What the processes see: only the settings the test gives (none from the developer)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GATEWAY_", "TELEGRAM_", "SLACK_", "DISCORD_"))}
    env.update({
        "REDIS_URL": redis_url, "GATEWAY_MODEL": "openai/fake-model",
        "GATEWAY_API_BASE": llm.api_base, "GATEWAY_API_KEY": "sk-test", "PORT": str(port),
        "HOST": "127.0.0.1", "TELEGRAM_BOT_TOKEN": fake.token, "TELEGRAM_API_URL": fake.base_url,
        "TELEGRAM_WEBHOOK_SECRET": SECRET, "GATEWAY_ALLOWED_USERS": "telegram:42,telegram:43",
        "TELEGRAM_EDIT_INTERVAL": "0.3", "TELEGRAM_GROUP_EDIT_INTERVAL": "0.5",
        "GATEWAY_LOG_LEVEL": "INFO", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(ROOT),
    })
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path, env: dict[str, str], *commands: str) -> AsyncIterator[Gateway]:
    """Start `gateway <command>` for each command; stop them all (SIGTERM) on exit."""
    running = Gateway(port=int(env["PORT"]))
    try:
        for command in commands:
            _spawn(running, tmp_path, env, command)
        if "web" in commands:
            await wait_healthy(running)
        yield running
    except BaseException:
        print(running.output(), file=sys.stderr)
        raise
    finally:
        await asyncio.to_thread(_stop_all, running.processes)


def _spawn(running: Gateway, tmp_path: Path, env: dict[str, str], command: str) -> None:
    log = tmp_path / f"gateway-{command}.log"
    running.logs.append(log)
    with log.open("wb") as sink:
        running.processes.append(subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", command], env=env, cwd=tmp_path,
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_healthy(running: Gateway, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient() as client:
        while True:
            for process in running.processes:
                if process.poll() is not None:
                    raise AssertionError(f"gateway exited early:\n{running.output()}")
            with contextlib.suppress(httpx.HTTPError):
                response = await client.get(f"http://127.0.0.1:{running.port}/healthz")
                if response.status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway web never became healthy:\n{running.output()}")
            await asyncio.sleep(0.1)


def message(text: str, *, user: dict[str, Any] = ALICE, chat: dict[str, Any] | None = None,
            topic: int | None = None, entities: list[dict[str, Any]] | None = None,
            message_id: int | None = None) -> dict[str, Any]:
    """An update carrying one message (without update_id: the fake or the caller adds it)."""
    body: dict[str, Any] = {
        "message_id": message_id or next(_message_ids), "date": int(time.time()),
        "from": user, "text": text,
        "chat": chat or {"id": user["id"], "type": "private", "first_name": user["first_name"]},
    }
    if entities:
        body["entities"] = entities
    if topic is not None:
        body.update(message_thread_id=topic, is_topic_message=True, reply_to_message={
            "message_id": topic, "date": 1700000000, "chat": body["chat"], "from": user,
            "forum_topic_created": {"name": "Plans", "icon_color": 7322096}})
    return {"message": body}


def mention_entities(text: str, username: str) -> list[dict[str, Any]]:
    return [{"type": "mention", "offset": text.index("@" + username),
             "length": len(username) + 1}]


def command_entities(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": len(text.split(" ")[0])}]


def request_text(body: dict[str, Any]) -> str:
    """Everything a model request carried, as one string (to look for a text in it)."""
    parts = []
    for item in body.get("messages", []):
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content)
    return "\n".join(parts)
