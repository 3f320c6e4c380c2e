"""The MCP servers file (`GATEWAY_MCP_CONFIG`), read once and checked key by key.

The shape is the one most MCP clients share, so an existing file can be reused:

    {"mcpServers": {"name": {"command": ..., "args": [...], "env": {...}, "cwd": ...}}}
    {"mcpServers": {"name": {"url": ..., "headers": {...}}}}

with, per server, the gateway's own keys: `tools` (an allowlist), `timeout`
(seconds per call), `confirm` ("destructive", "always" or "never"), and
`readOnly` / `destructive` (tool names whose annotations the operator overrides).

Checked by hand rather than by a model library because a validation message
quotes the value it refused, and `env` and `headers` hold credentials: every
error here names the file and the key, never a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from gateway.errors import ConfigError

ConfirmPolicy = Literal["destructive", "always", "never"]
CONFIRM_POLICIES: tuple[ConfirmPolicy, ...] = ("destructive", "always", "never")
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
SERVER_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "tools", "timeout", "confirm"}
    | {"readOnly", "destructive"}
)


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP).

    `env` and `headers` are left out of the repr: they carry credentials.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    allowed_tools: frozenset[str] | None = None
    timeout: float | None = None
    confirm: ConfirmPolicy = "destructive"
    read_only: frozenset[str] = frozenset()
    destructive: frozenset[str] = frozenset()

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values an error or a log line about this server must never show."""
        return tuple(v for v in (*self.env.values(), *self.headers.values()) if v)

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools


@dataclass(frozen=True)
class ToolsConfig:
    """Every configured server, in the file's order."""

    servers: tuple[ServerConfig, ...] = ()
    source: str = ""


def load_tool_config(path: Path | None) -> ToolsConfig:
    """Read and check the file; None (the setting unset) means no tools."""
    if path is None:
        return ToolsConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"GATEWAY_MCP_CONFIG: cannot read {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    return parse_tool_config(raw, str(path))


def parse_tool_config(raw: object, source: str) -> ToolsConfig:
    """Check an already parsed document; `source` names it in errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be an object with mcpServers")
    unknown = sorted(set(raw) - {"mcpServers"})
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (only mcpServers)")
    servers = raw.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{source}: mcpServers must be an object of servers by name")
    parsed = tuple(_server(source, name, body) for name, body in servers.items())
    return ToolsConfig(servers=parsed, source=source)


def _server(source: str, name: str, body: object) -> ServerConfig:
    where = f"{source}: mcpServers.{name}"
    if not SERVER_NAME.match(name):
        raise ConfigError(f"{source}: server name {name!r} must be letters, digits, _ or -")
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: must be an object")
    unknown = sorted(set(body) - SERVER_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}")
    if ("command" in body) == ("url" in body):
        raise ConfigError(f"{where}: needs exactly one of command (stdio) or url (HTTP)")
    fields = _Fields(where, body)
    if "url" in body and ({"args", "env", "cwd"} & set(body)):
        raise ConfigError(f"{where}: args, env and cwd are for command servers, not url")
    if "command" in body and "headers" in body:
        raise ConfigError(f"{where}: headers are for url servers, not command")
    allowed = fields.names("tools")
    return ServerConfig(
        name=name,
        command=fields.text("command"),
        args=tuple(fields.names_list("args")),
        env=fields.mapping("env"),
        cwd=fields.text("cwd"),
        url=fields.text("url"),
        headers=fields.mapping("headers"),
        allowed_tools=allowed if "tools" in body else None,
        timeout=fields.seconds("timeout"),
        confirm=fields.confirm("confirm"),
        read_only=fields.names("readOnly"),
        destructive=fields.names("destructive"),
    )


@dataclass(frozen=True)
class _Fields:
    """Typed reads of one server's keys; each failure names the key, never its value."""

    where: str
    body: dict[str, object]

    def _get(self, key: str, ok: Callable[[object], bool], wants: str) -> object:
        value = self.body.get(key)
        if key in self.body and not ok(value):
            raise ConfigError(f"{self.where}.{key}: must be {wants}")
        return value

    def text(self, key: str) -> str | None:
        value = self._get(key, lambda v: isinstance(v, str) and v != "", "a non-empty string")
        return cast(str | None, value)

    def names_list(self, key: str) -> list[str]:
        value = self._get(key, _is_string_list, "a list of strings")
        return cast(list[str], value or [])

    def names(self, key: str) -> frozenset[str]:
        return frozenset(self.names_list(key))

    def mapping(self, key: str) -> dict[str, str]:
        value = self._get(key, _is_string_map, "an object of string values")
        return dict(cast(dict[str, str], value or {}))

    def seconds(self, key: str) -> float | None:
        value = self._get(key, _is_positive_number, "a number of seconds above 0")
        return None if value is None else float(cast(float, value))

    def confirm(self, key: str) -> ConfirmPolicy:
        value = self._get(key, lambda v: v in CONFIRM_POLICIES, "destructive, always or never")
        return cast(ConfirmPolicy, value or "destructive")


def _is_string_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_string_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())


def _is_positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
