"""Which link targets from model text may become live links on a platform.

A target is whatever the model wrote between the parentheses of `[text](target)`,
and the model writes what its input (a web page, a document, a user) steers it
to. Outside web pages and e-mail addresses a live link does harm: `javascript:`
runs code, Slack's `!channel` and `@U0123` notify people, Telegram's
`tg://user?id=` mentions someone, app schemes open apps. So the rule is a short
allow list, and any other target is shown as text.
"""

from __future__ import annotations

SAFE_SCHEMES = ("http://", "https://", "mailto:")


def is_safe_target(target: str) -> bool:
    """Whether `target` may become a live link: `http`, `https` and `mailto` only."""
    return target[: len("https://")].lower().startswith(SAFE_SCHEMES)
