"""Platform adapters: each turns raw platform events into `Inbound` and sends replies.

One package per platform (`slack/`, `telegram/`, `discord/`), the same file names
meaning the same things in each, and `console.py`, the terminal. What the three
share, one job a module:

    fields.py       the checks of the ids and texts an event carries, before it is an Inbound
    buttons.py      an approval button's payload and the refusal a click gets
    attachments.py  a file an event describes, as the core's Attachment
    mentions.py     the text without the bot's own mentions
    retry_after.py  a Retry-After, in any form an SDK gives it, as seconds
    sdk_logs.py     an SDK's chatty loggers kept quiet
    health.py       how often a connection renews its health report
    spans.py        linear-time inline span finders for the three renderers
    links.py        which link targets may be live links

`load` imports a platform's package only when it is asked for.
"""

from __future__ import annotations

import importlib

from gateway.platform import Platform

# Each adapter's Platform class, by the name of its package.
CLASSES = {"slack": "SlackPlatform", "telegram": "TelegramPlatform", "discord": "DiscordPlatform"}
NAMES = tuple(CLASSES)


def load(name: str) -> type[Platform]:
    """The Platform class of adapter `name`, imported only when asked for (SDKs are heavy)."""
    if name not in NAMES:
        raise KeyError(name)
    module = importlib.import_module(f"adapters.{name}")
    platform: type[Platform] = getattr(module, CLASSES[name])
    return platform
