"""Hostile HTTP payloads for `/slack/events` and `/telegram/webhook`, reproducible by seed.

Each case is `(headers, body, signed)`: `signed` says whether the request
carries valid credentials (a correct Slack signature over this very body, or
the right Telegram secret), so a drill can send the unsigned ones in a phase
of their own and check that they changed nothing. The bodies start from
well-formed updates and events and are broken on purpose: random JSON, wrong
types, missing fields, huge strings, deep nesting, broken UTF-8, truncation,
non-JSON, the wrong content type.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID

Case = tuple[dict[str, str], bytes, bool]
_JSON = "application/json"


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value, with the odd lone surrogate, huge number or empty container."""
    kinds: list[Callable[[], Any]] = [
        lambda: None,
        lambda: rng.random() < 0.5,
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.uniform(-1e300, 1e300),
        lambda: random_text(rng, rng.choice((0, 5, 300))),
    ]
    if depth < 4:
        kinds += [
            lambda: [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))],
            lambda: {
                random_text(rng, 6): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))
            },
        ]
    return rng.choice(kinds)()


def random_text(rng: random.Random, length: int) -> str:
    alphabet = "ab <>&\"'\\\n\t\u0000\u202e\u200b😀\ud800\udfff/@*_`~#[]()"
    return "".join(rng.choice(alphabet) for _ in range(length))


def telegram_update(rng: random.Random) -> dict[str, Any]:
    chat_id = rng.choice((42, -100123, 7))
    text = rng.choice(("hello", "/btw what?", "/reset", "@gw_test_bot hi", ""))
    return {
        "update_id": rng.randint(1, 2**31),
        "message": {
            "message_id": rng.randint(1, 10**6),
            "date": int(time.time()),
            "from": {"id": rng.choice((42, 99)), "is_bot": False, "first_name": "F"},
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "text": text,
            "entities": [{"type": "mention", "offset": 0, "length": 12}],
        },
    }


def slack_event(rng: random.Random) -> dict[str, Any]:
    event = {
        "type": rng.choice(("app_mention", "message")),
        "user": "U1",
        "channel": "C1",
        "ts": f"{rng.randint(1, 2**31)}.000100",
        "team": TEAM_ID,
        "text": f"<@{BOT_USER_ID}> {rng.choice(('hi', '!btw what', ''))}",
    }
    return {
        "token": "legacy",
        "team_id": TEAM_ID,
        "api_app_id": "A0001",
        "type": rng.choice(("event_callback", "url_verification", "block_actions")),
        "event_id": f"Ev{rng.randint(1, 2**40)}",
        "event_time": int(time.time()),
        "challenge": "c",
        "event": event,
    }


def mutate(rng: random.Random, value: dict[str, Any]) -> Any:
    """Break a well-formed payload in one of several ways (or several at once)."""
    for _ in range(rng.randint(1, 3)):
        target = value
        path = [k for k in ("message", "event") if k in value and isinstance(value[k], dict)]
        if path and rng.random() < 0.7:
            target = value[path[0]]
        key = rng.choice(list(target) or ["x"])
        roll = rng.random()
        if roll < 0.4:
            target[key] = random_value(rng)
        elif roll < 0.6:
            target.pop(key, None)
        elif roll < 0.75:
            target[key] = "x" * rng.choice((10_000, 100_000, 300_000))
        else:
            target[random_text(rng, 8)] = random_value(rng)
    return value


def encode(rng: random.Random, value: Any) -> bytes:
    """JSON bytes, sometimes nested thousands deep, truncated, or not UTF-8 at all."""
    roll = rng.random()
    if roll < 0.05:
        depth = rng.choice((1_000, 20_000, 200_000))
        return b'{"update_id": 1, "message": ' + b"[" * depth + b"]" * depth + b"}"
    if roll < 0.08:
        return rng.randbytes(rng.randint(0, 2000))
    body = json.dumps(value).encode()
    if roll < 0.13:
        return body[: rng.randint(0, len(body))]
    if roll < 0.2:
        cut = rng.randint(0, len(body))
        return body[:cut] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00")) + body[cut:]
    if roll < 0.203:
        return b'{"update_id": 1, "pad": "' + b"y" * (6 * 1024 * 1024) + b'"}'
    return body


def content_type(rng: random.Random) -> str:
    return (
        _JSON
        if rng.random() < 0.9
        else rng.choice(
            ("text/plain", "application/x-www-form-urlencoded", "", "application/json; charset=x")
        )
    )


def telegram_cases(seed: int, n: int, secret: str) -> Iterator[Case]:
    rng = random.Random(seed)
    for _ in range(n):
        body = encode(
            rng, mutate(rng, telegram_update(rng)) if rng.random() < 0.9 else random_value(rng)
        )
        signed = rng.random() < 0.7
        headers = {"content-type": content_type(rng)}
        if signed:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret
        elif rng.random() < 0.8:
            headers["X-Telegram-Bot-Api-Secret-Token"] = rng.choice(
                (secret.upper(), secret + "x", secret[:-1], "", " " + secret, "x" * 300)
            )
        yield headers, body, signed


def slack_signature(secret: str, stamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return "v0=" + digest.hexdigest()


def slack_cases(seed: int, n: int, secret: str) -> Iterator[Case]:
    rng = random.Random(seed)
    for _ in range(n):
        body = encode(
            rng, mutate(rng, slack_event(rng)) if rng.random() < 0.9 else random_value(rng)
        )
        stamp = str(int(time.time()))
        signed = rng.random() < 0.7
        headers = {
            "content-type": content_type(rng),
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": slack_signature(secret, stamp, body),
        }
        if not signed:
            forge = rng.randrange(5)
            if forge == 0:
                headers["X-Slack-Signature"] = slack_signature("wrong-secret", stamp, body)
            elif forge == 1:  # a real signature, five minutes and more in the past
                old = str(int(time.time()) - 400)
                headers.update(
                    {
                        "X-Slack-Request-Timestamp": old,
                        "X-Slack-Signature": slack_signature(secret, old, body),
                    }
                )
            elif forge == 2:
                headers["X-Slack-Signature"] = slack_signature(secret, stamp, body + b" ")
            elif forge == 3:
                del headers["X-Slack-Signature"]
            else:
                headers["X-Slack-Request-Timestamp"] = rng.choice(("abc", "", "-1", "1e99"))
        if rng.random() < 0.1:
            headers["X-Slack-Retry-Num"] = str(rng.randint(0, 3))
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        yield headers, body, signed


_MARKDOWN_PIECES = (
    "**bold _nested ~~strike `code** not closed_ ",
    "```python\nunclosed = fence\n",
    "```\n",
    "`" * 7 + " ticks ",
    "<b>html</b> <script>alert(1)</script> &amp; &bogus; &#0; ",
    "[link](javascript:alert(1)) [x](http://a/b_c*d) ",
    "@everyone @here <@U123> <!channel> ",
    "> > > > > > > > quoted\n",
    "- " * 40 + "deep list\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "\u202eevil\u202c \u200b\u200d \ufeff ",
    "😀" * 30 + " ",
    "\\*escaped\\* \\_ ",
    "#" * 9 + " heading\n",
    "___***___***",
    "~" * 50 + "\n",
    "<" * 20 + ">" * 20 + " ",
)


def adversarial_markdown(length: int, seed: int = 3) -> str:
    """About `length` characters of Markdown built to trip up renderers and splitters:
    unbalanced emphasis and fences, HTML, mentions, bidi controls, one very long word."""
    rng = random.Random(seed)
    parts: list[str] = ["x" * 5000 + "\n"]  # a word longer than any platform's message
    size = len(parts[0])
    while size < length:
        piece = rng.choice(_MARKDOWN_PIECES)
        parts.append(piece)
        size += len(piece)
    return "".join(parts)[:length]
