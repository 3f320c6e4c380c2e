"""End to end: `gateway discord` and `gateway worker` subprocesses, fake Discord, fake model.

The fake Discord runs in the test's event loop; both processes reach it (and
the fake model, and Redis) over loopback only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import redis

from adapters.buttons import FEEDBACK_DOWN_LABEL, FEEDBACK_UP_LABEL
from adapters.discord.platform import INTENT_REFUSED
from gateway.media.audio import NOT_ENABLED
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_files import VOICE_MESSAGE_FLAG
from tests.fakes.llm_server import FakeLLM
from tests.support.media_files import noisy_png, png
from tests.support.processes import shards_env

# Each test starts fresh processes (and a worker's litellm import): more room than the
# suite's default per-test timeout.
pytestmark = pytest.mark.timeout(150)

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"
# A server the bot is not in, and a group DM: reached only through a user's install.
FOREIGN_GUILD, FOREIGN_CHANNEL = "1400000000000000001", "1500000000000000001"
GROUP_DM = "1600000000000000001"
ALICE = "42"
ROOT = Path(__file__).resolve().parents[3]
FENCE = "```"


class Process:
    """One `gateway` subprocess, its output in a file (read when a test fails)."""

    def __init__(self, command: str, env: dict[str, str], workdir: Path) -> None:
        self.log_path = workdir / f"{command}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", command],
            env=env,
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()


class Stack:
    """The fake Discord plus a `gateway discord` and a `gateway worker` talking to it."""

    def __init__(
        self, fake_discord: FakeDiscord, llm: FakeLLM, redis_url: str, workdir: Path
    ) -> None:
        self.fake_discord, self.llm, self.workdir = fake_discord, llm, workdir
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            **shards_env(),
            "PYTHONPATH": str(ROOT),  # this checkout's code, wherever the project is installed
            "REDIS_URL": redis_url,
            "GATEWAY_MODEL": "openai/fake-model",
            "GATEWAY_API_BASE": llm.api_base,
            "GATEWAY_API_KEY": "sk-test",
            "DISCORD_BOT_TOKEN": fake_discord.token,
            "DISCORD_API_URL": fake_discord.api_url,
            "DISCORD_GATEWAY_URL": fake_discord.gateway_url,
            "GATEWAY_ALLOWED_USERS": f"discord:{ALICE}",
            "DISCORD_EDIT_INTERVAL": "0.2",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        self.processes: list[Process] = []

    def start(self, *commands: str, **env: str) -> None:
        for command in commands:
            self.processes.append(Process(command, {**self.env, **env}, self.workdir))

    async def connected(self) -> None:
        """The gateway identified and registered /btw; the worker, if any, takes jobs.

        The worker imports litellm before it reads jobs, which takes seconds, and
        many more on a machine busy with the rest of the suite.
        """
        workers = [p for p in self.processes if p.log_path.stem == "worker"]
        await self.wait(
            lambda: self.fake_discord.identifies and self.fake_discord.commands, within=60
        )
        await self.wait(lambda: all("job streams of" in p.output() for p in workers), within=90)

    async def wait(self, condition: Any, within: float = 45.0) -> Any:
        def met() -> Any:
            for process in self.processes:
                if process.popen.poll() is not None:
                    raise AssertionError(f"`{process.log_path.stem}` exited:\n{process.output()}")
            return condition()

        return await self.fake_discord.wait_for(met, within=within)

    async def say(
        self,
        channel: str,
        text: str,
        *,
        user: str = ALICE,
        guild: bool = True,
        mention: bool = False,
        bot: bool = False,
        **kw: Any,
    ) -> dict[str, Any]:
        content = f"<@{self.fake_discord.bot['id']}> {text}" if mention else text
        message = self.fake_discord.message(
            channel,
            content,
            self.fake_discord.user(user, bot=bot),
            guild_id=GUILD if guild else None,
            mentions=(self.fake_discord.bot,) if mention else (),
            **kw,
        )
        await self.fake_discord.dispatch("MESSAGE_CREATE", message)
        return message

    async def answer(self, channel: str, expect: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait until the bot posted `count` messages in `channel`, the last holding `expect`."""

        def done() -> list[dict[str, Any]] | None:
            posted = self.fake_discord.channel_messages(channel)
            if len(posted) < count or expect not in posted[-1]["content"]:
                return None
            return posted

        return list(await self.wait(done))

    async def participating(self, session_key: str) -> None:
        """The core recorded the bot's reply in this session (follow-ups now count)."""
        client = redis.Redis.from_url(self.env["REDIS_URL"])
        try:
            await self.wait(lambda: client.hexists(Keys.meta(session_key), "participated"))
        finally:
            client.close()

    def idle(self) -> bool:
        """No model request is still streaming."""
        return all(r.finished_at is not None for r in self.llm.requests)

    def stop(self) -> str:
        for process in self.processes:
            process.stop()
        return "\n".join(p.output() for p in self.processes)


@pytest.fixture
def stack(
    fake_discord: FakeDiscord, llm: FakeLLM, redis_url: str, tmp_path: Path
) -> Iterator[Stack]:
    running = Stack(fake_discord, llm, redis_url, tmp_path)
    yield running
    output = running.stop()
    if os.environ.get("GATEWAY_TEST_LOGS"):
        print(output)


def main_requests(llm: FakeLLM) -> list[str]:
    return [json.dumps(r.get("messages")) for r in llm.requests]


async def test_who_is_answered_where(stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM) -> None:
    thread = fake_discord.add_thread(GUILD, CHANNEL)
    quiet_thread = fake_discord.add_thread(GUILD, CHANNEL)
    stack.start("discord", "worker")
    await stack.connected()

    await stack.say("555", "hello from a dm", guild=False)
    await stack.answer("555", "hello from a dm")

    unaddressed = await stack.say(CHANNEL, "talking among ourselves")
    await stack.say(CHANNEL, "hi", user="99", mention=True, bot=True)
    fake_discord.messages.clear()
    mention = await stack.say(CHANNEL, "what is the plan?", mention=True)
    (answer,) = await stack.answer(CHANNEL, "what is the plan?")
    assert answer["message_reference"]["message_id"] == mention["id"]
    assert answer["allowed_mentions"]["parse"] == []
    assert not any("talking among ourselves" in r for r in main_requests(llm))
    assert unaddressed["id"] not in json.dumps(list(fake_discord.messages.values()))

    await stack.say(thread, "start in the thread", mention=True)
    await stack.answer(thread, "start in the thread")
    await stack.participating(f"discord:{GUILD}:{thread}")
    await stack.say(thread, "and a follow-up without mention")
    await stack.answer(thread, "and a follow-up", 2)
    assert not fake_discord.channel_messages(thread)[0].get("message_reference")

    await stack.say(quiet_thread, "nobody asked the bot here")
    for author in (fake_discord.user("99", "otherbot", bot=True), fake_discord.bot):
        await fake_discord.dispatch(
            "MESSAGE_CREATE",
            fake_discord.message(
                "556", f"<@{fake_discord.bot['id']}> ping", author, mentions=(fake_discord.bot,)
            ),
        )
    await stack.say("557", "let me in", user="31337", guild=False)
    (refusal,) = await stack.answer("557", "discord:31337")
    assert len(refusal["content"]) < 300
    llm.first_token_delay = 1.5  # past the thinking grace: "typing" shows meanwhile
    await stack.say("555", "last dm", guild=False)
    await stack.answer("555", "last dm")

    assert not fake_discord.channel_messages(quiet_thread) and not fake_discord.channel_messages(
        "556"
    )
    asked = main_requests(llm)
    assert not any("nobody asked" in r or "ping" in r or "let me in" in r for r in asked)
    # Every answer also came back over the gateway as the bot's own message: none was answered.
    assert len(asked) == 5
    assert fake_discord.calls_to("POST", r"/channels/555/typing")


async def test_auto_thread_answers_inside_the_new_thread(
    stack: Stack, fake_discord: FakeDiscord
) -> None:
    stack.start("discord", "worker", DISCORD_AUTO_THREAD="1")
    await stack.connected()
    mention = await stack.say(CHANNEL, "plan the offsite", mention=True)
    await stack.answer(mention["id"], "plan the offsite")
    assert fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages/{mention['id']}/threads")
    assert not fake_discord.channel_messages(CHANNEL)
    await stack.participating(f"discord:{GUILD}:{mention['id']}")
    await stack.say(mention["id"], "and the date?")
    await stack.answer(mention["id"], "and the date?", 2)


async def test_a_long_answer_arrives_in_three_messages_with_balanced_code_blocks(
    stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM
) -> None:
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(70))
    prose = " ".join(["The plan has several parts that need careful attention."] * 17)
    llm.reply = f"{prose}\n\n{FENCE}python\n{code}\n{FENCE}\n\n{prose}"
    assert 4400 <= len(llm.reply) <= 4600
    llm.duration = 2.0  # stream over many edit intervals
    # One short 429 discord.py waits out itself, then two it will not retry (no Via):
    # the core sees RateLimited, and the final text must still arrive.
    fake_discord.rate_limit("PATCH", r"/channels/555/messages/\d+", retry_after=0.3)
    fake_discord.rate_limit(
        "PATCH", r"/channels/555/messages/\d+", retry_after=0.5, times=2, via=False
    )
    stack.start("discord", "worker")
    await stack.connected()
    await stack.say("555", "write it all", guild=False)
    posted = await stack.answer("555", prose[-40:], 3)
    await stack.wait(stack.idle)
    assert len(fake_discord.channel_messages("555")) == 3
    for message in posted:
        assert len(message["content"]) <= 2000
        assert message["content"].count(FENCE) % 2 == 0
    joined = "".join(m["content"] for m in posted)
    assert all(f"value_{i} = compute({i})" in joined for i in range(70))
    assert fake_discord.limits_left() == 0  # all three 429s were met on the way


async def test_a_reply_whose_post_answer_was_lost_is_shown_once(
    stack: Stack, fake_discord: FakeDiscord
) -> None:
    """Discord took the reply's first post and the answer was lost (502): the retry
    carries the turn's key as an enforced nonce and gets the same message back."""
    fake_discord.lose_answers("POST", r"/channels/555/messages")
    stack.start("discord", "worker")
    await stack.connected()
    await stack.say("555", "are you there", guild=False)
    await stack.answer("555", "are you there")
    # discord.py sends the post again a second after the 502: the fake answers it with
    # the message it made the first time.
    await stack.wait(lambda: len(fake_discord.calls_to("POST", r"/channels/555/messages")) == 2)
    await stack.wait(stack.idle)
    assert len(fake_discord.channel_messages("555")) == 1


async def test_btw_command_and_typed_btw_answer_aside_and_stay_out_of_history(
    stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM
) -> None:
    stack.start("discord", "worker")
    await stack.connected()
    await stack.say(CHANNEL, "first main question", mention=True)
    await stack.answer(CHANNEL, "first main question")

    interaction = fake_discord.interaction(
        CHANNEL, "what did I ask first?", fake_discord.user(ALICE), guild_id=GUILD
    )
    await fake_discord.dispatch("INTERACTION_CREATE", interaction)
    await stack.wait(lambda: fake_discord.callbacks.get(interaction["token"]))
    assert fake_discord.callbacks[interaction["token"]]["type"] == 5
    followup = await stack.wait(
        lambda: [
            m
            for m in fake_discord.messages.values()
            if m.get("interaction_token") == interaction["token"]
        ]
    )
    await stack.wait(stack.idle)
    assert followup[0]["channel_id"] == CHANNEL and followup[0]["content"].strip()

    typed = await stack.say(CHANNEL, "!btw is this a side question?", mention=True)
    side = await stack.wait(
        lambda: [
            m
            for m in fake_discord.messages.values()
            if (m.get("message_reference") or {}).get("message_id") == typed["id"]
        ]
    )
    await stack.wait(stack.idle)
    assert side[0]["content"].strip()

    llm.clear()
    await stack.say(CHANNEL, "second main question", mention=True)
    await stack.wait(lambda: llm.requests and stack.idle())
    request = main_requests(llm)[-1]
    assert "second main question" in request and "first main question" in request
    assert "what did I ask first" not in request and "side question" not in request


async def test_a_refused_message_content_intent_exits_with_the_clear_line(
    stack: Stack, fake_discord: FakeDiscord
) -> None:
    fake_discord.message_content_enabled = False
    stack.start("discord")
    process = stack.processes[0]
    await fake_discord.wait_for(lambda: process.popen.poll() is not None, within=30)
    assert process.popen.returncode != 0
    lines = [line for line in process.output().splitlines() if line.strip()]
    assert lines[-1] == f"gateway: {INTENT_REFUSED}"
    assert fake_discord.token not in process.output()


async def test_a_png_attachment_reaches_a_vision_model_and_one_declared_too_large_is_not_fetched(
    stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM
) -> None:
    stack.start(
        "discord", "worker", GATEWAY_MODEL="openai/gpt-4o", GATEWAY_MEDIA_FILE_BYTES="200000"
    )
    await stack.connected()
    picture = fake_discord.cdn.add("plan.png", png(800, 600), "image/png")
    big = fake_discord.cdn.add("big.png", noisy_png(400, 400), "image/png")
    await stack.say("555", "what does this show?", guild=False, attachments=(picture, big))
    notice, _ = await stack.answer("555", "what does this show?", 2)
    assert notice["content"] == "⚠️ big.png: over the 0.2 MB limit"
    [request] = llm.requests_for("gpt-4o")
    [data_url] = llm.image_parts(request)
    assert data_url.startswith("data:image/jpeg;base64,")
    assert fake_discord.cdn.requests == [f"/attachments/{picture['id']}/plan.png"]


async def test_voice_messages_without_a_transcription_model_are_named_and_the_user_told_once(
    stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM
) -> None:
    stack.start("discord", "worker")
    await stack.connected()
    for count in (2, 3):  # the first answer comes after the notice, the second alone
        recording = fake_discord.cdn.add(
            "voice-message.ogg", b"OggS" * 500, "audio/ogg", voice=True
        )
        await stack.say("555", "", guild=False, attachments=(recording,), flags=VOICE_MESSAGE_FLAG)
        await stack.answer("555", "fake reply to", count)
    notices = [m for m in fake_discord.channel_messages("555") if NOT_ENABLED in m["content"]]
    assert len(notices) == 1 and "voice-message.ogg" in notices[0]["content"]
    assert "[voice message: voice-message.ogg, not transcribed]" in main_requests(llm)[-1]
    assert fake_discord.cdn.requests == []  # not fetched: nothing would read it


def followups(fake_discord: FakeDiscord, token: str) -> list[dict[str, Any]]:
    """The messages posted as an interaction's follow-ups, in order."""
    return [m for m in fake_discord.messages.values() if m.get("interaction_token") == token]


async def test_commands_used_through_a_user_install_are_answered_through_the_interaction(
    stack: Stack, fake_discord: FakeDiscord
) -> None:
    """In a server the bot is not in, and in a group DM, the bot reads nothing and may
    post nothing: the command's answer reaches the user as the interaction's follow-up."""
    stack.start("discord", "worker")
    await stack.connected()
    alice = fake_discord.user(ALICE)
    status = fake_discord.invoke(
        "status", FOREIGN_CHANNEL, alice, guild_id=FOREIGN_GUILD, context=0, user_install=True
    )
    side = fake_discord.invoke(
        "btw", GROUP_DM, alice, context=2, user_install=True, question="what is a haiku?"
    )
    for interaction in (status, side):
        await fake_discord.dispatch("INTERACTION_CREATE", interaction)
    (status_answer,) = await stack.wait(lambda: followups(fake_discord, status["token"]))
    (side_answer,) = await stack.wait(lambda: followups(fake_discord, side["token"]))
    await stack.wait(stack.idle)
    assert status_answer["channel_id"] == FOREIGN_CHANNEL and "Model:" in status_answer["content"]
    assert side_answer["channel_id"] == GROUP_DM and "what is a haiku?" in side_answer["content"]
    assert all(fake_discord.callbacks[i["token"]]["type"] == 5 for i in (status, side))
    with_bot_token = [
        call.path
        for call in fake_discord.calls
        if call.authorized and (FOREIGN_CHANNEL in call.path or GROUP_DM in call.path)
    ]
    assert with_bot_token == []


async def test_slash_stop_stops_the_running_turn_and_slash_reset_starts_afresh(
    stack: Stack, fake_discord: FakeDiscord, llm: FakeLLM
) -> None:
    llm.duration = 20.0  # still streaming when /stop comes
    stack.start("discord", "worker")
    await stack.connected()
    alice = fake_discord.user(ALICE)
    await stack.say(CHANNEL, "write a very long story", mention=True)
    await stack.wait(lambda: fake_discord.channel_messages(CHANNEL))

    stop = fake_discord.invoke("stop", CHANNEL, alice, guild_id=GUILD)
    await fake_discord.dispatch("INTERACTION_CREATE", stop)
    (stopping,) = await stack.wait(lambda: followups(fake_discord, stop["token"]))
    assert stopping["content"] == "Stopping the reply."
    reply = await stack.wait(
        lambda: [m for m in fake_discord.channel_messages(CHANNEL) if "(stopped)" in m["content"]]
    )
    assert reply[0]["components"] == []  # no feedback buttons unless GATEWAY_FEEDBACK asks

    reset = fake_discord.invoke("reset", CHANNEL, alice, guild_id=GUILD)
    await fake_discord.dispatch("INTERACTION_CREATE", reset)
    (fresh,) = await stack.wait(lambda: followups(fake_discord, reset["token"]))
    assert fresh["content"] == "Started a fresh conversation."
    llm.duration = None
    llm.clear()
    await stack.say(CHANNEL, "a new question", mention=True)
    await stack.wait(lambda: llm.requests and stack.idle())
    request = main_requests(llm)[-1]
    assert "a new question" in request and "very long story" not in request


async def test_with_feedback_on_the_final_reply_carries_the_two_buttons(
    stack: Stack, fake_discord: FakeDiscord
) -> None:
    stack.start("discord", "worker", GATEWAY_FEEDBACK="discord")
    await stack.connected()
    await stack.say("555", "rate this answer", guild=False)
    (answer,) = await stack.answer("555", "rate this answer")
    await stack.wait(lambda: answer["components"])
    (row,) = answer["components"]
    assert [(b["label"], b["custom_id"]) for b in row["components"]] == [
        (FEEDBACK_UP_LABEL, "f:up"),
        (FEEDBACK_DOWN_LABEL, "f:down"),
    ]
