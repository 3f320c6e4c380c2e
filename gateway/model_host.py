"""Model processes: litellm's calls, run in processes of their own.

litellm spends about 30 ms of Python per streamed call here (building the
request, a model object per chunk, its logging and cost bookkeeping), in
single steps of up to about 10 ms. In the worker's event loop every such step
holds up every other session's Redis round trips, edits, lease heartbeats and
/stop. With `GATEWAY_MODEL_PROCESSES=N`, a worker starts N model processes
(`python -m gateway.model_host`) and sends each call to one of them over a
pipe; only the text comes back, so the worker's loop stays free and litellm
gets cores of its own. Token counts and model windows come from here too, so
a worker with model processes never imports litellm at all.

The protocol is one JSON object per line.
- worker -> model process: `{"init": {...}}` once, then
  `{"id": n, "op": "stream" | "responses" | "complete", "call": {...}}`,
  `{"id": n, "op": "count", "model": ..., "messages": [[...], ...]}` (token
  counts, one per list of messages), `{"id": n, "op": "window", "model": ...}`
  (the model's input window) and `{"id": n, "op": "cancel"}`.
- model process -> worker: `{"ready": true}` once, then for a request
  `{"id": n, "piece": "..."}` any number of times and one of
  `{"id": n, "end": {...}}` or `{"id": n, "error": {"kind", "text", "retry_after"}}`.

Retries happen in the model process (before the first piece, as in process).
A model process that dies fails its calls with ModelUnavailable; the next call
starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from gateway import errors
from gateway.errors import ModelError, ModelRateLimited, ModelUnavailable

if TYPE_CHECKING:
    from gateway.llm import Message, ModelCall, Models, ResponseChain, Usage

log = logging.getLogger(__name__)

LINE_LIMIT = 64 * 1024 * 1024  # a request carries a whole compiled conversation
START_TIMEOUT = 120.0  # litellm's import takes seconds on a busy machine


def _dump(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False) + "\n").encode()


def _call_fields(call: ModelCall) -> dict[str, Any]:
    return {
        "model": call.model,
        "messages": list(call.messages),
        "timeout": call.timeout,
        "max_tokens": call.max_tokens,
        "temperature": call.temperature,
    }


def _error_fields(exc: BaseException) -> dict[str, Any]:
    if not isinstance(exc, ModelError):
        exc = ModelUnavailable(f"{type(exc).__name__} in the model process")
    return {
        "kind": type(exc).__name__,
        "text": str(exc),
        "retry_after": exc.retry_after if isinstance(exc, ModelRateLimited) else None,
    }


def _error_from(fields: dict[str, Any]) -> ModelError:
    kind = getattr(errors, str(fields.get("kind")), None)
    if not (isinstance(kind, type) and issubclass(kind, ModelError)):
        kind = ModelUnavailable
    text = str(fields.get("text", "the model process failed"))
    if issubclass(kind, ModelRateLimited):
        retry_after = fields.get("retry_after")
        return kind(text, retry_after=None if retry_after is None else float(retry_after))
    return kind(text)


class ModelProcess:
    """One model process, seen from the worker: calls go in, their pieces come out."""

    def __init__(self, init: dict[str, Any]) -> None:
        self.init = init
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
                "gateway.model_host",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                limit=LINE_LIMIT,
            )
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(_dump({"init": self.init}))
            try:
                async with asyncio.timeout(START_TIMEOUT):
                    ready = await process.stdout.readline()
            except TimeoutError:
                process.kill()
                raise ModelUnavailable("the model process did not start in time") from None
            if not ready:
                await process.wait()
                raise ModelUnavailable(f"the model process exited ({process.returncode})")
            self.process = process
            self._reader = asyncio.create_task(self._read(process))
            log.info("model process %d ready", process.pid)

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
            queue.put_nowait({"id": request_id, "error": _error_fields(ModelUnavailable(text))})

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
            stdin.write(_dump(request))
            await stdin.drain()
            while True:
                message = await queue.get()
                if "error" in message:
                    finished = True
                    raise _error_from(message["error"])
                finished = "end" in message
                yield message
                if finished:
                    return
        except (ConnectionError, RuntimeError) as exc:
            finished = True
            raise ModelUnavailable(f"the model process is gone ({type(exc).__name__})") from exc
        finally:
            del self.pending[request_id]
            if not finished and self.running:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    stdin.write(_dump({"id": request_id, "op": "cancel"}))

    async def aclose(self) -> None:
        process = self.process
        if process is None:
            return
        self._closing = True
        if process.stdin is not None:
            process.stdin.close()
        try:
            async with asyncio.timeout(10):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class ModelPool:
    """The model processes of one worker; each call goes to the least busy one."""

    def __init__(self, init: dict[str, Any], size: int) -> None:
        self.processes = [ModelProcess(init) for _ in range(size)]

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
        raise ModelUnavailable(f"the model process ended {op} without an answer")

    async def count(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        """Token counts of each list of messages, with `model`'s tokenizer."""
        end = await self._end("count", {"model": model, "messages": [list(b) for b in batches]})
        return [int(n) for n in end["counts"]]

    async def window(self, model: str) -> int | None:
        end = await self._end("window", {"model": model})
        return int(end["window"]) if end.get("window") else None

    async def stream(self, call: ModelCall, usage: Usage) -> AsyncIterator[str]:
        async for message in self._pick().call("stream", {"call": _call_fields(call)}):
            if "piece" in message:
                yield str(message["piece"])
            else:
                _fill(usage, message["end"])

    async def stream_response(
        self, call: ModelCall, usage: Usage, chain: ResponseChain
    ) -> AsyncIterator[str]:
        body = {"call": _call_fields(call), "previous_id": chain.previous_id}
        async for message in self._pick().call("responses", body):
            if "piece" in message:
                yield str(message["piece"])
            else:
                _fill(usage, message["end"])
                chain.response_id = message["end"].get("response_id")

    async def complete(self, call: ModelCall, usage: Usage) -> str:
        end = await self._end("complete", {"call": _call_fields(call)})
        _fill(usage, end)
        return str(end.get("text", ""))


def _fill(usage: Usage, end: dict[str, Any]) -> None:
    usage.prompt_tokens = int(end.get("prompt_tokens", 0) or 0)
    usage.completion_tokens = int(end.get("completion_tokens", 0) or 0)


# -- the model process itself ---------------------------------------------------


class Host:
    """Runs the requests read from stdin with an in-process Models; writes to stdout."""

    def __init__(self, models: Models, writer: asyncio.StreamWriter) -> None:
        self.models, self.writer = models, writer
        self.tasks: dict[int, asyncio.Task[None]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        self.writer.write(_dump(message))
        await self.writer.drain()

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
        from gateway.llm import ModelCall, ResponseChain, Usage, model_window

        if message["op"] in ("count", "window"):
            try:
                model = str(message["model"])
                if message["op"] == "count":
                    counts = [self.models.count_tokens(model, b) for b in message["messages"]]
                    answer: dict[str, Any] = {"counts": counts}
                else:
                    answer = {"window": model_window(model)}
            except Exception as exc:
                await self.send({"id": request_id, "error": _error_fields(exc)})
                return
            await self.send({"id": request_id, "end": answer})
            return
        fields = message["call"]
        call = ModelCall(
            fields["model"],
            fields["messages"],
            float(fields["timeout"]),
            max_tokens=fields.get("max_tokens"),
            temperature=fields.get("temperature"),
        )
        usage, end = Usage(), dict[str, Any]()
        try:
            if message["op"] == "complete":
                text, _ = await self.models.complete_here(call, usage)
                end["text"] = text
            else:
                chain = ResponseChain(message.get("previous_id"))
                if message["op"] == "responses":
                    pieces = self.models.stream_response_here(call, usage, chain)
                else:
                    pieces = self.models.stream_here(call, usage)
                async for piece in pieces:
                    await self.send({"id": request_id, "piece": piece})
                end["response_id"] = chain.response_id
        except asyncio.CancelledError:
            return
        except Exception as exc:  # every failure goes back to the worker, as a ModelError
            await self.send({"id": request_id, "error": _error_fields(exc)})
            return
        end |= {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
        await self.send({"id": request_id, "end": end})


async def serve() -> None:
    from gateway.llm import Models, load_litellm
    from gateway.logs import setup

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
    init = json.loads(await reader.readline())["init"]
    api_key = init.get("api_key")
    setup(os.environ.get("GATEWAY_LOG_LEVEL", "WARNING").upper(),
          os.environ.get("GATEWAY_LOG_FORMAT", "text"), [api_key] if api_key else [])
    models = Models.from_values(
        init.get("api_base"), api_key, int(init["retries"]), init.get("idle_timeout")
    )
    load_litellm()
    host = Host(models, writer)
    await host.send({"ready": True})
    while line := await reader.readline():
        host.handle(json.loads(line))
    for task in list(host.tasks.values()):
        task.cancel()
    await asyncio.gather(*host.tasks.values(), return_exceptions=True)


def main() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
