"""Preparer: a turn's context from its claimed snapshot, its request for the session's
model and prompt, and the tokens of history it may carry."""

from __future__ import annotations

from gateway.settings.scoped import SessionSettings
from gateway.state.session import HistoryView
from gateway.turn.runner import TurnRunner
from tests.support.helpers import inbound

OTHER_MODEL = "openai/gpt-4o-mini"  # one litellm knows the window of


async def snapshot(turns: TurnRunner, text: str) -> tuple[str, HistoryView]:
    message = inbound(text)
    await turns.sessions.append_user(message)
    claim = await turns.sessions.claim(message.session_key, "token", 5.0)
    assert claim.view is not None
    return message.session_key, claim.view


async def test_the_context_names_who_is_answered_and_where(turns: TurnRunner) -> None:
    message = inbound("in the thread", thread="T9", dm=False, name="Grace", user="U7")
    await turns.sessions.append_user(message)
    claim = await turns.sessions.claim(message.session_key, "token", 5.0)
    assert claim.view is not None
    user = claim.view.entries[-1]
    context = turns.preparer.context(message.session_key, claim.view, user, message.reply, ["n"])
    assert context.target is not None
    assert context.target.speaker_name == "Grace" and context.target.speaker_id == "U7"
    assert context.target.place == "test channel C1, thread T9"
    assert context.group and context.injections == ["n"]
    assert [e["text"] for e in context.entries] == ["in the thread"]


async def test_a_request_goes_to_the_environments_model_with_its_prompt(
    turns: TurnRunner,
) -> None:
    key, view = await snapshot(turns, "plain question")
    context = turns.preparer.context(key, view, view.entries[-1], inbound("").reply, [])
    prepared = turns.preparer.compile(context, view)
    assert prepared.model == "openai/main-model"
    assert prepared.compiler.system_prompt == turns.preparer.settings.system_prompt
    assert prepared.request.messages[0]["role"] == "system"
    assert "plain question" in str(prepared.request.messages[1:])


async def test_a_sessions_own_model_and_prompt_are_the_requests(turns: TurnRunner) -> None:
    key, view = await snapshot(turns, "scoped question")
    context = turns.preparer.context(key, view, view.entries[-1], inbound("").reply, [])
    scoped = SessionSettings(
        turns.preparer.settings,
        {"model": OTHER_MODEL, "system_prompt": "You answer in haiku."},
        {},
    )
    prepared = turns.preparer.compile(context, view, scoped)
    assert prepared.model == OTHER_MODEL
    assert "You answer in haiku." in str(prepared.request.messages[0])


def test_the_allowance_is_the_sessions_budget_else_a_share_of_its_models_window(
    turns: TurnRunner,
) -> None:
    preparer, env = turns.preparer, turns.preparer.settings
    assert preparer.allowance() == preparer.compressor.allowance
    budgeted = SessionSettings(env, {"token_budget": "1234"}, {})
    assert preparer.allowance(budgeted) == 1234
    other = SessionSettings(env, {"model": OTHER_MODEL}, {})
    share = preparer.allowance(other)
    assert share != preparer.compressor.allowance and share > 10_000
    other_budgeted = SessionSettings(env, {"model": OTHER_MODEL, "token_budget": "999"}, {})
    assert preparer.allowance(other_budgeted) == 999
