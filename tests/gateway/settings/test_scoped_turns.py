"""Settings by scope through the real worker: the model, system prompt and budgets a turn
uses, a change made by another process seen at the next turn, side questions, /status."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gateway.models import Charge, ModelCall, Usage
from gateway.settings.scoped import ScopedSettings
from gateway.spend.usage import UsageLedger
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound
from tests.support.redis_servers import client_for

USED_UP = "⚠️ Your daily budget (1,000 tokens) is used up; it resets at 00:00 UTC."


@contextlib.asynccontextmanager
async def elsewhere(redis_url: str, h: Harness) -> AsyncIterator[ScopedSettings]:
    """Settings by scope as another process changes them: a client of its own."""
    client = client_for(redis_url)
    try:
        store = ScopedSettings(client, h.workers[0].settings)
        await store.load()
        yield store
    finally:
        await client.aclose()


def system_prompt(llm: FakeLLM, index: int) -> str:
    return str(llm.requests[index]["messages"][0]["content"])


async def ask(h: Harness, text: str, **where: str) -> None:
    message = inbound(text, **where)
    await h.ingest.receive(message)
    await h.idle(message.session_key)


async def test_a_change_made_by_another_process_is_used_at_the_next_turn(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour("channel-model", reply="from the channel's model")
    async with start_workers(redis_url, llm, 1, GATEWAY_SYSTEM_PROMPT="env prompt") as h:
        async with elsewhere(redis_url, h) as other:
            await ask(h, "first")
            assert llm.requests[-1].model == "main-model"
            assert system_prompt(llm, -1) == "env prompt"
            await other.set("test:W:C1", "model", "openai/channel-model")
            await other.set("test:W", "system_prompt", "workspace prompt")
            # The job says the settings changed since this worker loaded them: no call
            # goes out early with what it knew.
            await ask(h, "second")
            assert [r.model for r in llm.requests] == ["main-model", "channel-model"]
            assert system_prompt(llm, -1) == "workspace prompt"
            assert texts(h.sender)[-1] == "from the channel's model"
            await ask(h, "elsewhere", channel="C2")
            assert llm.requests[-1].model == "main-model"
            assert system_prompt(llm, -1) == "workspace prompt"
            await other.unset("test:W:C1", "model")
            await ask(h, "third")
            assert llm.requests[-1].model == "main-model"
            assert texts(h.sender)[-1] != "from the channel's model"


async def test_a_channel_budget_refuses_there_and_not_in_another_channel(
    redis_url: str, llm: FakeLLM
) -> None:
    async with start_workers(redis_url, llm, 1) as h:
        async with elsewhere(redis_url, h) as other:
            await other.set("test:W:C1", "budget_user_daily", "1000tokens")
            ledger = UsageLedger(h.sessions.redis)
            charge = Charge("test:W:C1", "U1", "turn")
            await ledger.record(ModelCall("m", [], 1.0, charge=charge), Usage(1000, 0))
            await ask(h, "capped here")
            assert texts(h.sender) == [USED_UP]
            assert llm.requests == []
            await ask(h, "free there", channel="C2")
            assert len(llm.requests) == 1
            assert texts(h.sender)[1] != USED_UP


async def test_side_questions_and_status_use_the_settings_of_their_scope(
    redis_url: str, llm: FakeLLM
) -> None:
    async with start_workers(redis_url, llm, 1) as h:
        async with elsewhere(redis_url, h) as other:
            await other.set("test", "side_model", "openai/platform-side")
            await other.set("test:W:C1", "model", "openai/channel-model")
            await ask(h, "/btw what is this?")
            assert [r.model for r in llm.requests] == ["platform-side"]
            await ask(h, "/status")
            assert texts(h.sender)[-1].startswith(
                "Model: `openai/channel-model` (side questions: `openai/platform-side`)"
            )
