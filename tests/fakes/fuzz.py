"""Malformed deliveries for `POST /slack/events` and `POST /telegram/webhook`, from a seed.

Every case is something a correct gateway must not store: deeply nested JSON,
truncated JSON, wrong types where objects or strings are expected, bytes that
are not UTF-8 (CESU-encoded surrogates among them), numbers Python refuses to
parse, wrong content types. About half of the cases are
authenticated the way the platform does it (Slack: `v0=HMAC-SHA256(secret,
"v0:<timestamp>:<body>")`; Telegram: the secret header), so they reach the
parsing behind the check; the rest are unsigned, forged, stale or carry
garbage in the authentication headers.

Each generator yields `(headers, body, signed)`; the same seed gives the same
cases (Slack timestamps are the current time, so that signed cases stay fresh).
Used by the fuzz test (a few hundred cases) and by the drills (thousands).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

Case = tuple[dict[str, str], bytes, bool]
Body = tuple[bytes, str]  # the body and its content type

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
OTHER_TYPES = (
    "text/plain",
    "multipart/form-data; boundary=x",
    "application/octet-stream",
    "application/xml",
    "",
    "application/jsonp",
    "text/json",
)
WRONG_VALUES: tuple[Any, ...] = ([1, 2], ["x"], {"a": 1}, 7, 3.5, True, "text")
NOT_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")
SLACK_TEAM, SLACK_BOT = "T0001", "UBOT"


def slack_cases(seed: int, n: int, secret: str) -> Iterator[Case]:
    """`n` malformed Slack deliveries; even-numbered ones are signed with `secret`."""
    rng = random.Random(seed)
    for index in range(n):
        body, content_type = rng.choice(_SLACK_BODIES)(rng)
        signed = index % 2 == 0
        headers = _slack_signed(body, secret) if signed else _slack_unsigned(rng, body)
        if content_type:
            headers["Content-Type"] = content_type
        yield headers, body, signed


def telegram_cases(seed: int, n: int, secret: str) -> Iterator[Case]:
    """`n` malformed Telegram updates; even-numbered ones carry the right secret."""
    rng = random.Random(seed)
    for index in range(n):
        body, content_type = rng.choice(_TELEGRAM_BODIES)(rng)
        signed = index % 2 == 0
        headers = {"Content-Type": content_type} if content_type else {}
        given = secret if signed else rng.choice(_wrong_secrets(secret))
        if given is not None:
            headers["X-Telegram-Bot-Api-Secret-Token"] = given
        yield headers, body, signed


# -- authentication ---------------------------------------------------------------


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 request signature."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def _slack_signed(body: bytes, secret: str) -> dict[str, str]:
    stamp = str(int(time.time()))
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": slack_signature(secret, stamp, body),
    }


def _slack_unsigned(rng: random.Random, body: bytes) -> dict[str, str]:
    now = int(time.time())
    choices: list[dict[str, str]] = [
        {},
        _slack_signed(body, "not-the-signing-secret"),
        {
            "X-Slack-Request-Timestamp": str(now - 3600),
            "X-Slack-Signature": slack_signature("not-the-signing-secret", str(now - 3600), body),
        },
        {"X-Slack-Request-Timestamp": "not-a-number", "X-Slack-Signature": "v0=00"},
        {"X-Slack-Request-Timestamp": "9" * 40, "X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": ""},
        {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": "v1=zz"},
        {"X-Slack-Signature": "v0=" + "a" * 64},
    ]
    return dict(rng.choice(choices))


def _wrong_secrets(secret: str) -> list[str | None]:
    # (not " " + secret: a client may not send a value that opens with a space, and a
    # server strips it as optional whitespace, which leaves the right secret)
    return [None, "", "wrong", secret + "x", secret[:-1], secret.upper(), secret[::-1]]


# -- Slack bodies -----------------------------------------------------------------


def _slack_event(rng: random.Random) -> dict[str, Any]:
    stamp = f"1710000000.{rng.randrange(10**6):06d}"
    event = {
        "type": "app_mention",
        "user": "U1",
        "channel": "C1",
        "ts": stamp,
        "text": f"<@{SLACK_BOT}> hello",
        "team": SLACK_TEAM,
    }
    return {
        "token": "legacy",
        "team_id": SLACK_TEAM,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": f"EvFuzz{rng.randrange(10**9)}",
        "event_time": 1710000000,
        "event": event,
        "authorizations": [{"team_id": SLACK_TEAM, "user_id": SLACK_BOT, "is_bot": True}],
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def _nested(rng: random.Random) -> bytes:
    depth = rng.choice((40, 200, 1000, 5000, 50_000))
    opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
    return opener * depth + b"1" + closer * depth


def slack_nested(rng: random.Random) -> Body:
    inner = _nested(rng)
    where = rng.choice(
        (
            b'{"type":"event_callback","event":',
            b'{"event":{"type":"app_mention","user":"U1","channel":"C1","ts":"1.1","text":',
            b"",
        )
    )
    return where + inner + (b"}" * where.count(b"{") if where else b""), JSON


def slack_truncated(rng: random.Random) -> Body:
    whole = _dumps(_slack_event(rng))
    return whole[: rng.randrange(1, len(whole) - 1)], JSON


def slack_not_an_object(rng: random.Random) -> Body:
    return _dumps(rng.choice(([_slack_event(rng)], "event_callback", 12, None, True, []))), JSON


def slack_wrong_event(rng: random.Random) -> Body:
    body = _slack_event(rng)
    body["event"] = rng.choice((*WRONG_VALUES, None, []))
    return _dumps(body), JSON


def slack_wrong_field(rng: random.Random) -> Body:
    """A field the gateway reads as a string or a list of objects, of another type."""
    body = _slack_event(rng)
    field = rng.choice(("text", "type", "user", "subtype"))
    body["event"][field] = rng.choice(tuple(v for v in WRONG_VALUES if not isinstance(v, str)))
    return _dumps(body), JSON


def slack_wrong_authorizations(rng: random.Random) -> Body:
    body = _slack_event(rng)
    body["authorizations"] = rng.choice(("text", 5, True, [1], ["x"], [[]]))
    return _dumps(body), JSON


def slack_not_utf8(rng: random.Random) -> Body:
    whole = _dumps(_slack_event(rng))
    cut = whole.index(b"hello")
    return whole[:cut] + rng.choice(NOT_UTF8) + whole[cut:], rng.choice((JSON, FORM))


def slack_huge_number(rng: random.Random) -> Body:
    whole = _dumps(_slack_event(rng))
    return whole.replace(b"1710000000,", b"1" * rng.choice((5000, 20_000)) + b","), JSON


def slack_wrong_content_type(rng: random.Random) -> Body:
    return _dumps(_slack_event(rng)), rng.choice(OTHER_TYPES)


def slack_challenge(rng: random.Random) -> Body:
    challenge = rng.choice((*WRONG_VALUES, None))
    body: dict[str, Any] = {"token": "legacy", "type": "url_verification", "challenge": challenge}
    return _dumps(body), JSON


def slack_command(rng: random.Random) -> Body:
    """A `/btw` slash command missing a field the command needs, or with bytes of garbage."""
    form = {
        "team_id": SLACK_TEAM,
        "channel_id": "C1",
        "user_id": "U1",
        "command": "/btw",
        "text": "what did we decide?",
        "trigger_id": f"trig.{rng.randrange(10**6)}",
    }
    del form[rng.choice(("channel_id", "user_id"))]
    return urlencode(form).encode(), FORM


def slack_payload(rng: random.Random) -> Body:
    """An interactivity `payload=` form field that is not a JSON object."""
    payload = rng.choice(
        ('{"type": "block_actions"', "[1, 2]", "null", "7", '"x"', "{]", "[" * 5000 + "]" * 5000)
    )
    return urlencode({"payload": payload}).encode(), FORM


_SLACK_BODIES: tuple[Callable[[random.Random], Body], ...] = (
    slack_nested,
    slack_truncated,
    slack_not_an_object,
    slack_wrong_event,
    slack_wrong_field,
    slack_wrong_authorizations,
    slack_not_utf8,
    slack_huge_number,
    slack_wrong_content_type,
    slack_challenge,
    slack_command,
    slack_payload,
)


# -- Telegram bodies --------------------------------------------------------------


def _telegram_update(rng: random.Random) -> dict[str, Any]:
    person = {"id": 42, "is_bot": False, "first_name": "Alice"}
    return {
        "update_id": rng.randrange(1, 10**9),
        "message": {
            "message_id": rng.randrange(1, 10**6),
            "date": 1700000000,
            "from": person,
            "text": "hello",
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
        },
    }


def telegram_nested(rng: random.Random) -> Body:
    inner = _nested(rng)
    return b'{"update_id": 1, "message": {"message_id": 1, "text": ' + inner + b"}}", JSON


def telegram_reply_chain(rng: random.Random) -> Body:
    """Valid JSON nested as deep as Telegram never sends: replies of replies of replies."""
    message = _dumps(_telegram_update(rng)["message"])
    depth = rng.choice((100, 400, 2000))
    # Written out as text: json.dumps itself cannot nest this deep.
    opening = message[:-1] + b', "reply_to_message": '
    nested = opening * depth + message + b"}" * depth
    return b'{"update_id": %d, "message": ' % rng.randrange(1, 10**9) + nested + b"}", JSON


def telegram_truncated(rng: random.Random) -> Body:
    whole = _dumps(_telegram_update(rng))
    return whole[: rng.randrange(1, len(whole) - 1)], JSON


def telegram_not_an_object(rng: random.Random) -> Body:
    return _dumps(rng.choice(([_telegram_update(rng)], "update", 12, None, True, []))), JSON


def telegram_wrong_update_id(rng: random.Random) -> Body:
    update = _telegram_update(rng)
    update["update_id"] = rng.choice(("7", 7.5, True, False, None, [7], {"id": 7}))
    return _dumps(update), JSON


def telegram_wrong_message(rng: random.Random) -> Body:
    update = _telegram_update(rng)
    update["message"] = rng.choice((*WRONG_VALUES, []))
    return _dumps(update), JSON


def telegram_wrong_field(rng: random.Random) -> Body:
    """A part of the message that must be an object (or a string, for text) of another type."""
    update = _telegram_update(rng)
    field = rng.choice(("chat", "from", "text", "date"))
    wrong = {
        "chat": WRONG_VALUES,
        "from": WRONG_VALUES,
        "text": ([1, 2], {"a": 1}, 7, 3.5, True),
        "date": ("text", [1, 2], {"a": 1}),
    }  # any number is a date
    update["message"][field] = rng.choice(wrong[field])
    return _dumps(update), JSON


def telegram_not_utf8(rng: random.Random) -> Body:
    whole = _dumps(_telegram_update(rng))
    cut = whole.index(b"hello")
    return whole[:cut] + rng.choice(NOT_UTF8) + whole[cut:], JSON


def telegram_huge_number(rng: random.Random) -> Body:
    whole = _dumps(_telegram_update(rng))
    return whole.replace(b"1700000000", b"1" * rng.choice((5000, 20_000))), JSON


def telegram_wrong_content_type(rng: random.Random) -> Body:
    return _dumps(_telegram_update(rng)), rng.choice(OTHER_TYPES)


_TELEGRAM_BODIES: tuple[Callable[[random.Random], Body], ...] = (
    telegram_nested,
    telegram_reply_chain,
    telegram_truncated,
    telegram_not_an_object,
    telegram_wrong_update_id,
    telegram_wrong_message,
    telegram_wrong_field,
    telegram_not_utf8,
    telegram_huge_number,
    telegram_wrong_content_type,
)
