"""Model processes (GATEWAY_MODEL_PROCESSES): litellm's calls made outside the worker.

The worker tests that involve the model run again here with one model process,
and the cases only a separate process has: it dies mid-turn, side questions and
delta mode cross the pipe.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.context.compression import Compressor
from gateway.models import Models
from gateway.models.host import PIECE_WINDOW
from gateway.models.pool import ModelPool, ModelProcess
from gateway.models.types import ModelCall, ModelSettings
from gateway.models.wire import call_fields
from gateway.state.session import SessionStore
from tests.fakes.llm_server import FakeLLM
from tests.support.conversation import STATEFUL_MAIN, conversation
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound, settings
from tests.support.model_turns import (  # noqa: F401  (collected again, with a model process)
    test_a_failed_model_call_tells_the_user_once_and_records_no_half_reply,
    test_a_turn_that_loses_its_lease_is_run_again_into_the_same_message,
    test_many_sessions_run_at_once,
    test_stop_cancels_the_running_turn,
)
from tests.support.processes import shards_env
from tests.support.redis_servers import client_for


@pytest.fixture
async def harness(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1, GATEWAY_MODEL_PROCESSES=1) as h:
        yield h


def model_process(harness: Harness) -> ModelProcess:
    pool = harness.workers[0].models.backend
    assert isinstance(pool, ModelPool)
    (process,) = pool.processes
    assert process.pid is not None and process.running
    return process


def model_process_pid(harness: Harness) -> int:
    pid = model_process(harness).pid
    assert pid is not None
    return pid


async def test_the_calls_are_made_by_the_model_process(harness: Harness) -> None:
    process = model_process(harness)
    assert process.pid != os.getpid()
    harness.llm.reply = "from the other process"
    before = next(process.ids)  # the worker's start asked for the window and a count
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    (request,) = harness.llm.requests
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["authorization"] == "Bearer sk-test-key"
    assert texts(harness.sender) == ["from the other process"]
    assert (await harness.history(message.session_key))[-1]["text"] == "from the other process"
    assert next(process.ids) == before + 2  # the one call went over the pipe


async def test_a_model_process_that_dies_mid_turn_keeps_the_text_shown_and_is_replaced(
    harness: Harness,
) -> None:
    harness.llm.reply = "word " * 100
    harness.llm.duration = 20.0
    message = inbound("write a lot")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    os.kill(model_process_pid(harness), signal.SIGKILL)
    await harness.idle(message.session_key, timeout=10)
    (shown,) = texts(harness.sender)  # the text so far, kept, and told once why it ends
    text, note = shown.split("\n\n")
    assert text.startswith("word")
    assert note == "_(the answer was cut off: the model call was interrupted)_"
    history = await harness.history(message.session_key)
    assert [(e["role"], e["text"]) for e in history] == [
        ("user", "write a lot"),
        ("assistant", text),
    ]
    harness.llm.reply, harness.llm.duration = "back again", None
    await harness.ingest.receive(inbound("still there?"))
    await harness.idle(message.session_key, timeout=30)
    assert texts(harness.sender)[-1] == "back again"
    assert [e["role"] for e in await harness.history(message.session_key)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_side_question_is_answered_through_the_model_process(harness: Harness) -> None:
    harness.llm.set_model_behaviour("side-model", reply="the side answer")
    message = inbound("/btw what did we decide?")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    (answer,) = texts(harness.sender)
    assert answer.endswith("the side answer")
    (request,) = harness.llm.requests
    assert request.model == "side-model" and not request.get("stream")


async def test_delta_mode_chains_responses_through_the_model_process(
    redis_url: str, llm: FakeLLM
) -> None:
    async with conversation(
        redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN, GATEWAY_MODEL_PROCESSES=1
    ) as talk:
        await talk.say("one")
        first_id = (await talk.meta())["response_id"]
        await talk.say("two")
        first, second = [r for r in talk.main_requests() if r.path == "/v1/responses"]
        assert "previous_response_id" not in first
        assert second["previous_response_id"] == first_id
        assert len(talk.sender.messages) == 2


async def test_a_stopped_worker_leaves_no_model_process_behind(
    redis_url: str, llm: FakeLLM
) -> None:
    async with start_workers(redis_url, llm, 1, GATEWAY_MODEL_PROCESSES=1) as harness:
        pid = model_process_pid(harness)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_what_a_library_prints_in_the_model_process_stays_out_of_the_protocol() -> None:
    import subprocess
    import sys

    # litellm's import stands in for any library that prints a banner on stdout.
    script = (
        "import gateway.models.litellm_backend as llm, gateway.models.host as host\n"
        "load = llm.load_litellm\n"
        "def noisy():\n"
        "    print('a banner on stdout', flush=True)\n"
        "    return load()\n"
        "llm.load_litellm = noisy\n"
        "host.main()\n"
    )
    init = '{"init": {"api_base": null, "api_key": null, "retries": 0}}\n'
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=init,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == '{"ready": true}\n'
    assert "a banner on stdout" in done.stderr


def test_a_model_process_loads_neither_the_settings_nor_redis() -> None:
    """It is given its settings on its first line: pydantic-settings and Redis's client
    (about 8 MB beside litellm) stay out of it."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "import gateway.models.host\n"
        "heavy = ('redis', 'pydantic_settings', 'gateway.settings.env')\n"
        "print(json.dumps([name for name in heavy if name in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


async def test_a_worker_with_model_processes_never_imports_litellm(
    redis_url: str, llm: FakeLLM
) -> None:
    """Its calls, its token counts and its model window all come from the model process;
    the count /status reports is the one litellm gives for what the next turn sends."""
    llm.reply = "hi"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.lean_worker",
        redis_url,
        llm.api_base,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **shards_env()},
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["litellm_imported"] is False
    reply, status = seen["messages"]
    assert reply == "hi"
    assert "main-model" in status and "2 messages" in status
    # The same count made here, in process, from the session as the worker left it.
    client = client_for(redis_url)
    config = settings(redis_url, GATEWAY_MODEL="openai/main-model")
    view = await SessionStore(client).view(inbound("x").session_key)
    models = Models.for_settings(config)
    expected = await Compressor(config, client, models).tokens(view, group=True)
    await client.aclose()
    assert f"about {expected:,} tokens" in status


async def stream_lines(llm: FakeLLM, reply: str, token_delay: float) -> list[dict[str, Any]]:
    """What crosses the pipe, line by line, for a streamed call of `reply`: the second
    one (a model process's first call spends a while in litellm, which holds up what
    arrives meanwhile, to cross together)."""
    llm.reply, llm.token_delay = reply, token_delay
    process = ModelProcess(ModelSettings(llm.api_base, "sk-test-key", retries=1))
    call = ModelCall("openai/main-model", [{"role": "user", "content": "hi"}], 30.0)
    try:
        for _ in range(2):
            lines = [m async for m in process.call("stream", {"call": call_fields(call)})]
        return lines
    finally:
        await process.aclose()


async def test_a_fast_streams_pieces_cross_the_pipe_in_batches_the_first_at_once(
    llm: FakeLLM,
) -> None:
    reply = " ".join(f"word{i}" for i in range(20))  # 20 pieces, 10 ms apart
    lines = await stream_lines(llm, reply, token_delay=0.01)
    pieces = [line["piece"] for line in lines if "piece" in line]
    assert pieces[0] == "word0 "  # not held back for the ones after it
    assert "".join(pieces) == reply
    assert len(pieces) <= 20 * 0.01 / PIECE_WINDOW + 2  # one line a window at most
    assert "end" in lines[-1]


async def test_a_slow_streams_pieces_each_cross_the_pipe_at_once(llm: FakeLLM) -> None:
    lines = await stream_lines(llm, "one two three four", token_delay=3 * PIECE_WINDOW)
    assert [line.get("piece") for line in lines[:-1]] == ["one ", "two ", "three ", "four"]
    assert "end" in lines[-1]
