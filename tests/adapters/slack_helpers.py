"""Helpers of the Slack tests: requests signed the way Slack does (v0), gateway subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from slack_sdk.signature import SignatureVerifier

from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID

SIGNING_SECRET = "test-signing-secret-0123456789"
BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"

_event_ids = itertools.count(1)
_ts = itertools.count(1)


def signed_headers(body: bytes, *, secret: str = SIGNING_SECRET,
                   timestamp: int | None = None, content_type: str = "application/json",
                   retry: int | None = None) -> dict[str, str]:
    """Headers of a request Slack signed: `v0=HMAC-SHA256(secret, "v0:<ts>:<body>")`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature,
               "Content-Type": content_type}
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def new_ts() -> str:
    return f"1710000000.{next(_ts):06d}"


def event_body(event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {"token": "legacy", "team_id": TEAM_ID, "api_app_id": "A0001", "type": "event_callback",
            "event_id": event_id or f"Ev{next(_event_ids):08d}", "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
            "event": event}


def mention(text: str, *, user: str = "U1", channel: str = "C1", ts: str | None = None,
            thread_ts: str | None = None) -> dict[str, Any]:
    event = {"type": "app_mention", "user": user, "channel": channel, "ts": ts or new_ts(),
             "text": f"<@{BOT_USER_ID}> {text}", "team": TEAM_ID}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message(text: str, *, user: str = "U1", channel: str = "C1", channel_type: str = "channel",
            ts: str | None = None, thread_ts: str | None = None, **extra: Any) -> dict[str, Any]:
    event = {"type": "message", "user": user, "channel": channel, "channel_type": channel_type,
             "ts": ts or new_ts(), "text": text, "team": TEAM_ID, **extra}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return {k: v for k, v in event.items() if v is not None}


def json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def command_bytes(text: str, *, channel: str = "C1", user: str = "U1",
                  trigger_id: str | None = None) -> bytes:
    form = {"token": "legacy", "team_id": TEAM_ID, "team_domain": "test", "channel_id": channel,
            "channel_name": "general", "user_id": user, "user_name": "ada", "command": "/btw",
            "text": text, "api_app_id": "A0001",
            "response_url": "http://127.0.0.1:9/commands/unused",
            "trigger_id": trigger_id or f"trig.{next(_event_ids)}"}
    return urlencode(form).encode()


# -- gateway subprocesses -------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Processes:
    """Running `gateway` subprocesses; their output is kept for the failure report."""

    port: int
    logs: list[Path] = field(default_factory=list)
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in self.logs)


def environment(redis_url: str, llm_api_base: str, slack_api_url: str, port: int,
                **extra: str) -> dict[str, str]:
    """What the processes see: only the settings the test gives (none from the developer)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GATEWAY_", "TELEGRAM_", "SLACK_", "DISCORD_"))}
    env.update({
        "REDIS_URL": redis_url, "GATEWAY_MODEL": "openai/fake-model",
        "GATEWAY_API_BASE": llm_api_base, "GATEWAY_API_KEY": "sk-test", "PORT": str(port),
        "HOST": "127.0.0.1", "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack_api_url, "SLACK_EDIT_INTERVAL": "0.2",
        "GATEWAY_LOG_LEVEL": "INFO", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(ROOT),
    })
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def gateway(workdir: Path, env: dict[str, str], *commands: str) -> AsyncIterator[Processes]:
    """Start `gateway <command>` for each command; SIGTERM them all on exit."""
    processes = Processes(port=int(env["PORT"]))
    try:
        for command in commands:
            _spawn(processes, workdir, env, command)
        if "web" in commands:
            await wait_healthy(processes)
        yield processes
    except BaseException:
        print(processes.output(), file=sys.stderr)
        raise
    finally:
        await asyncio.to_thread(_stop_all, processes.running)


def _spawn(processes: Processes, workdir: Path, env: dict[str, str], command: str) -> None:
    log = workdir / f"gateway-{command}.log"
    processes.logs.append(log)
    with log.open("wb") as sink:
        processes.running.append(subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", command], env=env, cwd=workdir,
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


async def wait_healthy(processes: Processes, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient() as client:
        while True:
            for process in processes.running:
                if process.poll() is not None:
                    raise AssertionError(f"gateway exited early:\n{processes.output()}")
            with contextlib.suppress(httpx.HTTPError):
                response = await client.get(f"http://127.0.0.1:{processes.port}/healthz")
                if response.status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway web never became healthy:\n{processes.output()}")
            await asyncio.sleep(0.1)


def request_text(body: dict[str, Any]) -> str:
    """Everything a model request carried, as one string."""
    parts: list[str] = []
    for item in body.get("messages", []):
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content)
    return "\n".join(parts)
