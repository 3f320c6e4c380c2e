"""Provider chains: what a stateful provider (the Responses API) already holds of a session.

After a turn whose whole reply the provider kept, the session's meta names the
response to continue (`response_id`), the last entry the provider has seen
(`cursor`) and the summary the chain started from (`chain_base`). The next
turn sends only what came after the cursor, on that response; a compression
since the chain started means the provider holds a view the session no longer
has, so the turn is sent in full and a new chain begins.
"""

from __future__ import annotations

from gateway.context.compiler import CompiledRequest
from gateway.models import ResponseChain
from gateway.state.session import Entry, HistoryView


class Chains:
    """The chain bookkeeping of one model; all of it is a no-op for a stateless one."""

    def __init__(self, stateful: bool) -> None:
        self.stateful = stateful

    def cursor(self, view: HistoryView) -> str | None:
        """The last entry a stateful provider has seen, when its chain fits this view."""
        if not self.stateful or not view.meta.get("response_id"):
            return None
        if view.meta.get("chain_base", "") != chain_base(view):
            return None  # compressed since the chain started: resend the compressed view
        return view.meta.get("cursor") or None

    def start(self, request: CompiledRequest, view: HistoryView) -> ResponseChain | None:
        """The chain a call of `request` continues (a new one for a request in full)."""
        if not self.stateful:
            return None
        delta = request.mode == "delta"
        return ResponseChain(view.meta.get("response_id") if delta else None)

    def fields(
        self, view: HistoryView, chain: ResponseChain | None, entry: Entry | None, whole: bool
    ) -> dict[str, str] | None:
        """The chain to continue next turn: set only when the provider holds this whole turn
        (`whole`: the reply was neither stopped nor failed)."""
        if chain is None or not chain.response_id or entry is None:
            return None
        if not whole:
            return None  # the next turn resends these entries on the chain it had
        return {
            "response_id": chain.response_id,
            "cursor": str(entry["id"]),
            "chain_base": chain_base(view),
        }


def previous_id(chain: ResponseChain | None) -> str | None:
    return chain.previous_id if chain is not None else None


def chain_base(view: HistoryView) -> str:
    """The summary a chain starts from: the last entry of the newest segment, if any."""
    return str(view.segments[-1].get("last_id", "")) if view.segments else ""
