"""Sign in with Slack on the operator console, against the fake Slack: Slack's page, its
one-time code exchanged with the app's secret for an ID token, its nonce checked; a
workspace admin (users.info with the workspace's own token) and a user named in
GATEWAY_ADMIN_USERS are signed in, anyone else is refused and audited; a state is good
once, and only one this console handed out."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.slack.signin import claims
from gateway.console.app import console_routes
from gateway.console.audit import AuditLog
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from tests.fakes.slack_api import FakeSlack, Install
from tests.support.slack_helpers import InstallsApp, many_workspaces, serving

TOKEN = "console-token-0123456789"
BASE = "https://gateway"


@contextlib.asynccontextmanager
async def console(slack: FakeSlack, redis_url: str) -> AsyncIterator[InstallsApp]:
    values = many_workspaces(
        slack.api_url, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_ADMIN_USERS="slack:UNAMED"
    )
    settings = load_settings(_env_file=None, REDIS_URL=redis_url, **values)
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.validate("http")
    ingest = Ingest(settings, redis)
    admin = console_routes(settings, redis, ingest, ["slack"], [platform])
    async with serving(platform, ingest, redis, BASE, admin) as http:
        yield InstallsApp(http, redis, platform)


async def _start(web: InstallsApp, slack: FakeSlack) -> str:
    """The console's link followed to Slack's page; the state it carries."""
    started = await web.http.get("/admin/signin/slack")
    assert started.status_code == 303
    location = started.headers["location"]
    assert location.startswith(f"{slack.api_url.removesuffix('/').removesuffix('/api')}/openid/")
    async with httpx.AsyncClient() as browser:
        assert (await browser.get(location)).status_code == 200
    query = parse_qs(urlsplit(location).query)
    assert query["redirect_uri"] == [f"{BASE}/admin/signin/slack/callback"]
    assert query["scope"] == ["openid profile"] and query["nonce"][0]
    return query["state"][0]


async def _through_slack(
    web: InstallsApp, slack: FakeSlack, user: str, team: str
) -> httpx.Response:
    """The operator's browser: the console's link, Slack's page, Slack's redirect back."""
    state = await _start(web, slack)
    code = slack.sign_in_consent(user, team, name=f"name of {user}")
    return await web.http.get("/admin/signin/slack/callback", params={"code": code, "state": state})


async def _installed(web: InstallsApp, slack: FakeSlack) -> Install:
    install = await web.install(slack, "T1", team_name="Acme")
    slack.add_user("UADMIN", "Ada", admin=True)
    slack.add_user("UOWNER", "Olu", owner=True)
    slack.add_user("UPLAIN", "Pat")
    return install


async def test_a_workspace_admin_and_a_named_user_sign_in_and_others_do_not(
    slack: FakeSlack, redis_url: str
) -> None:
    async with console(slack, redis_url) as web:
        await _installed(web, slack)
        assert "Sign in with Slack" in (await web.http.get("/admin/signin")).text
        for user, allowed in (("UPLAIN", False), ("UADMIN", True), ("UNAMED", True)):
            web.http.cookies.clear()
            answer = await _through_slack(web, slack, user, "T1")
            if allowed:
                assert answer.status_code == 303, answer.text
                cookie = answer.headers["set-cookie"].lower()
                assert "httponly" in cookie and "secure" in cookie
                assert (await web.http.get("/admin/health")).status_code == 200
            else:
                assert answer.status_code == 403 and "not an admin" in answer.text
                assert (await web.http.get("/admin/health")).status_code == 401
        log = [(e.action, e.who) for e in await AuditLog(web.redis).recent()]
    assert log[::-1] == [
        ("sign-in refused", "name of UPLAIN (slack:UPLAIN)"),
        ("sign-in", "name of UADMIN (slack:UADMIN)"),
        ("sign-in", "name of UNAMED (slack:UNAMED)"),
    ]
    assert [c.args.get("user") for c in slack.calls_to("users.info")] == ["UPLAIN", "UADMIN"]


async def test_a_state_is_good_once_and_only_from_this_console(
    slack: FakeSlack, redis_url: str
) -> None:
    async with console(slack, redis_url) as web:
        await _installed(web, slack)
        state = await _start(web, slack)
        code = slack.sign_in_consent("UADMIN", "T1")
        made_up = await web.http.get(
            "/admin/signin/slack/callback", params={"code": code, "state": "made-up"}
        )
        assert made_up.status_code == 400
        first = await web.http.get(
            "/admin/signin/slack/callback", params={"code": code, "state": state}
        )
        assert first.status_code == 303
        again = await web.http.get(
            "/admin/signin/slack/callback", params={"code": code, "state": state}
        )
        assert again.status_code == 400 and "expired" in again.text
        assert (await web.http.get("/admin/signin/discord")).status_code == 404


async def test_a_code_slack_refuses_signs_nobody_in(slack: FakeSlack, redis_url: str) -> None:
    async with console(slack, redis_url) as web:
        state = await _start(web, slack)
        answer = await web.http.get(
            "/admin/signin/slack/callback", params={"code": "forged", "state": state}
        )
        assert answer.status_code == 401
        assert (await web.http.get("/admin/health")).status_code == 401


def test_an_id_tokens_claims_are_read_and_a_malformed_one_is_empty() -> None:
    assert claims("e30.eyJub25jZSI6ICJuIn0.c2ln") == {"nonce": "n"}
    assert claims("not a token") == {}
    assert claims("a.!!!.c") == {}


async def test_an_id_token_for_another_sign_ins_nonce_signs_nobody_in(
    slack: FakeSlack, redis_url: str
) -> None:
    async with console(slack, redis_url) as web:
        await _installed(web, slack)
        first = await _start(web, slack)
        await _start(web, slack)  # a second sign-in: Slack's code now carries its nonce
        code = slack.sign_in_consent("UADMIN", "T1")
        answer = await web.http.get(
            "/admin/signin/slack/callback", params={"code": code, "state": first}
        )
        assert answer.status_code == 401
        assert (await web.http.get("/admin/health")).status_code == 401
