"""Model processes: litellm's calls, run in processes of their own.

litellm spends about 30 ms of Python per streamed call here (building the
request, a model object per chunk, its logging and cost bookkeeping), in
single steps of up to about 10 ms. In the worker's event loop every such step
holds up every other session's Redis round trips, edits, lease heartbeats and
/stop. With `GATEWAY_MODEL_PROCESSES=N`, a worker starts N model processes
(`python -m gateway.models.host`) and sends each call to one of them over a
pipe (`gateway.models.wire`); only the text comes back, so the worker's loop
stays free and litellm gets cores of its own. Token counts and model windows
come from there too, so a worker with model processes never imports litellm.

Retries happen in the model process (before the first piece, as in process).
A model process that dies fails its calls with ModelProcessLost (a ModelUnavailable
that does not tell the user the provider failed); the next call starts a new one.

A model process runs in a session of its own: the Ctrl-C a terminal sends to
its whole foreground group is the gateway's to handle, and a reply being
written when it comes is not cut off by it. The gateway stops its model
processes on its way out (`ModelProcess.aclose`); one whose gateway died
anyhow exits at the end of its input, when the pipe's last writer is gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from gateway.errors import ModelProcessLost, ModelUnavailable
from gateway.models import litellm_backend
from gateway.models.types import Message, ModelCall, ModelSettings, ResponseChain, ToolCall, Usage
from gateway.models.wire import (
    LINE_LIMIT,
    call_fields,
    calls_from,
    dump,
    error_fields,
    error_from,
    fill_usage,
)

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0  # litellm's import takes seconds on a busy machine
CLOSE_TIMEOUT = 3.0  # how long the gateway waits for a model process to exit, before a kill


class ModelProcess:
    """One model process, seen from the worker: calls go in, their pieces come out."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.process: asyncio.subprocess.Process | None = None
        self.pending: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._closing = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        async with self._starting:
            if self.running:
                return
            env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway.models.host",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                limit=LINE_LIMIT,
                start_new_session=True,
            )
            try:
                await self._handshake(process)
            except BaseException:  # too slow, or cancelled (a stop while it starts)
                _kill(process)
                raise
            self.process = process
            self._reader = asyncio.create_task(self._read(process))
            log.info("model process %d ready", process.pid)

    async def _handshake(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(dump({"init": self.settings.to_init()}))
        try:
            async with asyncio.timeout(START_TIMEOUT):
                ready = await process.stdout.readline()
        except TimeoutError:
            raise ModelUnavailable("the model process did not start in time") from None
        if not ready:
            await process.wait()
            raise ModelProcessLost(f"the model process exited ({process.returncode})")

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            try:
                message = json.loads(line)
                request_id = int(message.get("id", 0))
            except (ValueError, TypeError, AttributeError):
                log.warning("model process %d wrote a line that is not the protocol", process.pid)
                continue
            queue = self.pending.get(request_id)
            if queue is not None:
                queue.put_nowait(message)
        await process.wait()
        level = logging.INFO if self._closing else logging.WARNING
        log.log(level, "model process %d exited (%s)", process.pid, process.returncode)
        for request_id, queue in list(self.pending.items()):
            text = f"the model process exited ({process.returncode})"
            queue.put_nowait({"id": request_id, "error": error_fields(ModelProcessLost(text))})

    async def call(self, op: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The messages of one request, up to and including its end (errors raised)."""
        await self.start()
        assert self.process is not None and self.process.stdin is not None
        stdin = self.process.stdin
        request_id = next(self.ids)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.pending[request_id] = queue
        finished = False
        try:
            request = {"id": request_id, "op": op, **body}
            stdin.write(dump(request))
            await stdin.drain()
            while True:
                message = await queue.get()
                if "error" in message:
                    finished = True
                    raise error_from(message["error"])
                finished = "end" in message
                yield message
                if finished:
                    return
        except (ConnectionError, RuntimeError) as exc:
            finished = True
            raise ModelProcessLost(f"the model process is gone ({type(exc).__name__})") from exc
        finally:
            del self.pending[request_id]
            if not finished and self.running:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    stdin.write(dump({"id": request_id, "op": "cancel"}))

    async def aclose(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop the process: it exits at the end of its input, cancelling what it runs.

        Killed when it has not within `timeout`, or when this stop is cut short.
        """
        process = self.process
        if process is None:
            return
        self._closing = True
        if process.stdin is not None:
            process.stdin.close()
        try:
            async with asyncio.timeout(timeout):
                await process.wait()
        except TimeoutError:
            log.warning("model process %d did not stop in %g s; killed", process.pid, timeout)
        finally:
            _kill(process)
        await process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


class ModelPool:
    """The model processes of one worker, as a backend; each call goes to the least busy one."""

    def __init__(self, settings: ModelSettings, size: int) -> None:
        self.processes = [ModelProcess(settings) for _ in range(size)]

    async def start(self) -> None:
        await asyncio.gather(*(p.start() for p in self.processes))

    async def aclose(self) -> None:
        await asyncio.gather(*(p.aclose() for p in self.processes))

    def _pick(self) -> ModelProcess:
        return min(self.processes, key=lambda p: len(p.pending))

    async def _end(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        async for message in self._pick().call(op, body):
            if "end" in message:
                return dict(message["end"])
        raise ModelProcessLost(f"the model process ended {op} without an answer")

    async def count(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        """Token counts of each list of messages, with `model`'s tokenizer."""
        end = await self._end("count", {"model": model, "messages": [list(b) for b in batches]})
        return [int(n) for n in end["counts"]]

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int:
        """Counted here, with litellm: a count wanted on the spot cannot wait on the pipe.
        The worker's counts go through `count`, which keeps litellm out of it."""
        return litellm_backend.count_tokens(model, messages)

    async def window(self, model: str) -> int | None:
        end = await self._end("window", {"model": model})
        return int(end["window"]) if end.get("window") else None

    async def vision(self, model: str) -> bool:
        end = await self._end("vision", {"model": model})
        return bool(end.get("vision"))

    async def transcribe(
        self, model: str, audio: bytes, filename: str, timeout: float, usage: Usage
    ) -> str:
        body = {
            "model": model,
            "audio": base64.b64encode(audio).decode("ascii"),
            "filename": filename,
            "timeout": timeout,
        }
        end = await self._end("transcribe", body)
        fill_usage(usage, end)
        return str(end.get("text", ""))

    async def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        async for message in self._pick().call("stream", {"call": call_fields(call)}):
            if "piece" in message:
                yield str(message["piece"])
            else:
                _fill_end(message["end"], usage, calls)

    async def stream_response(
        self,
        call: ModelCall,
        usage: Usage,
        chain: ResponseChain,
        calls: list[ToolCall] | None = None,
    ) -> AsyncIterator[str]:
        body = {"call": call_fields(call), "previous_id": chain.previous_id}
        async for message in self._pick().call("responses", body):
            if "piece" in message:
                yield str(message["piece"])
            else:
                _fill_end(message["end"], usage, calls)
                chain.response_id = message["end"].get("response_id")

    async def complete(self, call: ModelCall, usage: Usage) -> str:
        end = await self._end("complete", {"call": call_fields(call)})
        fill_usage(usage, end)
        return str(end.get("text", ""))


def _fill_end(end: dict[str, Any], usage: Usage, calls: list[ToolCall] | None) -> None:
    """What a stream's end carries: its usage, and the tool calls the caller asked for."""
    fill_usage(usage, end)
    if calls is not None:
        calls.extend(calls_from(end))
