"""The drill of a model endpoint that never answers: it takes the request and sends nothing,
not even its response headers.

Every main-model call hangs so. Each user must be told once that the model could not
answer, within the idle timeout (GATEWAY_STREAM_IDLE_TIMEOUT) of each attempt (the
call and its retry), the backoff between them and the delivery's own time. The model
timeout is left at its default (120 s): that is what held such a turn, once per attempt,
while the idle clock started only with the headers.
"""

from __future__ import annotations

import asyncio

import httpx
from drill_faults import group_chat, row, settle
from drill_stack import FAILURE_TEXT, stack, tagged_reply
from drill_traffic import Row, Telegram, tag

from tests.fakes.llm_server import FakeLLM

IDLE, RETRIES = 2.0, 1
MODEL_TIMEOUT = 120.0  # the default, far above what the drill allows
BACKOFF = 0.75  # the most the first retry waits (0.5 s, jittered by up to half again)
DELIVERY = 1.5  # the claim, the post and its edit, on a loaded machine
MAIN_MODEL = "fake-model"


async def silent_model(quick: bool) -> Row:
    """Each message to a model that sends no headers: one failure notice each, in time,
    and no call beyond the retries."""
    trials, attempts = (5 if quick else 10), 1 + RETRIES
    limit = IDLE * attempts + BACKOFF + DELIVERY
    llm = FakeLLM()
    llm.reply = tagged_reply(6)  # what a call beyond the retries would get: an answer
    llm.hang_next(trials * attempts, model=MAIN_MODEL)  # accepted, then not one byte
    settings = {
        "GATEWAY_STREAM_IDLE_TIMEOUT": f"{IDLE:g}",
        "GATEWAY_MODEL_RETRIES": str(RETRIES),
        "GATEWAY_MODEL_TIMEOUT": f"{MODEL_TIMEOUT:g}",
    }
    async with stack("silent-model", llm=llm, **settings) as s:
        await s.start_web()
        await s.start_workers(2)
        tg = Telegram(s)
        async with httpx.AsyncClient(timeout=30) as http:
            sents = await asyncio.gather(
                *(tg.send(http, group_chat(n), tag(n, 1), retry_for=10) for n in range(trials))
            )
        counted = await settle(s, tg, list(sents), limit + 30)
        told = sum(1 for x in sents for m in tg.replies(x) if FAILURE_TEXT in m.text)
        calls = len(llm.requests_for(MAIN_MODEL))
        worst = counted.worst
        in_time = worst is not None and worst <= limit
        ok = told == counted.trials == trials and calls <= trials * attempts and in_time
        result = row(
            "silent-model",
            counted,
            ok,
            f"{told} of {counted.trials} told once, the last after "
            f"{'-' if worst is None else f'{worst:.2f}s'} (limit {limit:g}s: "
            f"idle {IDLE:g}s x {attempts} attempts + {BACKOFF:g}s backoff + {DELIVERY:g}s)",
        )
        result.notes.append(
            f"{calls} model calls for {trials} messages (at most {trials * attempts}); "
            f"model timeout {MODEL_TIMEOUT:g}s, which bounded each attempt before"
        )
        return result
