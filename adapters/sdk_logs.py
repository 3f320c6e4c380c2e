"""An SDK's chatty loggers kept quiet: they print URLs with tokens, or payloads."""

from __future__ import annotations

import logging
from collections.abc import Iterable


def quiet_loggers(names: Iterable[str], level: int) -> None:
    """Keep an SDK's loggers at `level` or above (they print URLs with tokens, or payloads);
    a level set on one on purpose is left alone."""
    for name in names:
        library = logging.getLogger(name)
        if library.level == logging.NOTSET:
            library.setLevel(level)
