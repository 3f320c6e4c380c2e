"""Platform adapters: each turns raw platform events into `Inbound` and sends replies."""

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
