"""Secrets kept in Redis, encrypted with GATEWAY_SECRET_KEY (Fernet: AES-128-CBC + HMAC).

Redis is shared by every process and often by other tools, and its dumps and
append-only files end up in backups: a platform token stored there in clear is
a token anyone with a copy can use. Each secret is sealed on its own, so a
record's other fields stay readable for listing and counting.

Rotation: GATEWAY_SECRET_KEY holds one key, or several separated by commas,
the newest first (cryptography's MultiFernet). New secrets are sealed with the
first; any of them opens what is stored; `is_current` tells a reader that a
secret was sealed with an older key, so it can seal it again.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from gateway.errors import ConfigError

KEY_VARIABLE = "GATEWAY_SECRET_KEY"
MALFORMED = (
    "must be one or more Fernet keys separated by commas (each 32 bytes in url-safe "
    "base64; make one with: python -c "
    '"from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())")'
)


class WrongSecretKey(ConfigError):
    """A stored secret does not open with any key of GATEWAY_SECRET_KEY."""


def check_keys(text: str) -> list[str]:
    """The keys of a GATEWAY_SECRET_KEY value, newest first; ValueError (MALFORMED, which
    never quotes the value) when one is not a Fernet key."""
    keys = [part.strip() for part in text.split(",") if part.strip()]
    if not keys:
        raise ValueError(MALFORMED)
    for key in keys:
        try:
            raw = base64.urlsafe_b64decode(key.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise ValueError(MALFORMED) from None
        if len(raw) != 32:
            raise ValueError(MALFORMED)
    return keys


class TokenCipher:
    """Seals and opens secrets with the keys of GATEWAY_SECRET_KEY."""

    def __init__(self, key_text: str) -> None:
        keys = [Fernet(key.encode("ascii")) for key in check_keys(key_text)]
        self._newest = keys[0]
        self._any = MultiFernet(keys)

    def seal(self, secret: str) -> str:
        return self._any.encrypt(secret.encode()).decode("ascii")

    def open(self, sealed: str) -> str:
        """The secret; WrongSecretKey when no key opens it (the message names the variable,
        never the key or the secret)."""
        try:
            return self._any.decrypt(sealed.encode("ascii")).decode()
        except (InvalidToken, UnicodeEncodeError):
            raise WrongSecretKey(
                f"{KEY_VARIABLE} does not decrypt the stored tokens: "
                "set the key they were saved with (or list it after the new one)"
            ) from None

    def is_current(self, sealed: str) -> bool:
        """Whether `sealed` was sealed with the newest key (else it is worth sealing again)."""
        try:
            self._newest.decrypt(sealed.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            return False
        return True
