"""Models: its backend chosen once, when it is built, and `echo` always answered offline."""

from __future__ import annotations

from gateway.models import ModelCall, Models, Usage
from gateway.models.litellm_backend import LitellmBackend
from gateway.models.pool import ModelPool
from gateway.models.scripted import ECHO_LABEL, ScriptedBackend
from tests.support.helpers import settings

UNUSED_REDIS = "redis://127.0.0.1:1"  # Models never touches Redis


def echo_call(text: str) -> ModelCall:
    return ModelCall("echo", [{"role": "user", "content": text}], 5.0)


def test_settings_pick_litellm_here_or_a_pool_of_model_processes() -> None:
    config = settings(UNUSED_REDIS, GATEWAY_API_KEY="sk-test-key", GATEWAY_MODEL_RETRIES=3)
    here = Models.for_settings(config)
    assert isinstance(here.backend, LitellmBackend)
    assert (here.backend.api_key, here.backend.retries) == ("sk-test-key", 3)
    pooled = Models.for_settings(config, processes=2)
    assert isinstance(pooled.backend, ModelPool)
    assert [p.running for p in pooled.backend.processes] == [False, False]  # started on demand
    assert "sk-test-key" not in repr(pooled.backend.processes[0].settings)


async def test_echo_is_answered_offline_whatever_the_backend() -> None:
    backend = ScriptedBackend("never this")
    models = Models(backend)
    usage = Usage()
    pieces = [piece async for piece in models.stream(echo_call("hi there"), usage)]
    assert "".join(pieces) == f"{ECHO_LABEL} You said: hi there"
    assert usage.completion_tokens == len(pieces)
    text, _ = await models.complete(echo_call("once more"))
    assert text == f"{ECHO_LABEL} You said: once more"
    assert await models.window("echo") is None
    assert not backend.calls


async def test_every_other_model_goes_to_the_backend() -> None:
    backend = ScriptedBackend("scripted answer", window=4096)
    models = Models(backend)
    call = ModelCall("openai/anything", [{"role": "user", "content": "hi"}], 5.0)
    text, usage = await models.complete(call)
    assert text == "scripted answer" and usage.completion_tokens == 2
    assert await models.window("openai/anything") == 4096
    assert await models.count_many("openai/anything", [call.messages]) == [
        models.count_tokens("openai/anything", call.messages)
    ]
    assert list(backend.calls) == [call]
