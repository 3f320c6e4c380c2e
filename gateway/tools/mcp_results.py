"""An MCP server's answer to a call as the ToolResult the model reads.

The only module of the results that needs the MCP SDK's types: a worker without
tools never imports it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mcp_types import (
    AudioContent,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

from gateway.tools.results import ToolResult, capped


def from_call(result: CallToolResult, limit: int) -> ToolResult:
    """The text of a finished call; the server's own `isError` makes it an error."""
    text = content_text(result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:
        return ToolResult(capped(f"The tool failed: {text or 'no details'}", limit), "error")
    return ToolResult(capped(text or "(the tool returned nothing)", limit), "ok")


def content_text(blocks: Sequence[ContentBlock]) -> str:
    """Text blocks joined; anything else named, never inlined (an image is not text)."""
    return "\n".join(_block_text(block) for block in blocks)


def _block_text(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent):
        return f"[image: {block.mime_type}, not shown]"
    if isinstance(block, AudioContent):
        return f"[audio: {block.mime_type}, not shown]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        return f"[embedded resource: {block.resource.uri}, not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"
