"""The console drill: `gateway run --console` interrupted while it writes a reply.

Each trial has a data directory (so an embedded Redis) of its own. A first run
is sent two messages for a slow model and gets Ctrl-C (SIGINT to its process
group, as a terminal sends it) while the first reply is being written, then the
end of input. The next run on the same directory is sent a third message and
the end of input. The promises: the interrupted run exits within the drain it
announces (plus its way out), with 1 while replies are owed; the next run
answers what the first left and its own message, and exits 0; each message typed
is in the history once, and an answer follows the last of them.

Lost: a typed message missing from the history or left after its last answer.
Duplicated: a message in the history more than once, or a reply printed twice.
Stuck: a run that had to be killed. Worst: seconds from Ctrl-C to the exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # noqa: F401  (first: it puts the project on sys.path)
import redis.asyncio as aioredis
from drill_faults import row
from drill_traffic import Row, Tally

from gateway.state.embedded_redis import EmbeddedRedis
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_shapes import JSON, last_user_text
from tests.support.cli_runs import as_in_a_terminal, clean_env, gateway

MODEL = "console-model"
SESSION = "console:local:console"
TRIALS = 10
DRAIN = 2.0  # what `gateway run` announces: "replies being written get 2 s to finish"
STOP_BOUND = 15.0  # a run still there this long after Ctrl-C and the end of input is stuck
START = 150.0  # a first run imports litellm in its model process: seconds on a busy machine
RUN_BOUND = 120.0  # the next run: started, everything answered, exited
SLOW_REPLY = "word " * 300
SLOW_SECONDS = 60.0
OWED_EXIT = 1


@dataclass
class Trial:
    """What one trial saw."""

    texts: list[str]
    stopped_after: float | None = None  # seconds from Ctrl-C to the first run's exit
    first_code: int | None = None
    second_code: int | None = None
    printed: list[str] = field(default_factory=list)  # the second run's `bot:` lines
    history: list[dict[str, Any]] = field(default_factory=list)
    failure: str = ""


class Console:
    """`gateway run --console` in a session of its own, its stdout and stderr kept."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.out: list[str] = []
        self.err: list[str] = []
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            asyncio.create_task(_collect(process.stdout, self.out)),
            asyncio.create_task(_collect(process.stderr, self.err)),
        ]

    @classmethod
    async def start(cls, workdir: Path, env: dict[str, str]) -> Console:
        process = await asyncio.create_subprocess_exec(
            *gateway("run", "--console"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,
            preexec_fn=as_in_a_terminal,
        )
        return cls(process)

    async def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()

    def close_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def ctrl_c(self) -> float:
        os.killpg(self.process.pid, signal.SIGINT)
        return time.monotonic()

    async def exited(self, within: float) -> int | None:
        """The exit code, or None (and the run killed) when it is still there after `within`."""
        try:
            async with asyncio.timeout(within):
                code = await self.process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
            return None
        finally:
            await asyncio.gather(*self._readers, return_exceptions=True)
        return code

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


async def _collect(stream: asyncio.StreamReader, lines: list[str]) -> None:
    while line := await stream.readline():
        lines.append(line.decode(errors="replace"))


def _answer(body: JSON) -> str:
    return f"answer to {last_user_text(body.get('messages'))}"


async def _until(condition: Callable[[], Awaitable[bool]], within: float) -> bool:
    deadline = time.monotonic() + within
    while not await condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _interrupted(trial: Trial, workdir: Path, llm: FakeLLM, env: dict[str, str]) -> None:
    """The first run: two messages, Ctrl-C while the first reply is written, end of input."""
    llm.set_model_behaviour(MODEL, reply=SLOW_REPLY, duration=SLOW_SECONDS)
    run = await Console.start(workdir, env)
    try:
        asked = len(llm.requests_for(MODEL))
        await run.say(trial.texts[0])
        await llm.await_requests(asked + 1, timeout=START, model=MODEL)
        await run.say(trial.texts[1])
        if not await _waits_in_the_inbox(workdir):
            trial.failure = "the second message never reached the inbox"
        sent = run.ctrl_c()
        run.close_input()
        trial.first_code = await run.exited(STOP_BOUND)
        if trial.first_code is not None:
            trial.stopped_after = time.monotonic() - sent
    finally:
        run.kill()


async def _waits_in_the_inbox(workdir: Path) -> bool:
    """Until the second message waits behind the first reply (the run's embedded Redis)."""
    client = aioredis.Redis(unix_socket_path=str(workdir / ".gateway" / "redis.sock"))

    async def waiting() -> bool:
        return int(await client.llen(Keys.inbox(SESSION))) == 1

    try:
        return await _until(waiting, 30)
    finally:
        await client.aclose()


async def _next_run(trial: Trial, workdir: Path, llm: FakeLLM, env: dict[str, str]) -> None:
    llm.set_model_behaviour(MODEL, reply=_answer)
    run = await Console.start(workdir, env)
    try:
        await run.say(trial.texts[2])
        run.close_input()
        trial.second_code = await run.exited(RUN_BOUND)
        trial.printed = [line for line in run.out if line.startswith("bot: ")]
    finally:
        run.kill()


async def _history(workdir: Path) -> list[dict[str, Any]]:
    """The console session's history, read from the trial's embedded Redis."""
    server = EmbeddedRedis(workdir / ".gateway")
    url = await asyncio.to_thread(server.start)
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        entries = await client.lrange(Keys.history(SESSION), 0, -1)
        entries += await client.lrange(Keys.inbox(SESSION), 0, -1)
    finally:
        await client.aclose()
        await asyncio.to_thread(server.stop)
    return [json.loads(entry) for entry in entries]


async def _trial(number: int, llm: FakeLLM) -> Trial:
    texts = [f"m{number}x{part}" for part in (1, 2, 3)]
    trial = Trial(texts)
    workdir = Path(tempfile.mkdtemp(prefix="gw-console-drill-"))
    env = clean_env(
        GATEWAY_MODEL=f"openai/{MODEL}",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test",
        GATEWAY_LEASE_TTL="2",
        GATEWAY_LOG_LEVEL="INFO",
    )
    try:
        await _interrupted(trial, workdir, llm, env)
        await _next_run(trial, workdir, llm, env)
        trial.history = await _history(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return trial


def _count(trials: list[Trial]) -> Tally:
    counted = Tally()
    for trial in trials:
        counted.trials += 1
        users = [e.get("text") for e in trial.history if e.get("role") == "user"]
        seen = collections.Counter(users)
        after_last_answer = _after_last_answer(trial.history)
        lost = [t for t in trial.texts if seen[t] == 0 or t in after_last_answer]
        doubled = [t for t in trial.texts if seen[t] > 1]
        printed_twice = sum(n - 1 for n in collections.Counter(trial.printed).values() if n > 1)
        counted.lost += len(lost)
        counted.duplicated += len(doubled) + printed_twice
        counted.stuck += (trial.first_code is None) + (trial.second_code is None)
        if trial.stopped_after is not None:
            counted.latencies.append(trial.stopped_after)
        if lost or doubled or printed_twice or trial.failure:
            counted.evidence.append(
                f"{trial.texts[0][:-2]}: lost {lost}, doubled {doubled}, printed "
                f"{trial.printed}, {trial.failure or 'history ' + str(users)}"
            )
    return counted


def _after_last_answer(history: list[dict[str, Any]]) -> set[str]:
    """The user texts after the history's last assistant entry: never answered."""
    last = max((i for i, e in enumerate(history) if e.get("role") == "assistant"), default=-1)
    return {str(e.get("text")) for e in history[last + 1 :] if e.get("role") == "user"}


async def console_interrupt(quick: bool) -> Row:
    """Ctrl-C a console run mid-reply with a second message owed; the next run answers."""
    llm = FakeLLM().start()
    try:
        trials = [await _trial(number, llm) for number in range(TRIALS)]
    finally:
        llm.stop()
    counted = _count(trials)
    codes = collections.Counter((t.first_code, t.second_code) for t in trials)
    exits_right = codes[(OWED_EXIT, 0)] == len(trials)
    worst = counted.worst
    in_time = worst is not None and len(counted.latencies) == len(trials)
    answered = sum(len(t.texts) for t in trials) - counted.lost
    result = row(
        "console-interrupt",
        counted,
        exits_right and in_time,
        f"{answered} of {3 * len(trials)} typed answered once; Ctrl-C exits in "
        f"{'-' if worst is None else f'{worst:.1f}'} s at worst ({DRAIN:g} s drain announced)",
    )
    result.notes.append(
        f"exit codes (interrupted run, next run): {dict(codes)} (must be ({OWED_EXIT}, 0))"
    )
    return result
