"""The fake Slack's assistant threads: assistant.threads.setSuggestedPrompts and .setTitle.

A part of `FakeSlack` (tests/fakes/slack_api.py) of its own. As Slack documents them
(https://docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts,
https://docs.slack.dev/reference/methods/assistant.threads.setTitle), both need the
`assistant:write` scope (`assistant_enabled`; else `missing_scope`) and an assistant
thread Slack opened (`open_assistant_thread`; else `invalid_thread_ts`, "thread not
found"). setSuggestedPrompts takes `channel_id`, `prompts` (one to four, each with a
`title` and a `message`; else `invalid_arguments`), `thread_ts` and an optional `title`
(the list's heading); without `thread_ts` (an agent app's DM, Slack's agent messaging
experience) the prompts are the DM's own, kept under the thread ts "". setTitle takes
`channel_id`, `thread_ts` and a `title`. A `channel_id` that is not a channel answers
`channel_not_found`. The latest answered call of each thread is kept (`suggested`,
`titles`); every call is in `calls`. `assistant_gate`, while not set, holds both
methods' answers (a slow Slack; it holds the fake's whole loop, so set it before
anything else is asked of the fake).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_PROMPTS = 4
Thread = tuple[str, str]  # (the DM's channel id, the thread's ts)


class AssistantThreadsApi:
    """assistant.threads.setSuggestedPrompts / .setTitle, as FakeSlack answers them."""

    assistant_enabled: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.assistant_threads: set[Thread] = set()
        self.suggested: dict[Thread, dict[str, Any]] = {}  # prompts and heading
        self.titles: dict[Thread, str] = {}
        self.assistant_gate: threading.Event | None = None

    def open_assistant_thread(self, channel: str, thread_ts: str) -> None:
        """Slack opening a new assistant thread (before it sends assistant_thread_started)."""
        self.assistant_threads.add((channel, thread_ts))

    async def until(self, condition: Callable[[], object], within: float = 10.0) -> None:
        """Wait, without blocking the test's loop, until `condition` holds."""
        deadline = time.monotonic() + within
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met in {within}s")
            await asyncio.sleep(0.01)

    def _assistant_thread(self, args: dict[str, Any], dm: bool = False) -> Thread | str:
        """The call's thread, or the error Slack answers for it; `dm`: a call without a
        thread_ts names the DM itself."""
        if self.assistant_gate is not None:
            self.assistant_gate.wait(10)
        if not self.assistant_enabled:
            return "missing_scope"
        channel = args.get("channel_id")
        if not isinstance(channel, str) or channel[:1] not in ("C", "D", "G"):
            return "channel_not_found"
        if dm and args.get("thread_ts") is None:
            return (channel, "")
        thread = (channel, str(args.get("thread_ts")))
        return thread if thread in self.assistant_threads else "invalid_thread_ts"

    def _assistant_threads_setSuggestedPrompts(
        self, args: dict[str, Any], token: str
    ) -> dict[str, Any] | str:
        thread = self._assistant_thread(args, dm=True)
        if isinstance(thread, str):
            return thread
        prompts = args.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            return "invalid_arguments"
        for prompt in prompts:
            if not isinstance(prompt, dict) or not all(
                isinstance(prompt.get(part), str) and prompt[part] for part in ("title", "message")
            ):
                return "invalid_arguments"
        self.suggested[thread] = {"title": args.get("title"), "prompts": prompts}
        return {}

    def _assistant_threads_setTitle(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        thread = self._assistant_thread(args)
        if isinstance(thread, str):
            return thread
        title = args.get("title")
        if not isinstance(title, str) or not title:
            return "invalid_arguments"
        self.titles[thread] = title
        return {}
