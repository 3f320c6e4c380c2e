"""What the tool-loop and approval tests share: the stdio test server's config and its
effects file (tests/fakes/mcp_servers.py writes there what its tools did)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def write_config(tmp_path: Path, effects: Path, **options: object) -> Path:
    """A GATEWAY_MCP_CONFIG file with one stdio server, `desk`, and its `options`."""
    config = tmp_path / "mcp.json"
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_servers", "--effects", str(effects)],
        **options,
    }
    config.write_text(json.dumps({"mcpServers": {"desk": server}}))
    return config


def new_effects(tmp_path: Path) -> Path:
    path = tmp_path / "effects.txt"
    path.touch()
    return path


def lines(path: Path) -> list[str]:
    """What the tools did, one line each, in order."""
    return path.read_text().splitlines()
