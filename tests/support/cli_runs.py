"""The `gateway` command as the end-to-end tests run it: argv, clean environment, console run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.processes import shards_env

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**values: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GATEWAY_", "TELEGRAM_", "SLACK_", "DISCORD_", "REDIS_"))
    }
    env.update({"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **shards_env()})
    # The virtualenv active, as the README asks: the `python` a config names is its own.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(values)
    return env


def as_in_a_terminal() -> None:
    """A `preexec_fn` for a run that is sent Ctrl-C: SIGINT as a terminal's foreground
    job has it. A command a shell starts in the background (`cmd &`, as scripts and CI
    runners do) inherits SIGINT ignored, and the gateway keeps an ignored signal
    ignored, so the Ctrl-C would reach nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def gateway(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", *args]


def run_console(
    tmp_path: Path, stdin: str, timeout: float = 150, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gateway("run", "--console"),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=clean_env(**env),
    )


def run_gateway(
    redis_url: str, cwd: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` against the test's Redis, in a clean environment plus `env`."""
    return subprocess.run(
        gateway(*args),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=clean_env(REDIS_URL=redis_url, **env),
        stdin=subprocess.DEVNULL,
    )


async def run_against(
    redis_url: str, cwd: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`run_gateway` off the event loop (the test's own services, the fakes and the
    workers, keep running meanwhile)."""
    return await asyncio.to_thread(run_gateway, redis_url, cwd, *args, **env)
