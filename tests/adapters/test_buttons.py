"""The approval buttons' payload, and the refusal a click that does not count gets."""

from __future__ import annotations

from adapters.buttons import approval_payload, parse_approval_payload, refusal_text
from gateway.inbound.ingest import Verdict


def test_an_approval_payload_round_trips_and_nothing_else_parses() -> None:
    approval_id = "AbC_123-xyz"
    assert parse_approval_payload(approval_payload(approval_id, True)) == (approval_id, True)
    assert parse_approval_payload(approval_payload(approval_id, False)) == (approval_id, False)
    for other in ("a:short:y", f"a:{approval_id}:maybe", f"b:{approval_id}:y", None, 7):
        assert parse_approval_payload(other) is None


def test_only_a_click_that_does_not_count_gets_a_refusal() -> None:
    assert refusal_text(Verdict.NOT_YOURS) and refusal_text(Verdict.CLOSED)
    assert refusal_text(Verdict.NOT_YOURS) != refusal_text(Verdict.CLOSED)
    counted = [v for v in Verdict if v not in (Verdict.NOT_YOURS, Verdict.CLOSED)]
    assert counted and all(refusal_text(v) is None for v in counted)
