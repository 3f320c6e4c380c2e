"""A model process: runs the requests its worker writes on stdin through litellm.

    python -m gateway.models.host

Started by the worker's pool (`gateway.models.pool`) and spoken to in the
line protocol of `gateway.models.wire`. It is given its settings on its first
line and reads no settings of its own from the environment (only where to
log, as every process does).

A stream's pieces cross in batches (`PieceBatch`): each line costs both processes
an encoding, a pipe write and a read, and the worker a piece fed to its reply,
while the reply shows its text once or twice a second at most.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import logging
import os
import sys
from typing import Any

from gateway.logs import setup
from gateway.models.litellm_backend import LitellmBackend, model_vision, model_window
from gateway.models.types import ModelSettings, ResponseChain, ToolCall, Usage
from gateway.models.wire import (
    LINE_LIMIT,
    call_from,
    calls_fields,
    dump,
    error_fields,
    usage_fields,
)

STOP_TIMEOUT = 1.0  # at the end of its input, how long a model process gives its calls to end
# Seconds: a stream's pieces are written at most this often. A quarter of the shortest
# default pacing of a reply's updates (1 s): no update shows text older than that, and a
# reply streamed 20 ms a token crosses the pipe in a few lines, not one per 50 ms (each
# line wakes both processes: the worker spent 2.0 ms a paced call reading them at
# 50 ms, 0.7 ms at this).
PIECE_WINDOW = 0.25


class PieceBatch:
    """One stream's pieces on their way to the pipe, at most one line each PIECE_WINDOW.

    A piece that comes a window or more after the last write (the first one, one
    after a pause) is written at once; those that follow within the window are
    held and written together, joined, when it ends, and what is held at the
    stream's end or failure goes in the same write as its last line.
    """

    def __init__(self, host: Host, request_id: int, window: float = PIECE_WINDOW) -> None:
        self.host, self.request_id, self.window = host, request_id, window
        self.loop = asyncio.get_running_loop()
        self.held: list[str] = []
        self.written_at = -window
        self.timer: asyncio.TimerHandle | None = None

    async def add(self, piece: str) -> None:
        if self.held:
            self.held.append(piece)
        elif self.loop.time() - self.written_at >= self.window:
            self.host.write([self._line(piece)])
            self.written_at = self.loop.time()
        else:
            self.held.append(piece)
            self.timer = self.loop.call_at(self.written_at + self.window, self.flush)
        await self.host.writer.drain()

    def flush(self) -> None:
        """Write what is held (the window is over)."""
        self.host.write(self.take())
        self.written_at = self.loop.time()

    def take(self) -> list[dict[str, Any]]:
        """What is held, as the line to write before the stream's last (none when nothing
        is); held no longer."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.held:
            return []
        piece, self.held = "".join(self.held), []
        return [self._line(piece)]

    def _line(self, piece: str) -> dict[str, Any]:
        return {"id": self.request_id, "piece": piece}


class Host:
    """Runs the requests read from stdin with a LitellmBackend; writes to stdout."""

    def __init__(self, backend: LitellmBackend, writer: asyncio.StreamWriter) -> None:
        self.backend, self.writer = backend, writer
        self.tasks: dict[int, asyncio.Task[None]] = {}

    async def stop(self) -> None:
        """Cancel every request (nobody reads their answers any more), for a moment.

        A cancellation can be lost in a race (asyncio.wait_for on Python 3.11
        returns a result that arrives as it is cancelled), and the gateway waits
        for this process to exit: a request that goes on is not waited for.
        """
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT)

    async def send(self, *messages: dict[str, Any]) -> None:
        self.write(list(messages))
        await self.writer.drain()

    def write(self, messages: list[dict[str, Any]]) -> None:
        """Lines, in one write to the pipe (none for no lines)."""
        if messages:
            self.writer.write(b"".join(dump(m) for m in messages))

    def handle(self, message: dict[str, Any]) -> None:
        request_id = int(message["id"])
        if message.get("op") == "cancel":
            task = self.tasks.get(request_id)
            if task is not None:
                task.cancel()
            return
        task = asyncio.create_task(self.run(request_id, message))
        self.tasks[request_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(request_id, None))

    async def run(self, request_id: int, message: dict[str, Any]) -> None:
        if message["op"] in ("count", "window", "vision"):
            await self._look_up(request_id, message)
        elif message["op"] == "transcribe":
            await self._transcribe(request_id, message)
        else:
            await self._call(request_id, message)

    async def _look_up(self, request_id: int, message: dict[str, Any]) -> None:
        """Token counts (in a thread: a first count loads the tokenizer's tables, which
        would stall the streams on this loop) or a model window (no model call)."""
        try:
            model = str(message["model"])
            if message["op"] == "count":
                answer: dict[str, Any] = {
                    "counts": await self.backend.count(model, message["messages"])
                }
            elif message["op"] == "vision":
                answer = {"vision": model_vision(model)}
            else:
                answer = {"window": model_window(model)}
        except Exception as exc:
            await self.send({"id": request_id, "error": error_fields(exc)})
            return
        await self.send({"id": request_id, "end": answer})

    async def _transcribe(self, request_id: int, message: dict[str, Any]) -> None:
        """A voice message's text: one request, answered with its end (or its error)."""
        audio, usage = base64.b64decode(message["audio"]), Usage()
        try:
            text = await self.backend.transcribe(
                str(message["model"]),
                audio,
                str(message["filename"]),
                float(message["timeout"]),
                usage,
            )
        except asyncio.CancelledError:
            return
        except Exception as exc:  # every failure goes back to the worker, as a ModelError
            await self.send({"id": request_id, "error": error_fields(exc)})
            return
        await self.send({"id": request_id, "end": {"text": text} | usage_fields(usage)})

    async def _call(self, request_id: int, message: dict[str, Any]) -> None:
        """A model call: its pieces as they come, then its end (or its error)."""
        call = call_from(message["call"])
        usage, end = Usage(), dict[str, Any]()
        batch = PieceBatch(self, request_id)
        try:
            if message["op"] == "complete":
                end["text"] = await self.backend.complete(call, usage)
            else:
                chain, calls = ResponseChain(message.get("previous_id")), list[ToolCall]()
                if message["op"] == "responses":
                    pieces = self.backend.stream_response(call, usage, chain, calls)
                else:
                    pieces = self.backend.stream(call, usage, calls)
                async for piece in pieces:
                    await batch.add(piece)
                end["response_id"] = chain.response_id
                end["calls"] = calls_fields(calls)
        except asyncio.CancelledError:
            batch.take()  # nobody reads them any more
            return
        except Exception as exc:  # every failure goes back to the worker, as a ModelError
            await self.send(*batch.take(), {"id": request_id, "error": error_fields(exc)})
            return
        await self.send(*batch.take(), {"id": request_id, "end": end | usage_fields(usage)})


async def serve() -> None:
    # The protocol keeps the real stdout; anything else printed there (a library's
    # banner) goes to stderr instead of into the protocol.
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, protocol_out
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    settings = ModelSettings.from_init(json.loads(await reader.readline())["init"])
    api_key = settings.api_key
    setup(
        os.environ.get("GATEWAY_LOG_LEVEL", "WARNING").upper(),
        os.environ.get("GATEWAY_LOG_FORMAT", "text"),
        [api_key] if api_key else [],
    )
    backend = LitellmBackend(settings)
    await backend.start()
    # litellm's ~400,000 start-up objects live as long as the process: frozen, a full
    # collection no longer walks them (it stalled every stream here for 0.2 s and more).
    gc.freeze()
    host = Host(backend, writer)
    await host.send({"ready": True})
    while line := await reader.readline():
        host.handle(json.loads(line))
    await host.stop()


def main() -> None:
    # Not asyncio.run: its clean-up waits for every task, a call that lost its
    # cancellation too. Nor the interpreter's own teardown of litellm's thousands of
    # modules, which takes seconds while the gateway's stop waits for this process.
    # Once the input has ended and the answers are written, the process ends here.
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.new_event_loop().run_until_complete(serve())
    logging.shutdown()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
