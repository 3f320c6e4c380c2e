"""The `gateway` command end to end, as a user runs it: subprocesses, real Redis, fake model."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.cli_runs import ROOT, clean_env, gateway, run_console, run_gateway

# Each test starts gateway processes; a worker's start imports litellm (seconds of CPU).
pytestmark = pytest.mark.timeout(240)
PLATFORM_SDKS = ("slack_bolt", "slack_sdk", "telegram", "discord", "aiohttp")


def test_hello_on_a_fresh_machine_gets_a_bot_reply(tmp_path: Path) -> None:
    result = run_console(tmp_path, "hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("bot: ") and "hello" in result.stdout
    assert "echo" in result.stderr and "embedded" in result.stderr  # the banner says so
    data = tmp_path / ".gateway"
    assert (data / "appendonlydir").is_dir() or (data / "appendonly.aof").is_file()


def test_btw_on_the_console_gets_a_btw_answer(tmp_path: Path) -> None:
    result = run_console(tmp_path, "hello\n/btw what did I say?\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("bot: ") for line in lines)
    assert any(line.startswith("btw: ") for line in lines)


def test_history_survives_a_restart_of_the_embedded_redis(tmp_path: Path) -> None:
    assert run_console(tmp_path, "remember the number 4711\n").returncode == 0
    second = subprocess.run(
        gateway("sessions", "show", "console:local:console", "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert second.returncode == 0, second.stderr
    entries = json.loads(second.stdout)
    assert entries[0]["text"] == "remember the number 4711"
    assert entries[1]["role"] == "assistant"


def test_a_second_run_in_the_same_directory_shares_the_first_ones_redis(tmp_path: Path) -> None:
    with subprocess.Popen(
        gateway("run", "--console"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    ) as first:
        deadline = time.monotonic() + 120
        while not (tmp_path / ".gateway" / "redis.sock").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = run_console(tmp_path, "from the second\n")
        assert second.returncode == 0, second.stderr
        assert "sharing the embedded Redis" in second.stderr
        assert second.stdout.startswith("bot: ")
        out, _ = first.communicate("from the first\n", timeout=60)
        assert first.returncode == 0 and out.startswith("bot: ")


def test_btw_is_answered_while_the_main_turn_streams_and_stays_out_of_history(
    tmp_path: Path, llm: FakeLLM
) -> None:
    llm.set_model_behaviour("main-model", reply="the long main answer " * 10, duration=5.0)
    llm.set_model_behaviour("side-model", reply="You said hello.")
    env = {
        "GATEWAY_MODEL": "openai/main-model",
        "GATEWAY_SIDE_MODEL": "openai/side-model",
        "GATEWAY_API_BASE": llm.api_base,
        "GATEWAY_API_KEY": "sk-test",
    }
    with subprocess.Popen(
        gateway("run", "--console"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=clean_env(**env),
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        llm.wait_for_requests(1, timeout=150, model="main-model")
        time.sleep(1.0)  # the scenario: the question comes 1 s into the main turn
        process.stdin.write("/btw what did I say?\n")
        process.stdin.flush()
        first_line = process.stdout.readline()
        assert first_line.startswith("btw: "), first_line
        main_request = llm.requests_for("main-model")[0]
        assert main_request.duration is None  # the main reply was still streaming
        process.stdin.write("next question\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(timeout=60) == 0
    assert rest.count("bot: ") == 2
    (side,) = llm.requests_for("side-model")
    side_text = json.dumps(side["messages"])
    assert "what did I say?" in side_text and "hello" in side_text
    assert "tools" not in side
    later = json.dumps(llm.requests_for("main-model")[1]["messages"])
    assert "what did I say" not in later and "You said hello" not in later
    assert "next question" in later


def test_unreachable_redis_is_one_clear_line_and_a_failure(tmp_path: Path) -> None:
    result = subprocess.run(
        gateway("run", "--console"),
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env(REDIS_URL="redis://:hunter2secret@127.0.0.1:1/0"),
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("gateway: Redis at ")
    assert "hunter2secret" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("command", "env", "named"),
    [
        ("web", {"SLACK_BOT_TOKEN": "xoxb-secret-token-1"}, "SLACK_SIGNING_SECRET"),
        ("web", {"TELEGRAM_BOT_TOKEN": "123:secret-token-2"}, "TELEGRAM_WEBHOOK_SECRET"),
        ("worker", {}, "SLACK_BOT_TOKEN"),
        ("run", {"GATEWAY_LOG_FORMAT": "xml"}, "GATEWAY_LOG_FORMAT"),
        ("run", {"TELEGRAM_WEBHOOK_SECRET": "bad secret!"}, "TELEGRAM_WEBHOOK_SECRET"),
    ],
)
def test_wrong_configuration_is_one_line_without_secrets(
    tmp_path: Path, redis_url: str, command: str, env: dict[str, str], named: str
) -> None:
    result = run_gateway(redis_url, tmp_path, command, **env)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
    for secret in ("xoxb-secret-token-1", "secret-token-2", "bad secret!"):
        assert secret not in result.stderr + result.stdout


def test_health_and_metrics(tmp_path: Path, redis_url: str) -> None:
    port = _free_port()
    with subprocess.Popen(
        gateway("web"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(REDIS_URL=redis_url, PORT=str(port), HOST="127.0.0.1"),
    ) as process:
        health = _get_when_up(f"http://127.0.0.1:{port}/healthz", process)
        assert health.status_code == 200 and health.json()["redis"] == "up"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert metrics.status_code == 200
        assert "gateway_turn_latency_seconds_bucket" in metrics.text
        assert "gateway_queue_depth" in metrics.text
        process.terminate()
        _, errors = process.communicate(timeout=20)
    assert "Traceback" not in errors


def test_the_core_imports_no_platform_sdk() -> None:
    """Architecture: nothing in gateway/ imports a platform SDK (the CLI loads adapters lazily)."""
    for path in (ROOT / "gateway").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in PLATFORM_SDKS, f"{path.name} imports {name}"


def test_ingest_and_web_never_load_litellm() -> None:
    code = (
        "import sys, gateway.http.app, gateway.inbound.ingest, gateway.cli.main, adapters.console;"
        "print('litellm' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr


def _free_port() -> int:
    from tests.support.redis_servers import free_port

    return free_port()


def _get_when_up(url: str, process: subprocess.Popen[str]) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            return httpx.get(url)
        except httpx.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
