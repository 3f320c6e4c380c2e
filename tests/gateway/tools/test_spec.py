"""Public tool names and each tool's care, from MCP annotations and the server's overrides."""

from __future__ import annotations

import re

from mcp_types import Tool, ToolAnnotations

from gateway.tools.config import ServerConfig
from gateway.tools.spec import assign_names, build_spec, hashed_name

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SCHEMA = {"type": "object", "properties": {}}


def tool(name: str, **hints: bool) -> Tool:
    annotations = ToolAnnotations(**hints) if hints else None
    return Tool(name=name, input_schema=SCHEMA, annotations=annotations)


def care(server: ServerConfig, listed: Tool) -> tuple[bool, bool, bool]:
    spec = build_spec(server, listed, "n", 60.0)
    return spec.read_only, spec.destructive, spec.needs_confirmation


def test_names_are_server_then_tool() -> None:
    assert assign_names([("files", "read"), ("web", "read")]) == {
        ("files", "read"): "files__read",
        ("web", "read"): "web__read",
    }


def test_names_that_would_collide_are_both_hashed_and_stay_distinct() -> None:
    names = assign_names([("a__b", "c"), ("a", "b__c"), ("a", "d")])
    assert names[("a__b", "c")] != names[("a", "b__c")]
    assert names[("a__b", "c")].startswith("a__b__c_")
    assert names[("a", "d")] == "a__d"
    assert all(OPENAI_NAME.match(name) for name in names.values())


def test_a_long_or_odd_name_is_cut_with_a_stable_hash() -> None:
    long_pair, odd_pair = ("s" * 40, "t" * 40), ("fs", "read.file/v2")
    names = assign_names([long_pair, odd_pair])
    assert len(names[long_pair]) == 64 and OPENAI_NAME.match(names[long_pair])
    assert names[long_pair] == hashed_name(*long_pair) == assign_names([long_pair])[long_pair]
    assert names[odd_pair].startswith("fs__read_file_v2_") and OPENAI_NAME.match(names[odd_pair])
    assert hashed_name("s" * 40, "t" * 41) != names[long_pair]


def test_annotations_follow_the_specifications_defaults() -> None:
    server = ServerConfig(name="s", command="x")
    assert care(server, tool("read", read_only_hint=True)) == (True, False, False)
    assert care(server, tool("append", read_only_hint=False, destructive_hint=False)) == (
        False,
        False,
        False,
    )
    assert care(server, tool("wipe", destructive_hint=True)) == (False, True, True)
    assert care(server, tool("unmarked")) == (False, True, True)
    # destructiveHint means nothing for a read-only tool
    assert care(server, tool("odd", read_only_hint=True, destructive_hint=True)) == (
        True,
        False,
        False,
    )


def test_overrides_win_over_the_hints_and_the_policy_decides_confirmation() -> None:
    overridden = ServerConfig(
        name="s", command="x", read_only=frozenset({"wipe"}), destructive=frozenset({"read"})
    )
    assert care(overridden, tool("wipe", destructive_hint=True)) == (True, False, False)
    assert care(overridden, tool("read", read_only_hint=True)) == (False, True, True)
    always = ServerConfig(name="s", command="x", confirm="always")
    assert care(always, tool("read", read_only_hint=True)) == (True, False, True)
    never = ServerConfig(name="s", command="x", confirm="never")
    assert care(never, tool("wipe", destructive_hint=True)) == (False, True, False)


def test_the_servers_timeout_wins_over_the_default() -> None:
    listed = tool("read", read_only_hint=True)
    assert build_spec(ServerConfig(name="s", command="x"), listed, "n", 60.0).timeout == 60.0
    timed = ServerConfig(name="s", command="x", timeout=5.0)
    assert build_spec(timed, listed, "n", 60.0).timeout == 5.0
