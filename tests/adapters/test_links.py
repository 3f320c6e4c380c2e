"""Which link targets a renderer may make live."""

from __future__ import annotations

from adapters.links import is_safe_target


def test_only_web_and_mail_links_may_be_live() -> None:
    assert is_safe_target("HTTPS://example.com") and is_safe_target("mailto:a@b.c")
    assert not is_safe_target("javascript:alert(1)") and not is_safe_target("file:///etc")
