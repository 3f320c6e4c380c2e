"""The drill of a worker killed while a tool call is in flight.

Each trial is one Telegram message whose model answer asks for a tool: a slow
read-only one (`desk__slow`) or a slow destructive one (`desk__slow_delete`,
under `"confirm": "never"`, so it runs without being asked about). Once the
MCP test server has written that the call started (its `--effects` file), the
worker holding the turn is SIGKILLed; the other worker takes the turn over once
the lease has expired and the job has been idle long enough to reclaim.

What must hold, per trial: a read-only call runs again exactly once (two starts,
one completion, the model gets its result); a destructive call is never run
again (one start, at most one `deleted NAME`), and when it did not complete the
model is told that it was interrupted; the message gets exactly one reply
message; no session is left stuck. Trials run one at a time, so the lines the
server writes during a trial are that trial's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import ROOT
from drill_faults import group_chat, job_holders, settle
from drill_faults import row as _row
from drill_stack import TAG, Proc, Stack, poll, rss_kib, stack, tagged_reply
from drill_traffic import Row, Sent, Tally, Telegram, tag, wait_finished

from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_shapes import JSON, last_user_text
from tests.fakes.llm_tools import Answer, FakeToolCall, tool_results
from tests.support.processes import request_text

TOOL_SECONDS = 3.0  # long enough to kill the worker mid-call, short enough for the rerun
SPARE = 1  # workers beyond the two a trial needs, so that a trial rarely waits for one
INTERRUPTED = "interrupted"  # what the result of an unfinished destructive call says


def is_read_only(trial: int) -> bool:
    return trial % 2 == 0  # the trials alternate: read-only, destructive, ...


def item(trial: int) -> str:
    return f"item-{trial}"


def tool_reply(body: JSON) -> str | Answer:
    """The model asks for its trial's tool, then answers once it has the result."""
    if tool_results(body):
        return tagged_reply(6)(body)
    found = TAG.search(last_user_text(body.get("messages", body.get("input"))))
    if found is None:
        return tagged_reply(6)(body)
    trial = int(found.group(0)[1:].split("x")[0])
    if is_read_only(trial):
        return Answer(calls=[FakeToolCall("desk__slow", json.dumps({"seconds": TOOL_SECONDS}))])
    arguments = json.dumps({"name": item(trial), "seconds": TOOL_SECONDS})
    return Answer(calls=[FakeToolCall("desk__slow_delete", arguments)])


def write_config(directory: Path, effects: Path) -> Path:
    """The test server over stdio as `desk`, destructive tools run without confirmation."""
    desk = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_servers", "--effects", str(effects)],
        "cwd": str(ROOT),
        "confirm": "never",
    }
    path = directory / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"desk": desk}}))
    return path


@dataclass
class TrialResult:
    """What a trial's kill left: the server's lines during the trial and the results sent."""

    trial: int
    lines: list[str]
    results: list[str]
    ok: bool = False
    why: str = ""


@dataclass
class Counts:
    read_only: list[TrialResult] = field(default_factory=list)
    destructive: list[TrialResult] = field(default_factory=list)
    orphans: int = 0  # a killed worker's children still alive 5 s later
    missed_kills: int = 0  # trials whose call was not caught in flight

    @property
    def failed(self) -> list[TrialResult]:
        return [o for o in self.read_only + self.destructive if not o.ok]


def judge(outcome: TrialResult) -> TrialResult:
    """Whether the trial's tool ran as it must after the kill (see the module docstring)."""
    lines, results = outcome.lines, outcome.results
    if is_read_only(outcome.trial):
        started, done = lines.count("slow started"), lines.count("slow done")
        answered = any(r.startswith("slept") for r in results)
        outcome.ok = started == 2 and done == 1 and answered
        outcome.why = f"{started} started, {done} done, results {results}"
        return outcome
    name = item(outcome.trial)
    started, deleted = lines.count(f"delete started {name}"), lines.count(f"deleted {name}")
    told = any(INTERRUPTED in r for r in results)
    outcome.ok = started == 1 and deleted <= 1 and (deleted == 1 or told)
    outcome.why = f"{started} started, {deleted} deleted, results {results}"
    return outcome


def effect_lines(effects: Path) -> list[str]:
    """What the server's tools did so far (a small file, read whole)."""
    return effects.read_text().splitlines()


def results_for(llm: FakeLLM, label: str) -> list[str]:
    """The tool results the model was sent in the trial's requests."""
    return [
        r.output
        for request in llm.requests
        if label in request_text(request)
        for r in tool_results(request)
    ]


async def kill_holder(s: Stack, session: str) -> int | None:
    """SIGKILL the worker holding the session's job; the number of its children that
    outlived it by 5 s (killed then), or None when no worker held the job."""
    client = s.client()
    try:
        pid = (await job_holders(client)).get(session)
    finally:
        await client.aclose()
    proc = next((p for p in s.workers if p.pid == pid), None)
    if proc is None:
        return None
    kids = s.sigkill(proc)
    await poll(lambda: all(rss_kib(k) is None for k in kids), 5)
    lingering = [k for k in kids if rss_kib(k) is not None]
    for kid in lingering:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kid, signal.SIGKILL)
    return len(lingering)


async def enough_workers(s: Stack, starting: list[asyncio.Task[list[Proc]]]) -> None:
    """Until two workers read jobs: one to kill, one to take its turn over. A worker
    starts slowly (its model process, its MCP server), so replacements start in the
    background and are waited for only when fewer than two are ready."""
    while len(ready_workers(s)) < 2 and starting:
        await starting.pop(0)


def ready_workers(s: Stack) -> list[Proc]:
    return [p for p in s.workers if "job streams of" in p.output()]


async def one_trial(
    s: Stack, tg: Telegram, http: httpx.AsyncClient, effects: Path, trial: int, counts: Counts
) -> Sent:
    """Send the trial's message, kill its worker mid-call, wait for the answer."""
    before = len(effect_lines(effects))
    started = "slow started" if is_read_only(trial) else f"delete started {item(trial)}"

    def new_lines() -> list[str]:
        return effect_lines(effects)[before:]

    sent = await tg.send(http, group_chat(trial), tag(trial, 1))
    lingering = None
    if await poll(lambda: started in new_lines(), 60, 0.02):
        lingering = await kill_holder(s, sent.session)
    if lingering is None:
        counts.missed_kills += 1
    else:
        counts.orphans += lingering
    await wait_finished([sent], tg.finished_at, 60)
    outcome = judge(TrialResult(trial, new_lines(), results_for(s.llm, tag(trial, 1))))
    (counts.read_only if is_read_only(trial) else counts.destructive).append(outcome)
    return sent


async def tool_crash(quick: bool) -> Row:
    """SIGKILL the worker while its tool call runs: read-only calls run again once,
    destructive ones never twice, every turn answered once."""
    trials = 4 if quick else 20
    llm = FakeLLM()
    llm.reply = tool_reply
    async with stack("tool-crash", llm=llm) as s:
        effects = s.workdir / "effects.txt"
        effects.touch()
        s.env["GATEWAY_MCP_CONFIG"] = str(write_config(s.workdir, effects))
        await s.start_web()
        await s.start_workers(SPARE + 2)
        tg, counts, sents = Telegram(s), Counts(), []
        deadline = time.monotonic() + (300 if quick else 900)
        starting: list[asyncio.Task[list[Proc]]] = []
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                for trial in range(trials):
                    if time.monotonic() > deadline:
                        break
                    await enough_workers(s, starting)
                    sents.append(await one_trial(s, tg, http, effects, trial, counts))
                    starting.append(asyncio.create_task(s.start_workers(1)))  # the killed one's
        finally:
            for task in starting:
                task.cancel()
            await asyncio.gather(*starting, return_exceptions=True)
        counted = await settle(s, tg, sents, 30)
        return _report(s, counted, counts, trials)


def _report(s: Stack, counted: Tally, counts: Counts, planned: int) -> Row:
    failed = counts.failed
    reran = sum(o.ok for o in counts.read_only)
    once = sum(o.ok for o in counts.destructive)
    ok = not failed and not counts.missed_kills and counted.trials == planned
    result = _row(
        "tool-crash",
        counted,
        ok,
        f"read-only rerun once {reran}/{len(counts.read_only)}, destructive never twice "
        f"and told {once}/{len(counts.destructive)}",
    )
    result.notes.append(
        f"{counts.missed_kills} calls not caught in flight; {counts.orphans} children of a "
        f"killed worker outlived it by 5 s; "
        f"{len(s.log_lines('reclaimed turn job'))} reclaims logged; logs in {s.workdir}"
    )
    for outcome in failed[:3]:
        result.notes.append(f"trial {outcome.trial}: {outcome.why}")
    return result
