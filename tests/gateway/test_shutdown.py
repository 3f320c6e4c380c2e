"""Ctrl-C on `gateway run --console`, as a terminal sends it: SIGINT to the whole process group.

Each run is a real subprocess in a session of its own (so the test can signal its
group the way a terminal signals its foreground job), with the embedded Redis or
the test Redis, and the loopback model fake writing a slow reply.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
import redis

from gateway.state.embedded_redis import ServerRecord
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.support.cli_runs import as_in_a_terminal, clean_env, gateway, run_console

pytestmark = pytest.mark.timeout(240)

MODEL = "main-model"
SLOW_REPLY = "word " * 300  # streamed over SLOW_SECONDS: still being written when Ctrl-C comes
SLOW_SECONDS = 60.0
STOP_BOUND = 5.0  # a first Ctrl-C: stopped, cleanly, within this many seconds
AT_ONCE = 2.0  # a second Ctrl-C: stopped within this many seconds
START_TIMEOUT = 150.0  # a model process imports litellm: seconds on a busy machine
FAILURE_WORDS = ("could not", "Sorry", "⚠️")
SESSION = "console:local:console"
OWED_EXIT = 1  # a run stopped before every message typed was answered


class Lines:
    """A pipe's lines, collected by a thread; a test waits for one to show up."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._collect, args=(pipe,), daemon=True)
        self._thread.start()

    def _collect(self, pipe: IO[str]) -> None:
        for line in pipe:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        with self._changed:
            found = self._changed.wait_for(lambda: self._search(pattern), timeout)
        assert found, f"no line matched {pattern!r} in {timeout}s:\n{self.text}"
        return found

    def _search(self, pattern: str) -> re.Match[str] | None:
        return next((m for line in self.lines if (m := re.search(pattern, line))), None)

    @property
    def text(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def closed(self, timeout: float) -> str:
        """Everything, once the writer closed its end."""
        self._thread.join(timeout)
        return self.text


def model_env(llm: FakeLLM, **values: str) -> dict[str, str]:
    return clean_env(
        GATEWAY_MODEL=f"openai/{MODEL}",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test",
        GATEWAY_LOG_LEVEL="INFO",
        **values,
    )


class Run:
    """`gateway run --console` in a session of its own, its output collected."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.workdir = tmp_path
        self.process = subprocess.Popen(
            gateway("run", "--console"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            preexec_fn=as_in_a_terminal,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self.out, self.err = Lines(self.process.stdout), Lines(self.process.stderr)

    def say(self, line: str, *, then_close: bool = False) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(f"{line}\n")
        stdin.flush()
        if then_close:
            stdin.close()

    def ctrl_c(self) -> float:
        """SIGINT to the whole group, as a terminal does; when it was sent."""
        os.killpg(self.process.pid, signal.SIGINT)
        return time.monotonic()

    def stopped_within(self, sent: float, bound: float) -> int:
        """The exit code, failing the test unless the process exited `bound` s after `sent`."""
        try:
            code = self.process.wait(timeout=max(0.0, sent + bound - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {bound}s after Ctrl-C:\n{self.err.text}")
        return code

    def model_process(self) -> int:
        return int(self.err.wait_for(r"model process (\d+) ready", START_TIMEOUT)[1])

    def kill(self) -> None:
        """Kill it if it still runs (its embedded Redis too, which runs in a session of its
        own), and close its pipes once their readers are done."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            lock = self.workdir / ".gateway" / "redis.lock"
            record = ServerRecord.parse(lock.read_text()) if lock.exists() else None
            if record is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.server_pid, signal.SIGTERM)
        self.out.closed(10)
        self.err.closed(10)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def run_in(tmp_path: Path) -> Iterator[list[Run]]:
    runs: list[Run] = []
    yield runs
    for started in runs:
        started.kill()


def start(runs: list[Run], tmp_path: Path, env: dict[str, str]) -> Run:
    started = Run(tmp_path, env)
    runs.append(started)
    return started


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in {"Z", "X"}


def writing_slowly(llm: FakeLLM) -> None:
    llm.set_model_behaviour(MODEL, reply=SLOW_REPLY, duration=SLOW_SECONDS)


def test_ctrl_c_while_a_reply_is_written_stops_in_seconds_and_the_next_run_answers(
    tmp_path: Path, llm: FakeLLM, run_in: list[Run]
) -> None:
    writing_slowly(llm)
    first = start(run_in, tmp_path, model_env(llm))
    model_pid = first.model_process()
    first.say("hi")  # standard input stays open, as a terminal's does
    llm.wait_for_requests(1, timeout=START_TIMEOUT, model=MODEL)
    sent = first.ctrl_c()
    assert first.stopped_within(sent, STOP_BOUND) == OWED_EXIT, first.err.text  # "hi" is owed
    out, err = first.out.closed(10), first.err.closed(10)
    assert not any(word in out for word in FAILURE_WORDS), out  # not told as a failure
    assert "Traceback" not in err, err
    assert "stopped with 1 console reply owed" in err, err
    assert not alive(model_pid), "the model process outlived the gateway"

    the_next_run_answers(tmp_path, llm, model_env(llm), "hi")


def test_ctrl_c_after_end_of_input_with_a_reply_owed_stops_in_seconds(
    tmp_path: Path, llm: FakeLLM, run_in: list[Run]
) -> None:
    writing_slowly(llm)
    run = start(run_in, tmp_path, model_env(llm))
    run.say("hi", then_close=True)
    llm.wait_for_requests(1, timeout=START_TIMEOUT, model=MODEL)
    sent = run.ctrl_c()
    assert run.stopped_within(sent, STOP_BOUND) == OWED_EXIT, run.err.text
    out = run.out.closed(10)
    assert not any(word in out for word in FAILURE_WORDS), out


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path, llm: FakeLLM, run_in: list[Run]) -> None:
    writing_slowly(llm)
    run = start(run_in, tmp_path, model_env(llm))
    model_pid = run.model_process()
    run.say("hi")
    llm.wait_for_requests(1, timeout=START_TIMEOUT, model=MODEL)
    run.ctrl_c()
    run.err.wait_for("Ctrl-C again stops at once", 10)
    sent = run.ctrl_c()
    assert run.stopped_within(sent, AT_ONCE) == 130
    assert not alive(model_pid), "the model process outlived the gateway"
    assert "Traceback" not in run.err.closed(10)

    the_next_run_answers(tmp_path, llm, model_env(llm), "and now?")  # and what it left
    answered_once(tmp_path, model_env(llm), ["hi", "and now?"])


@pytest.mark.parametrize("typed", ["hi", "/reset"])
def test_end_of_input_waits_only_for_what_this_run_owes(
    tmp_path: Path, llm: FakeLLM, redis_url: str, typed: str
) -> None:
    """Replies an earlier run still owed (its stream gone with it) are not waited for."""
    with redis.Redis.from_url(redis_url) as client:
        client.hset(Keys.meta(SESSION), "owed", 3)
    result = run_console(tmp_path, f"{typed}\n", timeout=120, **model_env(llm, REDIS_URL=redis_url))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("bot: "), result.stdout


def embedded(tmp_path: Path) -> redis.Redis:
    """A client of the embedded Redis a run in `tmp_path` started (while it runs)."""
    return redis.Redis(unix_socket_path=str(tmp_path / ".gateway" / "redis.sock"))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def two_messages_while_the_first_reply_is_written(tmp_path: Path, llm: FakeLLM, run: Run) -> None:
    """The first message streams slowly; the second waits behind it, in the inbox."""
    run.say("one")
    llm.wait_for_requests(1, timeout=START_TIMEOUT, model=MODEL)
    run.say("two")
    with embedded(tmp_path) as client:
        wait_until(lambda: client.llen(Keys.inbox(SESSION)) == 1, 30, '"two" in the inbox')


def the_next_run_answers(tmp_path: Path, llm: FakeLLM, env: dict[str, str], typed: str) -> None:
    """A next run on the same data directory, sent `typed` and the end of input, answers
    and exits 0."""
    llm.set_model_behaviour(MODEL, reply="hello again")
    again = run_console(tmp_path, f"{typed}\n", timeout=120, **env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("bot: hello again"), again.stdout


def answered_once(tmp_path: Path, env: dict[str, str], texts: list[str]) -> None:
    """Each of `texts` is in the session's history once, and an answer comes after all."""
    shown = subprocess.run(
        gateway("sessions", "show", SESSION, "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)
    users = [entry["text"] for entry in entries if entry["role"] == "user"]
    assert sorted(users) == sorted(texts), entries
    assert entries[-1]["role"] == "assistant", entries


def test_ctrl_c_with_two_messages_owed_stops_in_the_drain_time_and_the_next_run_answers_both(
    tmp_path: Path, llm: FakeLLM, run_in: list[Run]
) -> None:
    writing_slowly(llm)
    env = model_env(llm, GATEWAY_LEASE_TTL="2")
    first = start(run_in, tmp_path, env)
    two_messages_while_the_first_reply_is_written(tmp_path, llm, first)
    sent = first.ctrl_c()
    first.say("", then_close=True)  # and the end of input
    assert first.stopped_within(sent, STOP_BOUND) == OWED_EXIT, first.err.text
    assert "stopped with 2 console replies owed" in first.err.closed(10)

    the_next_run_answers(tmp_path, llm, env, "three")
    answered_once(tmp_path, env, ["one", "two", "three"])


def test_a_run_killed_with_two_messages_owed_leaves_them_to_the_next_run(
    tmp_path: Path, llm: FakeLLM, run_in: list[Run]
) -> None:
    writing_slowly(llm)
    env = model_env(llm, GATEWAY_LEASE_TTL="2")
    first = start(run_in, tmp_path, env)
    two_messages_while_the_first_reply_is_written(tmp_path, llm, first)
    first.kill()  # SIGKILL: nothing of it runs on the way out

    the_next_run_answers(tmp_path, llm, env, "three")
    answered_once(tmp_path, env, ["one", "two", "three"])
