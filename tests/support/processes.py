"""`gateway` subprocesses for end-to-end tests: start, wait until healthy, stop, show logs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gateway.state import shards

ROOT = Path(__file__).resolve().parents[2]


def shards_env() -> dict[str, str]:
    """GATEWAY_JOB_SHARDS as this test process names its keys, for a process it starts."""
    return {"GATEWAY_JOB_SHARDS": str(shards.count())}


@dataclass
class Processes:
    """Running `gateway` subprocesses (their output kept for the failure report)."""

    port: int
    logs: list[Path] = field(default_factory=list)
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in self.logs)


P = TypeVar("P", bound=Processes)


def environment(redis_url: str, llm_api_base: str, port: int, **values: str) -> dict[str, str]:
    """What the processes see: only the settings the test gives (none from the developer)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GATEWAY_", "TELEGRAM_", "SLACK_", "DISCORD_"))
    }
    env.update(
        {
            "REDIS_URL": redis_url,
            "GATEWAY_MODEL": "openai/fake-model",
            "GATEWAY_API_BASE": llm_api_base,
            "GATEWAY_API_KEY": "sk-test",
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "GATEWAY_LOG_LEVEL": "INFO",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            **shards_env(),
        }
    )
    env.update(values)
    return env


@contextlib.asynccontextmanager
async def gateway(
    workdir: Path, env: dict[str, str], *commands: str, kind: type[P] = Processes
) -> AsyncIterator[P]:  # type: ignore[assignment]
    """Start `gateway <command>` for each command; SIGTERM them all on exit."""
    processes = kind(port=int(env["PORT"]))
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
        processes.running.append(
            subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", command],
                env=env,
                cwd=workdir,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )


def _stop_all(running: list[subprocess.Popen[bytes]]) -> None:
    for process in running:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in running:
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
                response = await client.get(processes.url("/healthz"))
                if response.status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway web never became healthy:\n{processes.output()}")
            await asyncio.sleep(0.1)


def request_text(body: dict[str, Any]) -> str:
    """Everything a model request carried, as one string (to look for a text in it)."""
    parts: list[str] = []
    for item in body.get("messages", []):
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content)
    return "\n".join(parts)
