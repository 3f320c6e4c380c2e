"""The event loop the gateway's processes run on (gateway/event_loop.py): uvloop by default,
asyncio's own when `GATEWAY_EVENT_LOOP=asyncio` asks or uvloop is not installed; the real
command and a real model process report the one they run on."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import event_loop
from gateway.models.pool import ModelProcess
from gateway.models.types import ModelSettings
from tests.support.cli_runs import ROOT, clean_env, gateway

pytestmark = pytest.mark.timeout(240)  # the model processes import litellm: seconds each


async def _report() -> tuple[str, str]:
    return event_loop.running(), type(asyncio.get_running_loop()).__module__


def test_uvloop_runs_by_default_and_asyncio_when_asked() -> None:
    name, module = event_loop.run(_report(), "uvloop")
    assert name.startswith("uvloop ") and module.startswith("uvloop")
    assert event_loop.run(_report(), "asyncio") == ("asyncio", "asyncio.unix_events")


def test_without_uvloop_installed_asyncio_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert event_loop.run(_report(), "uvloop") == ("asyncio", "asyncio.unix_events")


def test_what_the_event_loop_runs_gets_its_result_and_its_error() -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise LookupError("from inside the loop")

    with pytest.raises(LookupError, match="from inside the loop"):
        event_loop.run(fail(), "uvloop")


def test_an_unknown_event_loop_is_refused_at_start(tmp_path: Path) -> None:
    env = clean_env(GATEWAY_EVENT_LOOP="trio", GATEWAY_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        gateway("doctor"), capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert done.returncode == 2, done.stderr
    assert "GATEWAY_EVENT_LOOP" in done.stderr


@pytest.mark.parametrize(("choice", "expected"), [("uvloop", "uvloop "), ("asyncio", "asyncio")])
def test_gateway_doctor_names_the_loop_it_runs_on(
    tmp_path: Path, choice: str, expected: str
) -> None:
    env = clean_env(GATEWAY_EVENT_LOOP=choice, GATEWAY_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        gateway("doctor"), capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    (line,) = [x for x in done.stdout.splitlines() if " loop " in x]
    assert line.startswith("ok") and line.split(" loop ", 1)[1].strip().startswith(expected)


async def test_a_model_process_runs_on_the_loop_its_worker_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.models.pool")
    processes = [ModelProcess(ModelSettings(event_loop=c)) for c in ("uvloop", "asyncio")]
    try:
        await asyncio.gather(*(p.start() for p in processes))
        said = {
            p.pid: r.getMessage()
            for p in processes
            for r in caplog.records
            if f"model process {p.pid} ready" in r.getMessage()
        }
    finally:
        await asyncio.gather(*(p.aclose() for p in processes))
    uv, plain = (said[p.pid] for p in processes)
    assert "(event loop: uvloop " in uv
    assert plain.endswith("(event loop: asyncio)")
