"""The MCP servers file: what it accepts, and one line naming file and key for what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.settings.env import load_settings
from gateway.tools.config import load_tool_config

ROOT = Path(__file__).resolve().parents[3]
SECRET = "sk-live-do-not-print-4242"


def server(**body: Any) -> dict[str, Any]:
    return {"mcpServers": {"a": body}}


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def refused(tmp_path: Path, document: Any) -> str:
    path = write(tmp_path, document)
    with pytest.raises(ConfigError) as caught:
        load_tool_config(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_unset_means_no_servers() -> None:
    assert load_tool_config(None).servers == ()


def test_a_stdio_and_an_http_server_are_read_with_their_options(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "local": {
                    "command": "python",
                    "args": ["-m", "srv"],
                    "env": {"TOKEN": SECRET},
                    "cwd": "/tmp",
                    "tools": ["add"],
                    "timeout": 5,
                    "confirm": "always",
                    "readOnly": ["add"],
                    "destructive": ["wipe"],
                },
                "remote-1": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": SECRET}},
            }
        },
    )
    local, remote = load_tool_config(path).servers
    assert (local.name, local.command, local.cwd) == ("local", "python", "/tmp")
    assert local.args == ("-m", "srv")
    assert dict(local.env) == {"TOKEN": SECRET}
    assert local.allowed_tools == frozenset({"add"})
    assert local.allows("add") and not local.allows("x")
    assert (local.timeout, local.confirm) == (5.0, "always")
    assert (local.read_only, local.destructive) == (frozenset({"add"}), frozenset({"wipe"}))
    assert (remote.url, dict(remote.headers)) == ("http://127.0.0.1:9/mcp", {"X-Key": SECRET})
    assert (remote.allowed_tools, remote.timeout, remote.confirm) == (None, None, "destructive")
    assert SECRET not in repr(local) and SECRET not in repr(remote)


def test_a_missing_file_names_the_setting_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"GATEWAY_MCP_CONFIG: cannot read .*nowhere\.json"):
        load_tool_config(tmp_path / "nowhere.json")


def test_broken_json_names_the_file_and_where(tmp_path: Path) -> None:
    message = refused(tmp_path, '{"mcpServers": {')
    assert "mcp.json" in message and "not valid JSON" in message and "line 1" in message


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "the top level must be an object"),
        ({"servers": {}}, "unknown key 'servers'"),
        ({"mcpServers": []}, "mcpServers must be an object"),
        ({"mcpServers": {"bad name": {"command": "x"}}}, "server name 'bad name'"),
        ({"mcpServers": {"a": "python"}}, "mcpServers.a: must be an object"),
        (server(command="x", port=1), "mcpServers.a: unknown key 'port'"),
        (server(), "mcpServers.a: needs exactly one of command"),
        (server(command="x", url="http://h"), "exactly one of command"),
        (server(command=""), "mcpServers.a.command: must be a non-empty"),
        (server(command="x", args="-v"), "mcpServers.a.args: must be a list"),
        (server(command="x", tools=[1]), "mcpServers.a.tools: must be a list"),
        (server(command="x", timeout=0), "mcpServers.a.timeout: must be"),
        (server(command="x", timeout=True), "mcpServers.a.timeout: must be"),
        (server(command="x", confirm="ask"), "mcpServers.a.confirm: must be"),
        (server(command="x", readOnly="t"), "mcpServers.a.readOnly: must be"),
        (server(url="http://h", args=[]), "args, env and cwd are for command"),
        (server(command="x", headers={}), "headers are for url servers"),
    ],
)
def test_each_mistake_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, document: Any, expected: str
) -> None:
    message = refused(tmp_path, document)
    assert str(tmp_path / "mcp.json") in message
    assert expected in message


@pytest.mark.parametrize(
    "server",
    [
        {"command": "x", "env": {"TOKEN": SECRET, "N": 5}},
        {"command": "x", "env": [SECRET]},
        {"url": "http://h", "headers": {"Authorization": SECRET, "X": None}},
        {"url": "http://h", "headers": SECRET},
        {"command": "x", "env": {"TOKEN": SECRET}, "timeout": "soon"},
        {"url": "http://h", "headers": {"Authorization": SECRET}, "bogus": SECRET},
    ],
)
def test_a_secret_in_env_or_headers_never_appears_in_the_message(
    tmp_path: Path, server: dict[str, Any]
) -> None:
    message = refused(tmp_path, {"mcpServers": {"s": server}})
    assert SECRET not in message
    assert "mcpServers.s" in message


def test_the_shipped_example_is_valid_and_points_at_the_test_server() -> None:
    (server,) = load_tool_config(ROOT / "docs" / "mcp.example.json").servers
    assert server.args[-1] == "tests.fakes.mcp_servers"


def test_the_tool_settings_have_their_defaults_and_bounds(tmp_path: Path) -> None:
    settings = load_settings(_env_file=None)
    assert settings.mcp_config is None
    assert (settings.tool_max_steps, settings.tool_timeout) == (8, 60.0)
    assert (settings.tool_result_chars, settings.confirm_timeout) == (16_000, 600.0)
    with pytest.raises(ConfigError, match="GATEWAY_TOOL_MAX_STEPS"):
        load_settings(_env_file=None, GATEWAY_TOOL_MAX_STEPS=0)
    with pytest.raises(ConfigError, match="GATEWAY_TOOL_TIMEOUT"):
        load_settings(_env_file=None, GATEWAY_TOOL_TIMEOUT=0)
    configured = load_settings(_env_file=None, GATEWAY_MCP_CONFIG=str(tmp_path / "m.json"))
    assert configured.mcp_config == tmp_path / "m.json"
