"""A loopback OpenAI-compatible model server for tests and benchmarks.

litellm talks to it over real HTTP, exactly as it talks to OpenAI:

    with FakeLLM() as llm:
        await litellm.acompletion(model="openai/fake-model", api_base=llm.api_base,
                                  api_key="sk-test", messages=[...], stream=True)
        assert llm.requests[-1]["model"] == "fake-model"

It serves `POST /v1/chat/completions` and `POST /v1/responses` (streamed as SSE or
whole), records every JSON body it receives, and can be scripted: the reply text,
or an `Answer` that calls tools (tests/fakes/llm_tools.py), for every request or
queued for the next ones (`answer_next`), delays before the first token and
between tokens, per-model behaviour, failures with OpenAI's error body, and
requests that hang (before their headers, right after them, or after a few
tokens; a tool call's fragments count as tokens). The aiohttp server runs on its
own event loop in a background thread, so in-process async tests and subprocesses
can both use it.

As a script (`python -m tests.fakes.llm_server --port N --delay S`) it prints its
api_base and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from aiohttp import web

from tests.fakes.llm_shapes import (
    JSON,
    ResponseEvents,
    chat_chunk,
    chat_completion,
    chat_usage,
    count_words,
    error_body,
    last_user_text,
    new_id,
    output_message,
    prompt_tokens,
    response_object,
    responses_usage,
    split_words,
    write_event,
)
from tests.fakes.llm_tools import (
    Answer,
    Step,
    chat_message_calls,
    chat_tool_deltas,
    function_call_item,
    function_call_steps,
)
from tests.fakes.server import CallLog, LoopbackServer

Reply = str | Answer | Callable[[JSON], str | Answer]
_R = TypeVar("_R", bound=web.StreamResponse)


def default_reply(body: JSON) -> str:
    """ "fake reply to: <the first 50 characters of the last user message>"."""
    text = last_user_text(body.get("messages", body.get("input")))
    return f"fake reply to: {text[:50]}"


class ReceivedRequest(dict[str, Any]):
    """A received JSON body (compares equal to the plain dict) plus what the fake saw.

    `path` is the URL path, `headers` the request headers, `status` the HTTP
    status answered, `received_at` / `finished_at` are `time.monotonic()` stamps
    (when the body arrived, when the answer was complete; None while running).
    """

    def __init__(self, path: str, body: JSON, headers: dict[str, str]) -> None:
        super().__init__(body)
        self.path = path
        self.headers = headers
        self.status = 200
        self.received_at = time.monotonic()
        self.finished_at: float | None = None

    @property
    def model(self) -> str:
        return str(self.get("model", ""))

    @property
    def duration(self) -> float | None:
        """Seconds from arrival to the end of the answer, once answered."""
        return None if self.finished_at is None else self.finished_at - self.received_at


@dataclasses.dataclass
class Behaviour:
    """How a model answers: the reply and the pacing of its tokens.

    `first_token_delay` is slept before the first token (before the whole body when
    not streamed); `token_delay` between tokens. `duration`, when set, replaces
    `token_delay` so that the tokens are spread evenly over that many seconds.
    """

    reply: Reply | None = None
    first_token_delay: float = 0.0
    token_delay: float = 0.0
    duration: float | None = None
    # The prompt's tokens the usage reports; None: as OpenAI counts them (`prompt_tokens`).
    reported_prompt: int | None = None

    def prompt_of(self, messages: object) -> int:
        return prompt_tokens(messages) if self.reported_prompt is None else self.reported_prompt

    def answer_for(self, body: JSON) -> Answer:
        if self.reply is None:
            return Answer(default_reply(body))
        reply = self.reply(body) if callable(self.reply) else self.reply
        return reply if isinstance(reply, Answer) else Answer(str(reply))

    def text_for(self, body: JSON) -> str:
        return self.answer_for(body).text

    def gap(self, pieces: int) -> float:
        """The pause between two tokens of a reply cut into `pieces`."""
        if self.duration is not None:
            return self.duration / max(1, pieces)
        return self.token_delay


@dataclasses.dataclass
class _Failure:
    status: int
    times: int
    retry_after: float | None
    message: str | None
    code: str | None
    model: str | None


@dataclasses.dataclass
class _Queued:
    answer: Answer
    model: str | None
    times: int = 1


@dataclasses.dataclass
class _Hang:
    times: int
    model: str | None
    after_tokens: int
    after_headers: bool = False
    drop: bool = False  # the connection is cut where the stream would stall

    def streams(self, body: JSON) -> bool:
        """Whether this hang lets a streamed answer start (headers, maybe tokens) first."""
        return bool(body.get("stream")) and (
            self.after_headers or self.after_tokens > 0 or self.drop
        )


@dataclasses.dataclass(frozen=True)
class Transcription:
    """One transcription request: the model asked for, the file's name and bytes."""

    model: str
    filename: str
    audio: bytes


class _Stalled(Exception):
    """A scripted stall ended: the stream stops without its closing events."""


class _Dropped(Exception):
    """A scripted drop: the connection is cut in the middle of the stream."""


def _bare_model(name: str) -> str:
    """ "openai/side-model" and "side-model" name the same model at this server."""
    return name.split("/", 1)[1] if name.startswith("openai/") else name


class FakeLLM(LoopbackServer):
    """The fake server: start(), stop() (or use it as a context manager), `api_base`."""

    thread_name = "fake-llm"
    runner_options: ClassVar[dict[str, Any]] = {"shutdown_timeout": 1.0}

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        super().__init__(host, port)
        self.reply: Reply | None = None
        self.first_token_delay = 0.0
        self.token_delay = 0.0
        self.duration: float | None = None
        self._models: dict[str, Behaviour] = {}
        self._lock = threading.Lock()
        self._requests: CallLog[ReceivedRequest] = CallLog()
        self._failures: list[_Failure] = []
        self._hangs: list[_Hang] = []
        self._queued: list[_Queued] = []
        self._response_ids: set[str] = set()
        self._release: asyncio.Event | None = None
        self.transcript = "fake transcript"
        # Set: the answer carries OpenAI's token usage (gpt-4o-transcribe's shape).
        self.transcription_tokens: tuple[int, int] | None = None
        self.transcriptions: CallLog[Transcription] = CallLog()

    # -- lifecycle ---------------------------------------------------------------

    @property
    def api_base(self) -> str:
        """The base URL to hand to litellm (`api_base=`), ending in /v1."""
        return f"{self.url}/v1"

    def start(self) -> FakeLLM:
        """Bind and serve in a background thread; returns once the port is listening."""
        if self._loop_thread is not None:
            return self
        self.serve_in_thread()
        return self

    def stop(self) -> None:
        """Release hanging requests, close the server and its thread."""
        self.close_thread(tolerate_a_slow_close=True)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _app(self) -> web.Application:
        self._release = asyncio.Event()  # built here, in the loop that serves
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/audio/transcriptions", self._transcription)
        app.router.add_get("/_fake/requests", self._recorded)
        return app

    async def _before_close(self) -> None:
        if self._release is not None:
            self._release.set()

    # -- recorded requests -------------------------------------------------------

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of every JSON body received so far, oldest first."""
        return self._requests.snapshot()

    def requests_for(self, model: str) -> list[ReceivedRequest]:
        """The received bodies that asked for `model` (with or without "openai/")."""
        wanted = _bare_model(model)
        return [req for req in self.requests if _bare_model(req.model) == wanted]

    def wait_for_requests(
        self, n: int, timeout: float = 10.0, *, model: str | None = None, path: str | None = None
    ) -> list[ReceivedRequest]:
        """Poll until at least `n` matching requests arrived; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.requests_for(model) if model is not None else self.requests
            if path is not None:
                found = [req for req in found if req.path == path]
            if len(found) >= n:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} of {n} requests arrived in {timeout}s")
            time.sleep(0.005)

    async def await_requests(
        self, n: int, timeout: float = 10.0, *, model: str | None = None, path: str | None = None
    ) -> list[ReceivedRequest]:
        """`wait_for_requests` for async tests: polls without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.wait_for_requests(n, 0, model=model, path=path)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.005)

    def clear(self) -> None:
        """Forget the recorded requests (scripting and stored response ids stay)."""
        self._requests.forget()

    # -- scripting ---------------------------------------------------------------

    def set_model_behaviour(
        self,
        model: str,
        *,
        reply: Reply | None = None,
        delay: float | None = None,
        first_token_delay: float | None = None,
        token_delay: float = 0.0,
        duration: float | None = None,
        reported_prompt: int | None = None,
    ) -> None:
        """Script one model apart from the default; `delay` is the first-token delay,
        `reported_prompt` the prompt's tokens its usage reports, whatever it was sent."""
        first = first_token_delay if first_token_delay is not None else (delay or 0.0)
        behaviour = Behaviour(reply, first, token_delay, duration, reported_prompt)
        self._models[_bare_model(model)] = behaviour

    def behaviour_for(self, model: str) -> Behaviour:
        """The behaviour a request for `model` gets: its override, or the server default."""
        override = self._models.get(_bare_model(model))
        if override is not None:
            return override
        return Behaviour(self.reply, self.first_token_delay, self.token_delay, self.duration)

    def fail_next(
        self,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        *,
        message: str | None = None,
        code: str | None = None,
        model: str | None = None,
    ) -> None:
        """Answer the next `times` requests (for `model`, if given) with an OpenAI error."""
        with self._lock:
            self._failures.append(
                _Failure(
                    status,
                    times,
                    retry_after,
                    message,
                    code,
                    None if model is None else _bare_model(model),
                )
            )

    def hang_next(
        self,
        times: int = 1,
        *,
        model: str | None = None,
        after_tokens: int = 0,
        after_headers: bool = False,
    ) -> None:
        """Make the next `times` requests never finish (until stop() or release_hangs()).

        With `after_tokens`, a streamed reply sends that many tokens first, then stalls.
        With `after_headers`, a streamed reply sends its status and headers, then not
        one byte of its body (a provider that accepted the call and went silent).
        A request whose client went away before it reached its stall does not use the
        hang up: the next request (the client's retry) stalls in its place.
        """
        with self._lock:
            self._hangs.append(
                _Hang(
                    times,
                    None if model is None else _bare_model(model),
                    after_tokens,
                    after_headers,
                )
            )

    def drop_next(self, times: int = 1, *, model: str | None = None, after_tokens: int = 1) -> None:
        """Cut the connection of the next `times` streamed replies after `after_tokens`
        tokens: no closing events, no end to the chunked body (a provider that died
        midway)."""
        with self._lock:
            self._hangs.append(
                _Hang(times, None if model is None else _bare_model(model), after_tokens, drop=True)
            )

    def answer_next(self, *answers: str | Answer, model: str | None = None) -> None:
        """Answer the next requests (for `model`, if given) with `answers`, one each, in
        order; then the scripted reply again."""
        bare = None if model is None else _bare_model(model)
        with self._lock:
            for answer in answers:
                value = answer if isinstance(answer, Answer) else Answer(answer)
                self._queued.append(_Queued(value, bare))

    def _answer(self, received: ReceivedRequest, behaviour: Behaviour) -> Answer:
        queued: _Queued | None = self._take(self._queued, received.model)
        return queued.answer if queued is not None else behaviour.answer_for(received)

    def release_hangs(self) -> None:
        """Let every hanging request end (the connection is closed without an answer)."""
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)

    def forget_responses(self) -> None:
        """Drop every stored response id, as a provider does when its state expires."""
        with self._lock:
            self._response_ids.clear()

    @property
    def response_ids(self) -> set[str]:
        """The Responses API ids issued and still held."""
        with self._lock:
            return set(self._response_ids)

    def _take(self, queue: list[Any], model: str) -> Any:
        with self._lock:
            for entry in queue:
                if entry.model is None or entry.model == _bare_model(model):
                    entry.times -= 1
                    if entry.times <= 0:
                        queue.remove(entry)
                    return entry
        return None

    def _rearm(self, hang: _Hang | None) -> None:
        """Give back a hang its request never reached (the client had gone)."""
        if hang is None:
            return
        with self._lock:
            if any(entry is hang for entry in self._hangs):
                hang.times += 1
            else:
                hang.times = 1
                self._hangs.insert(0, hang)

    async def _open_stream_for(
        self, request: web.Request, hang: _Hang | None
    ) -> web.StreamResponse:
        try:
            return await self._open_stream(request)
        except ConnectionResetError:
            self._rearm(hang)
            raise

    async def _until_stalled_or_gone(
        self, request: web.Request, hang: _Hang | None, steps: Awaitable[None]
    ) -> None:
        """A stream's writes, ended by its stall, its drop or the client going away
        (before the stall, then: only a stall raises _Stalled, so the hang is given back)."""
        try:
            await steps
        except _Stalled:
            pass
        except _Dropped:
            if request.transport is not None:
                request.transport.abort()
        except ConnectionResetError:
            self._rearm(hang)

    # -- handlers ----------------------------------------------------------------

    async def _receive(self, request: web.Request) -> ReceivedRequest | web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response(error_body(400, "body is not JSON"), status=400)
        if not isinstance(body, dict):
            return web.json_response(error_body(400, "body is not a JSON object"), status=400)
        received = ReceivedRequest(request.path, body, dict(request.headers))
        self._requests.record(received)
        return received

    def _failure_response(self, received: ReceivedRequest) -> web.Response | None:
        failure: _Failure | None = self._take(self._failures, received.model)
        if failure is None:
            return None
        headers = (
            {}
            if failure.retry_after is None
            else {
                "Retry-After": f"{failure.retry_after:g}",
                "retry-after-ms": str(int(failure.retry_after * 1000)),
            }
        )
        return self._finish(
            received,
            web.json_response(
                error_body(failure.status, failure.message, failure.code),
                status=failure.status,
                headers=headers,
            ),
        )

    def _finish(self, received: ReceivedRequest, response: _R) -> _R:
        received.status = response.status
        received.finished_at = time.monotonic()
        return response

    async def _hang(self) -> None:
        assert self._release is not None
        await self._release.wait()

    async def _silent(
        self, received: ReceivedRequest, stream: web.StreamResponse
    ) -> web.StreamResponse:
        """A stream whose headers went out: send nothing more until released."""
        await self._hang()
        return self._finish(received, stream)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        if isinstance(received, web.Response):
            return received
        failed = self._failure_response(received)
        if failed is not None:
            return failed
        hang: _Hang | None = self._take(self._hangs, received.model)
        if hang is not None and not hang.streams(received):
            await self._hang()
            raise web.HTTPServiceUnavailable()
        behaviour = self.behaviour_for(received.model)
        answer = self._answer(received, behaviour)
        usage = chat_usage(behaviour.prompt_of(received.get("messages")), _answer_words(answer))
        completion_id = new_id("chatcmpl")
        if not received.get("stream"):
            await self._pace_whole(behaviour, answer.text)
            calls = chat_message_calls(answer.calls) or None
            whole = chat_completion(completion_id, received.model, answer.text, usage, calls)
            return self._finish(received, web.json_response(whole))
        include_usage = bool((received.get("stream_options") or {}).get("include_usage"))
        stream = await self._open_stream_for(request, hang)
        if hang is not None and hang.after_headers:
            return await self._silent(received, stream)
        await self._until_stalled_or_gone(
            request,
            hang,
            self._stream_chat(
                stream,
                received.model,
                completion_id,
                behaviour,
                answer,
                hang,
                usage if include_usage else None,
            ),
        )
        return self._finish(received, stream)

    async def _stream_chat(
        self,
        stream: web.StreamResponse,
        model: str,
        completion_id: str,
        behaviour: Behaviour,
        answer: Answer,
        hang: _Hang | None,
        usage: JSON | None,
    ) -> None:
        def chunk(delta: JSON | None, finish: str | None = None, **extra: Any) -> JSON:
            return chat_chunk(completion_id, model, delta, finish, **extra)

        body: list[Step] = [(chunk({"content": p}), True) for p in split_words(answer.text)]
        body += [(chunk(delta), True) for delta in chat_tool_deltas(answer.calls)]
        body += [(chunk(delta), False) for delta in answer.raw_deltas]
        closing = [chunk({}, "tool_calls" if answer.calls else "stop")]
        if usage is not None:
            closing.append(chunk(None, usage=usage))
        opening = [chunk({"role": "assistant", "content": ""})]
        await self._write_steps(stream, behaviour, opening, body, closing, hang)
        await stream.write(b"data: [DONE]\n\n")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        if isinstance(received, web.Response):
            return received
        failed = self._failure_response(received) or self._unknown_previous(received)
        if failed is not None:
            return failed
        hang: _Hang | None = self._take(self._hangs, received.model)
        if hang is not None and not hang.streams(received):
            await self._hang()
            raise web.HTTPServiceUnavailable()
        behaviour = self.behaviour_for(received.model)
        answer = self._answer(received, behaviour)
        instructions = received.get("instructions")
        inputs = received.get("input")
        items = [instructions] if instructions else []
        items += inputs if isinstance(inputs, list) else [inputs] if inputs else []
        prompt = behaviour.prompt_of(items)
        usage = responses_usage(prompt, _answer_words(answer))
        response_id, item_id = new_id("resp"), new_id("msg")
        call_items = [(new_id("fc"), call) for call in answer.calls]
        with self._lock:
            self._response_ids.add(response_id)
        with_message = bool(answer.text or not answer.calls)
        output = [output_message(item_id, answer.text)] if with_message else []
        output += [function_call_item(fc_id, call) for fc_id, call in call_items]
        done = response_object(
            response_id, received, status="completed", output=output, usage=usage
        )
        if not received.get("stream"):
            await self._pace_whole(behaviour, answer.text)
            return self._finish(received, web.json_response(done))
        stream = await self._open_stream_for(request, hang)
        if hang is not None and hang.after_headers:
            return await self._silent(received, stream)
        events = ResponseEvents(item_id)
        started = response_object(
            response_id, received, status="in_progress", output=[], usage=None
        )
        opening, body = events.started(started), list[Step]()
        if with_message:
            opening += events.message_opening()
            body += [(events.delta(piece), True) for piece in split_words(answer.text)]
            body += [(event, False) for event in events.message_closing(answer.text)]
        for index, (fc_id, call) in enumerate(call_items, start=int(with_message)):
            body += function_call_steps(events.event, index, fc_id, call)
        closing = [events.completed(done)]
        await self._until_stalled_or_gone(
            request, hang, self._write_steps(stream, behaviour, opening, body, closing, hang)
        )
        return self._finish(received, stream)

    def _unknown_previous(self, received: ReceivedRequest) -> web.Response | None:
        previous = received.get("previous_response_id")
        with self._lock:
            known = previous is None or previous in self._response_ids
        if known:
            return None
        return self._finish(
            received,
            web.json_response(
                error_body(
                    400,
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_not_found",
                    "previous_response_id",
                ),
                status=400,
            ),
        )

    async def _recorded(self, request: web.Request) -> web.Response:
        """The recorded requests, for a test or benchmark whose fake runs in a subprocess.

        The stamps are `time.monotonic()`, which on Linux is one clock for every
        process of the machine.
        """
        return web.json_response(
            [
                {
                    "path": req.path,
                    "status": req.status,
                    "received_at": req.received_at,
                    "finished_at": req.finished_at,
                    "body": dict(req),
                }
                for req in self.requests
            ]
        )

    async def _transcription(self, request: web.Request) -> web.Response:
        """OpenAI's transcription endpoint: a multipart upload, answered with `transcript`."""
        fields: dict[str, str] = {}
        audio, filename = b"", ""
        async for part in await request.multipart():
            if getattr(part, "name", None) == "file":
                filename = part.filename or ""  # type: ignore[union-attr]
                audio = await part.read()  # type: ignore[union-attr]
            elif part.name:
                fields[part.name] = await part.text()  # type: ignore[union-attr]
        self.transcriptions.record(Transcription(fields.get("model", ""), filename, audio))
        answer: JSON = {"text": self.transcript}
        if self.transcription_tokens is not None:
            given, said = self.transcription_tokens
            answer["usage"] = {
                "type": "tokens",
                "input_tokens": given,
                "output_tokens": said,
                "total_tokens": given + said,
            }
        return web.json_response(answer)

    def image_parts(self, request: JSON) -> list[str]:
        """The data URLs of every image part a chat request carried."""
        return [
            part["image_url"]["url"]
            for message in request.get("messages") or []
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if isinstance(part, dict) and part.get("type") == "image_url"
        ]

    async def _list_models(self, request: web.Request) -> web.Response:
        names = ["fake-model", *self._models]
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "fake"}
                    for name in names
                ],
            }
        )

    # -- pacing and SSE ----------------------------------------------------------

    async def _pace_whole(self, behaviour: Behaviour, text: str) -> None:
        """A whole answer takes as long as its stream would have."""
        pieces = len(split_words(text))
        await asyncio.sleep(behaviour.first_token_delay + behaviour.gap(pieces) * pieces)

    async def _write_steps(
        self,
        stream: web.StreamResponse,
        behaviour: Behaviour,
        opening: list[JSON],
        body: list[Step],
        closing: list[JSON],
        hang: _Hang | None,
    ) -> None:
        """The events of a stream: `opening` at once, then the first-token delay, `body`
        (its paced steps are the tokens: spaced by the gap, where a hang stalls), then
        `closing`."""
        for event in opening:
            await write_event(stream, event)
        await asyncio.sleep(behaviour.first_token_delay)
        gap = behaviour.gap(sum(1 for _, paced in body if paced))
        tokens = 0
        for event, paced in body:
            if paced:
                if hang is not None and tokens >= hang.after_tokens:
                    if hang.drop:
                        raise _Dropped()
                    await self._hang()
                    raise _Stalled()
                if tokens:
                    await asyncio.sleep(gap)
                tokens += 1
            await write_event(stream, event)
        for event in closing:
            await write_event(stream, event)

    @staticmethod
    async def _open_stream(request: web.Request) -> web.StreamResponse:
        stream = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await stream.prepare(request)
        return stream


def _answer_words(answer: Answer) -> int:
    """The answer's output tokens, roughly: its text's words and its calls' arguments'."""
    return count_words([answer.text, *(call.arguments for call in answer.calls)])


def _model_option(text: str) -> tuple[str, float, float | None]:
    """`NAME=DELAY[,DURATION]`: a model's first-token delay and, optionally, its stream time."""
    name, _, timing = text.partition("=")
    delay, _, duration = timing.partition(",")
    try:
        return name, float(delay or 0), float(duration) if duration else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=DELAY[,DURATION], got {text!r}") from None


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM, after printing the api_base on stdout."""
    parser = argparse.ArgumentParser(description="Loopback OpenAI-compatible fake model server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before the first token")
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds between tokens")
    parser.add_argument("--reply", default=None, help="fixed reply text")
    parser.add_argument(
        "--model",
        type=_model_option,
        action="append",
        default=[],
        metavar="NAME=DELAY[,DURATION]",
        help="one model's own pacing",
    )
    args = parser.parse_args(argv)
    server = FakeLLM(port=args.port)
    server.reply, server.first_token_delay = args.reply, args.delay
    server.token_delay = args.token_delay
    for name, delay, duration in args.model:
        server.set_model_behaviour(name, reply=args.reply, delay=delay, duration=duration)
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    with server:
        print(server.api_base, flush=True)
        stopped.wait()


if __name__ == "__main__":
    main()
