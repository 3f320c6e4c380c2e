"""What the model is told about a tool: its public name, its schema, and how careful to be.

Names. Every tool is offered as `server__tool`, so two servers can never offer
the same name, and the name stays inside OpenAI's `^[a-zA-Z0-9_-]{1,64}$`. A
name that does not fit as it is (too long, a character outside that set, or the
same as another server's after joining) is cut and given a short hash of the
server and tool, which keeps it stable from one start to the next.

Care. MCP annotations are hints (`readOnlyHint`, `destructiveHint`). Per the
specification `destructiveHint` defaults to true and means something only when
`readOnlyHint` is false, so a tool without annotations is treated as neither
read-only nor harmless: it is destructive. Whether it is asked about first
follows the server's `confirm` policy: "destructive" (the default) asks before
destructive tools, "always" before every tool, "never" before none. The
server's `readOnly` and `destructive` lists override the hints.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.tools.config import ServerConfig

if TYPE_CHECKING:
    from mcp_types import Tool

NAME_LIMIT = 64
SEPARATOR = "__"
_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_CHARS = 8


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the gateway offers it to the model."""

    name: str
    server: str
    tool: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool
    destructive: bool
    needs_confirmation: bool
    timeout: float


def plain_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def hashed_name(server: str, tool: str) -> str:
    """The cut name with a hash of the pair: distinct for distinct pairs, the same every run."""
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    joined = _INVALID_CHARS.sub("_", plain_name(server, tool))
    return f"{joined[: NAME_LIMIT - _HASH_CHARS - 1]}_{digest}"


def assign_names(pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The public name of each (server, tool); colliding or invalid names are hashed."""
    pairs = list(pairs)
    counts = Counter(plain_name(server, tool) for server, tool in pairs)
    names = {}
    for server, tool in pairs:
        plain = plain_name(server, tool)
        fits = counts[plain] == 1 and _VALID_NAME.match(plain)
        names[(server, tool)] = plain if fits else hashed_name(server, tool)
    return names


def build_spec(server: ServerConfig, tool: Tool, name: str, default_timeout: float) -> ToolSpec:
    """The spec of one listed tool, from its annotations and the server's overrides."""
    hints = tool.annotations
    read_only = bool(hints and hints.read_only_hint)
    destructive = not read_only and (hints is None or hints.destructive_hint is not False)
    if tool.name in server.read_only:
        read_only, destructive = True, False
    if tool.name in server.destructive:
        read_only, destructive = False, True
    return ToolSpec(
        name=name,
        server=server.name,
        tool=tool.name,
        description=tool.description or (hints.title if hints and hints.title else "") or "",
        input_schema=tool.input_schema,
        read_only=read_only,
        destructive=destructive,
        needs_confirmation=_needs_confirmation(server, destructive),
        timeout=server.timeout or default_timeout,
    )


def _needs_confirmation(server: ServerConfig, destructive: bool) -> bool:
    if server.confirm == "always":
        return True
    if server.confirm == "never":
        return False
    return destructive


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """The spec in OpenAI's function-calling format (what litellm passes as `tools=`)."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.input_schema),
        },
    }
