"""Usage and cost of every model call, through the real worker, litellm and the fake model."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis

from gateway import metrics
from gateway.errors import ConfigError
from gateway.messages import Attachment
from gateway.models import Charge, ModelCall, Usage
from gateway.settings.env import load_settings
from gateway.spend.usage import RETENTION, Totals, UsageLedger, day_of
from gateway.state.keys import Keys
from tests.fakes.files import FakeFiles
from tests.fakes.llm_server import FakeLLM, ReceivedRequest
from tests.fakes.llm_shapes import prompt_tokens
from tests.gateway.context.test_compression import SUMMARY, talk_until_segment
from tests.support.conversation import COMPRESSOR, conversation
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound

PRICED = "openai/gpt-4o-mini"
# openai/gpt-4o-mini in litellm's bundled price map: USD per input and output token
MINI_IN, MINI_OUT = 0.15e-6, 0.6e-6


def tokens_of(request: ReceivedRequest, reply: str) -> tuple[int, int]:
    """The usage the fake model reported for `request` answered with `reply`."""
    return prompt_tokens(request["messages"]), len(reply.split())


async def one_turn(harness: Harness, text: str, reply: str) -> tuple[str, int, int]:
    """Say `text`, answered with `reply`: the session key, and the usage the model reported."""
    harness.llm.reply = reply
    message = inbound(text)
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    return message.session_key, *tokens_of(harness.llm.requests[-1], reply)


async def totals(harness: Harness, scope: str, ident: str) -> Totals:
    today = day_of(dt.datetime.now(dt.UTC))
    return await UsageLedger(harness.sessions.redis).totals(scope, ident, today)


@pytest.fixture
async def priced(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1, GATEWAY_MODEL=PRICED) as h:
        yield h


async def test_a_turn_on_a_priced_model_is_counted_with_litellms_cost_everywhere(
    priced: Harness,
) -> None:
    key, prompt, completion = await one_turn(priced, "hello there", "four words of reply")
    cost = prompt * MINI_IN + completion * MINI_OUT
    for scope, ident in (
        ("user", "test:U1"),
        ("session", key),
        ("workspace", "test:W"),
        ("model", PRICED),
    ):
        found = await totals(priced, scope, ident)
        assert (found.prompt, found.completion, found.calls) == (prompt, completion, 1), scope
        assert found.cost == pytest.approx(cost) and found.unpriced == 0, scope
    stored = await priced.sessions.redis.hgetall(Keys.METRICS)
    assert int(stored[f"usage_tokens|prompt|test|W|{PRICED}"]) == prompt
    assert float(stored[f"usage_cost|test|W|{PRICED}"]) == pytest.approx(cost)


async def test_an_unpriced_model_counts_tokens_and_its_cost_stays_unknown(
    harness: Harness,
) -> None:
    key, prompt, completion = await one_turn(harness, "hello", "a reply")
    found = await totals(harness, "model", "openai/main-model")
    assert (found.prompt, found.completion, found.calls, found.unpriced) == (
        prompt,
        completion,
        1,
        1,
    )
    assert found.cost_text == "cost unknown"
    assert found.as_dict()["cost_usd"] is None

    await harness.ingest.receive(inbound("/usage"))
    await harness.idle(key)
    answer = texts(harness.sender)[-1]
    assert answer.startswith(f"Your usage today: {prompt + completion:,} tokens")
    assert "cost unknown" in answer
    assert len(harness.llm.requests) == 1  # /usage itself calls no model


async def test_usage_answers_the_caller_and_the_conversation_with_costs(priced: Harness) -> None:
    priced.llm.reply = "ok"
    first = inbound("one two three")
    await priced.ingest.receive(first)
    await priced.idle(first.session_key)
    other = inbound("elsewhere", channel="C2")  # the same user, another conversation
    await priced.ingest.receive(other)
    await priced.idle(other.session_key)
    here, there = (tokens_of(r, "ok") for r in priced.llm.requests)
    mine = sum(here) + sum(there)
    mine_cost = (here[0] + there[0]) * MINI_IN + (here[1] + there[1]) * MINI_OUT

    await priced.ingest.receive(inbound("/usage"))
    await priced.idle(first.session_key)
    answer = texts(priced.sender)[-1].splitlines()
    assert answer[0] == (
        f"Your usage today: {mine:,} tokens ({here[0] + there[0]:,} in, "
        f"{here[1] + there[1]:,} out), ${mine_cost:.4f}"
    )
    assert answer[1].startswith(f"Your usage this month: {mine:,} tokens")
    assert answer[2].startswith(f"This conversation this month: {sum(here):,} tokens")


async def test_a_side_question_is_counted_against_its_asker_on_the_side_model(
    redis_url: str, llm: FakeLLM
) -> None:
    async with start_workers(redis_url, llm, 1, GATEWAY_SIDE_MODEL=PRICED) as h:
        llm.reply = "side answer"
        message = inbound("/btw what was said?", user="U1")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        (request,) = llm.requests
        prompt, completion = tokens_of(request, "side answer")
        found = await totals(h, "user", "test:U1")
        assert (found.prompt, found.completion, found.calls, found.unpriced) == (
            prompt,
            completion,
            1,
            0,
        )
        assert found.cost == pytest.approx(prompt * MINI_IN + completion * MINI_OUT)
        assert (await totals(h, "model", PRICED)).calls == 1


@pytest.mark.parametrize(
    ("processes", "side_prices", "side_per_token"),
    [
        # the operator's price for a model litellm knows wins over litellm's
        (0, {PRICED: {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}, (1e-6, 2e-6)),
        # costs and custom prices cross from a model process; litellm's map where none is set
        (1, {}, (MINI_IN, MINI_OUT)),
    ],
)
async def test_custom_prices_come_before_litellms_map(
    redis_url: str,
    llm: FakeLLM,
    processes: int,
    side_prices: dict[str, dict[str, float]],
    side_per_token: tuple[float, float],
) -> None:
    prices = {"openai/main-model": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}} | side_prices
    values = {
        "GATEWAY_MODEL_PRICES": json.dumps(prices),
        "GATEWAY_SIDE_MODEL": PRICED,
        "GATEWAY_MODEL_PROCESSES": processes,
    }
    async with start_workers(redis_url, llm, 1, **values) as h:
        key, *main = await one_turn(h, "hello", "three word reply")
        await h.ingest.receive(inbound("/btw and?"))
        await h.idle(key)
        side = tokens_of(llm.requests[-1], "three word reply")
        assert (await totals(h, "model", "openai/main-model")).cost == pytest.approx(
            main[0] * 0.5e-6 + main[1] * 1.5e-6
        )
        assert (await totals(h, "model", PRICED)).cost == pytest.approx(
            side[0] * side_per_token[0] + side[1] * side_per_token[1]
        )


async def test_a_summary_is_counted_against_the_conversation_not_a_user(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=400) as talk:
        await talk_until_segment(talk)
        asked = talk.compression_requests()
        prompt = sum(prompt_tokens(r["messages"]) for r in asked)
        redis = talk.redis
        today = day_of(dt.datetime.now(dt.UTC))
        ledger = UsageLedger(redis)
        summaries = await ledger.totals("model", COMPRESSOR, today)
        assert (summaries.calls, summaries.prompt) == (len(asked), prompt)
        assert summaries.completion == len(asked) * len(SUMMARY.split())
        session = await ledger.totals("session", talk.key, today)
        user = await ledger.totals("user", "test:U1", today)
        assert session.calls == user.calls + len(asked)  # the turns, and the summaries


async def test_a_call_is_written_at_once_by_day_and_kept_400_days(redis_client: Redis) -> None:
    ledger = UsageLedger(redis_client)
    charge = Charge("slack:T1:C1:17.5", "U7", "turn")
    call = ModelCall(PRICED, [], 10.0, charge=charge)
    monday = dt.datetime(2026, 3, 2, 23, 59, tzinfo=dt.UTC)
    await ledger.record(call, Usage(100, 20, 0.5), monday)
    await ledger.record(call, Usage(10, 2, None), monday + dt.timedelta(minutes=2))
    await ledger.record(ModelCall(PRICED, [], 10.0), Usage(5, 5, 1.0), monday)  # no charge
    fields = await redis_client.hgetall(Keys.usage("user", "slack:U7"))
    assert fields == {
        "2026-03-02|prompt": "100",
        "2026-03-02|completion": "20",
        "2026-03-02|calls": "1",
        "2026-03-02|cost": "0.5",
        "2026-03-03|prompt": "10",
        "2026-03-03|completion": "2",
        "2026-03-03|calls": "1",
        "2026-03-03|unpriced": "1",
    }
    for scope, ident in (("session", charge.session_key), ("workspace", "slack:T1")):
        assert 0 < await redis_client.ttl(Keys.usage(scope, ident)) <= RETENTION
    tuesday = await ledger.totals("workspace", "slack:T1", "2026-03-03")
    assert (tuesday.calls, tuesday.cost_text) == (1, "cost unknown")
    both = await ledger.totals("model", PRICED, "2026-03-01")
    assert both.cost_text == "$0.5000 (+ cost unknown for 1 calls)"
    assert list(await ledger.by("user", "2026-03-03")) == ["slack:U7"]
    assert await ledger.by("user", "2026-03-04") == {}
    days = await ledger.by_day("model", "2026-03-02")
    assert [(day, t.calls, t.prompt) for day, t in days.items()] == [
        ("2026-03-02", 1, 100),
        ("2026-03-03", 1, 10),
    ]
    assert list(await ledger.by_day("model", "2026-03-03")) == ["2026-03-03"]


async def test_metrics_show_tokens_and_cost_by_platform_workspace_and_model(
    redis_client: Redis,
) -> None:
    ledger = UsageLedger(redis_client)
    priced = ModelCall(PRICED, [], 10.0, charge=Charge("slack:T1:C1", "U1", "turn"))
    local = ModelCall("ollama/llama3", [], 10.0, charge=Charge("slack:T1:C1", "U2", "side"))
    await ledger.record(priced, Usage(100, 20, 0.25))
    await ledger.record(priced, Usage(50, 10, 0.125))
    await ledger.record(local, Usage(7, 3, None))
    values, depth = await metrics.snapshot(redis_client, [])
    registry = CollectorRegistry()
    registry.register(metrics.SnapshotCollector(values, depth))
    text = generate_latest(registry).decode()
    labels = f'model="{PRICED}",platform="slack",workspace="T1"'
    assert f"gateway_usage_cost_usd_total{{{labels}}} 0.375" in text
    assert f'gateway_usage_tokens_total{{kind="prompt",{labels}}} 150.0' in text
    assert f'gateway_usage_tokens_total{{kind="completion",{labels}}} 30.0' in text
    local_labels = 'model="ollama/llama3",platform="slack",workspace="T1"'
    assert f"gateway_usage_unpriced_calls_total{{{local_labels}}} 1.0" in text
    assert "U1" not in text and "U2" not in text  # never a label per user


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{not json", "GATEWAY_MODEL_PRICES: Value error, must be JSON"),
        ('{"m": {"input_per_mtok": -1, "output_per_mtok": 1}}', "GATEWAY_MODEL_PRICES"),
        ('{"m": {"input_per_mtok": 1}}', "GATEWAY_MODEL_PRICES"),
    ],
)
def test_bad_custom_prices_are_one_line_naming_the_setting(value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        load_settings(_env_file=None, GATEWAY_MODEL_PRICES=value)


@pytest.mark.parametrize(
    ("model", "reported", "cost", "processes"),
    [
        # gpt-4o-transcribe answers with token usage; litellm prices its tokens
        ("openai/gpt-4o-transcribe", (100, 10), 100 * 2.5e-6 + 10 * 1e-5, 0),
        ("openai/gpt-4o-transcribe", (100, 10), 100 * 2.5e-6 + 10 * 1e-5, 1),
        # whisper-1 is priced by the second, which a plain JSON answer does not carry
        ("openai/whisper-1", None, None, 0),
    ],
)
async def test_a_voice_note_is_counted_against_its_sender(
    redis_url: str,
    llm: FakeLLM,
    files: FakeFiles,
    model: str,
    reported: tuple[int, int] | None,
    cost: float | None,
    processes: int,
) -> None:
    llm.transcription_tokens = reported
    values = {"GATEWAY_TRANSCRIPTION_MODEL": model, "GATEWAY_MODEL_PROCESSES": processes}
    async with start_workers(redis_url, llm, 1, **values) as h:
        url = files.add("note.ogg", b"OggS" + b"\1" * 2000, content_type="audio/ogg")
        note = Attachment(kind="voice", url=url, name="note.ogg", mime_type="audio/ogg")
        message = inbound("", attachments=(note,), user="U1")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        assert len(llm.transcriptions) == 1
        heard = await totals(h, "model", model)
        assert (heard.calls, heard.prompt, heard.completion) == (1, *(reported or (0, 0)))
        if cost is None:
            assert heard.cost_text == "cost unknown"
        else:
            assert heard.unpriced == 0 and heard.cost == pytest.approx(cost)
        mine = await totals(h, "user", "test:U1")
        assert mine.calls == 2  # the transcription and the turn


async def test_a_usage_write_redis_refuses_loses_the_count_not_the_answer(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The user's usage key is of the wrong type (a damaged key): the write fails in
    Redis, the answer is delivered and recorded anyway, and the log says what was lost."""
    await harness.sessions.redis.set(Keys.usage("user", "test:U1"), "not a hash")
    key, _, _ = await one_turn(harness, "hello", "the answer")
    assert texts(harness.sender) == ["the answer"]
    assert [e["role"] for e in await harness.history(key)] == ["user", "assistant"]
    assert "usage of a openai/main-model call not recorded" in caplog.text
    found = await totals(harness, "session", key)
    assert found.calls == 1  # Redis runs the rest of a transaction: the other scopes count
