"""Every console route: without a sign-in it shows nothing (the sign-in page, 401 for the
event streams), a change without its CSRF token (or from another origin) changes
nothing, and with a sign-in each page shows its data and each change is made and
written to the audit log. Also: `/admin` is not there unless configured, and every
answer carries the security headers."""

from __future__ import annotations

import datetime as dt

import pytest

from gateway.console.audit import AuditLog
from gateway.feedback.store import Reply
from gateway.messages import Address
from gateway.models import Charge, ModelCall, Usage
from gateway.settings.scoped import ScopedSettings
from gateway.spend.usage import UsageLedger, day_of
from tests.gateway.console.conftest import ORIGIN, TOKEN, Console, build
from tests.support.helpers import inbound
from tests.support.helpers import settings as make_settings

KEY = "test:W:C1"
PAGES = [
    "/admin/",
    "/admin/health",
    "/admin/conversations",
    f"/admin/conversation?key={KEY}",
    "/admin/usage",
    "/admin/usage.csv",
    "/admin/settings?scope=test:W",
    "/admin/pairing",
    "/admin/approvals",
    "/admin/feedback",
    "/admin/audit",
]
STREAMS = ["/admin/events/health", f"/admin/events/conversation?key={KEY}"]
CHANGES = {
    "/admin/conversation/reset": {"key": KEY},
    "/admin/conversation/stop": {"key": KEY},
    "/admin/settings": {
        "scope": "test:W",
        "key": "budget_user_daily",
        "value": "2usd",
        "action": "set",
    },
    "/admin/pairing/approve": {"code": "WRONGCODE"},
    "/admin/pairing/revoke": {"user": "telegram:42"},
    "/admin/signout": {},
}


async def _seed(console: Console) -> str:
    """A conversation with a message waiting, and a pending pairing code."""
    await console.ingest.receive(inbound("hello <b>there</b>", channel="C1"))
    code = await console.ingest.access.pairing.request("telegram:77")
    assert code is not None
    return code


@pytest.mark.parametrize("path", PAGES)
async def test_a_page_without_a_sign_in_is_the_sign_in_page(console: Console, path: str) -> None:
    await _seed(console)
    answer = await console.client.get(path)
    assert answer.status_code == 401
    assert 'name="token"' in answer.text
    assert "hello" not in answer.text and KEY not in answer.text


@pytest.mark.parametrize("path", STREAMS)
async def test_an_event_stream_without_a_sign_in_is_refused(console: Console, path: str) -> None:
    answer = await console.client.get(path)
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("text/plain")


async def test_a_forged_cookie_is_no_sign_in(console: Console) -> None:
    console.client.cookies.set("gw_admin", "made-up-cookie-value", path="/admin")
    answer = await console.client.get("/admin/health")
    assert answer.status_code == 401 and 'name="token"' in answer.text


@pytest.mark.parametrize("path", list(CHANGES))
async def test_a_change_without_a_sign_in_changes_nothing(console: Console, path: str) -> None:
    await _seed(console)
    answer = await console.client.post(path, data={"csrf": "x", **CHANGES[path]}, headers=ORIGIN)
    assert answer.status_code == 303 and answer.headers["location"] == "/admin/signin"
    await _nothing_changed(console)


@pytest.mark.parametrize("path", [p for p in CHANGES if p != "/admin/signout"])
@pytest.mark.parametrize("csrf", ["wrong", ""])
async def test_a_change_with_a_wrong_csrf_token_changes_nothing(
    console: Console, path: str, csrf: str
) -> None:
    await _seed(console)
    await console.sign_in()
    answer = await console.change(path, csrf, **CHANGES[path])
    assert answer.status_code == 403
    await _nothing_changed(console)


@pytest.mark.parametrize("path", [p for p in CHANGES if p != "/admin/signout"])
async def test_a_change_from_another_origin_changes_nothing(console: Console, path: str) -> None:
    await _seed(console)
    csrf = await console.sign_in()
    for headers in ({"origin": "https://evil.example"}, {}):
        answer = await console.client.post(
            path, data={"csrf": csrf, **CHANGES[path]}, headers=headers
        )
        assert answer.status_code == 403
    await _nothing_changed(console)


async def _nothing_changed(console: Console) -> None:
    assert len(await console.ingest.sessions.inbox(KEY)) == 1
    scoped = ScopedSettings(console.redis, console.settings)
    await scoped.load()
    assert scoped.at("test:W") == {}
    assert len(await console.ingest.access.pairing.pending()) == 1
    changes = [e for e in await AuditLog(console.redis).recent() if not e.action.startswith("sign")]
    assert changes == []


async def test_every_page_shows_its_data_with_a_sign_in(console: Console) -> None:
    code = await _seed(console)
    await console.sign_in()
    shown = {path: await console.client.get(path) for path in PAGES}
    assert all(a.status_code == 200 for p, a in shown.items() if p != "/admin/"), {
        p: a.status_code for p, a in shown.items()
    }
    assert shown["/admin/"].status_code == 303
    assert KEY in shown["/admin/conversations"].text
    talk = shown[f"/admin/conversation?key={KEY}"].text
    assert "hello &lt;b&gt;there&lt;/b&gt;" in talk and "<b>there" not in talk
    assert code in shown["/admin/pairing"].text and "telegram:77" in shown["/admin/pairing"].text
    assert "budget_user_daily" in shown["/admin/settings?scope=test:W"].text
    assert shown["/admin/usage.csv"].headers["content-type"].startswith("text/csv")
    assert "sign-in" in shown["/admin/audit"].text


async def test_each_change_is_made_and_audited(console: Console) -> None:
    code = await _seed(console)
    await console.ingest.access.pairing.request("telegram:42")
    csrf = await console.sign_in("Dana")
    answer = await console.change("/admin/settings", csrf, **CHANGES["/admin/settings"])
    assert answer.status_code == 303
    scoped = ScopedSettings(console.redis, console.settings)
    await scoped.load()
    assert scoped.at("test:W") == {"budget_user_daily": "2usd"}
    assert (await console.change("/admin/pairing/approve", csrf, code=code)).status_code == 303
    assert "telegram:77" in await console.ingest.access.pairing.paired()
    assert (
        await console.change("/admin/pairing/revoke", csrf, user="telegram:77")
    ).status_code == 303
    assert "telegram:77" not in await console.ingest.access.pairing.paired()
    stopped = await console.change("/admin/conversation/stop", csrf, key=KEY)
    assert stopped.status_code == 303 and "Nothing+is+running" in stopped.headers["location"]
    assert (await console.change("/admin/conversation/reset", csrf, key=KEY)).status_code == 303
    assert await console.ingest.sessions.inbox(KEY) == []
    entries = await AuditLog(console.redis).recent()
    assert [(e.action, e.target, e.who) for e in entries[:6]][::-1] == [
        ("sign-in", "", "Dana"),
        ("setting", "test:W", "Dana"),
        ("pairing approve", "telegram:77", "Dana"),
        ("pairing revoke", "telegram:77", "Dana"),
        ("stop", KEY, "Dana"),
        ("reset", KEY, "Dana"),
    ]
    assert all(e.address == "127.0.0.1" for e in entries)
    page = await console.client.get("/admin/audit")
    assert "pairing revoke" in page.text and "Dana" in page.text


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"scope": "test:W", "key": "budget_user_daily", "value": "lots", "action": "set"},
            "budget",
        ),
        ({"scope": "test:W", "key": "no_such", "value": "1", "action": "set"}, "unknown setting"),
        ({"scope": "bad scope", "key": "model", "value": "x", "action": "set"}, "scope"),
        ({"scope": "test:W", "key": "model", "value": "x", "action": "drop"}, "set or unset"),
    ],
)
async def test_a_setting_is_validated_as_gateway_settings_does(
    console: Console, fields: dict[str, str], message: str
) -> None:
    csrf = await console.sign_in()
    answer = await console.change("/admin/settings", csrf, **fields)
    assert answer.status_code == 400
    assert 'class="error"' in answer.text and message in answer.text.lower()
    scoped = ScopedSettings(console.redis, console.settings)
    await scoped.load()
    assert scoped.at("test:W") == {}


@pytest.mark.parametrize(
    "path", ["/admin/conversation?key=nokey", "/admin/conversation?key=a:b:c&before=x"]
)
async def test_a_bad_conversation_key_is_a_clear_400(console: Console, path: str) -> None:
    await console.sign_in()
    answer = await console.client.get(path)
    assert answer.status_code == 400 and "No such conversation" in answer.text


async def test_sign_out_ends_the_sign_in(console: Console) -> None:
    csrf = await console.sign_in()
    assert (await console.change("/admin/signout", csrf)).status_code == 303
    assert (await console.client.get("/admin/health")).status_code == 401


async def test_the_cookie_is_http_only_lax_and_secure_only_over_https(console: Console) -> None:
    plain = await console.client.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
    cookie = plain.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "secure" not in cookie
    secure = await console.client.post(
        "https://testserver/admin/signin",
        data={"token": TOKEN},
        headers={"origin": "https://testserver"},
    )
    assert "secure" in secure.headers["set-cookie"].lower()


async def test_every_answer_carries_the_security_headers(console: Console) -> None:
    for path in ("/admin/health", "/admin/static/console.css"):
        answer = await console.client.get(path)
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"


async def test_there_is_no_console_unless_a_token_is_configured(
    redis_url: str, redis_client: object
) -> None:
    from redis.asyncio import Redis

    assert isinstance(redis_client, Redis)
    client, _ = build(redis_client, make_settings(redis_url))
    async with client:
        for path in ("/admin/", "/admin/signin", "/admin/health"):
            assert (await client.get(path)).status_code == 404
        assert (await client.post("/admin/signin", data={"token": ""})).status_code in (404, 405)


async def test_the_console_refuses_an_oversized_form_before_reading_it(console: Console) -> None:
    answer = await console.client.post(
        "/admin/signin",
        content=b"token=" + b"x" * (2 * 1024 * 1024),
        headers={**ORIGIN, "content-type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 413


def test_the_admin_token_must_be_long() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        make_settings("redis://127.0.0.1:1", GATEWAY_ADMIN_TOKEN="short")


async def test_a_field_past_its_limit_is_a_clear_400(console: Console) -> None:
    await _seed(console)
    csrf = await console.sign_in()
    answer = await console.change("/admin/pairing/approve", csrf, code="A" * 41)
    assert answer.status_code == 400 and "code is at most 40 characters" in answer.text
    await _nothing_changed(console)


async def test_the_approvals_page_shows_who_asked_what_and_until_when(console: Console) -> None:
    address = Address(platform="test", workspace="W", channel="C1")
    await console.ingest.approvals.open(
        KEY, "t1", "call-1", "files__delete", '{"path": "/tmp/<x>"}', "U1", address, 600
    )
    await console.sign_in()
    page = (await console.client.get("/admin/approvals")).text
    assert KEY in page and "files__delete" in page and "test:U1" in page
    assert "/tmp/&lt;x&gt;" in page


async def test_the_feedback_page_shows_the_thumbs_down_with_their_conversations(
    console: Console,
) -> None:
    store = console.ingest.feedback_store
    for message, session in (("m1", "test:W:C1"), ("m2", "test:W:C2")):
        await store.register(Reply("test", "W", "C1", message, session, "t1", "openai/x"))
    await store.record("test", "C1", "m1", "U5", "down")
    await store.record("test", "C1", "m2", "U6", "up")
    await console.sign_in()
    page = (await console.client.get("/admin/feedback")).text
    assert "conversation?key=test%3AW%3AC1" in page and "test:U5" in page
    assert "test:W:C2" not in page


async def test_usage_by_day_and_its_csv(console: Console) -> None:
    charge = Charge("test:W:C1", "U1", "turn")
    ledger = UsageLedger(console.redis)
    await ledger.record(ModelCall("openai/x", [], 10.0, charge=charge), Usage(100, 20, 0.5))
    await ledger.record(ModelCall("openai/y", [], 10.0, charge=charge), Usage(1, 2, None))
    await console.sign_in()
    today = day_of(dt.datetime.now(dt.UTC))
    page = (await console.client.get("/admin/usage?by=day")).text
    assert today in page and "$0.5000" in page
    csv = (await console.client.get("/admin/usage.csv?by=model")).text.splitlines()
    assert csv == [
        "model,calls,prompt_tokens,completion_tokens,cost_usd,unpriced",
        "openai/x,1,100,20,0.500000,0",
        "openai/y,1,1,2,,1",
    ]
    bad = await console.client.get("/admin/usage.csv?by=nobody")
    assert bad.status_code == 400
    shown = await console.client.get("/admin/usage?since=yesterday")
    assert shown.status_code == 200 and "since must be a day" in shown.text
