"""The operator console in a real browser: Debian's Chromium driven by Playwright.

`gateway web`'s app with the console on a real uvicorn, over the test's Redis, with a
real Worker answering turns through the loopback model. One walk through the console
as an operator does it: sign in, open a conversation a real turn made (whose
`<script>` must not run), watch a turn appear live and stop it, reset the
conversation, approve a pairing code, change a budget; every page is screenshotted
into a folder the run prints, and no page breaks its Content-Security-Policy.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from gateway.inbound.pairing import Pairing
from gateway.settings.scoped import ScopedSettings
from tests.fakes.llm_server import FakeLLM
from tests.gateway.console.conftest import TOKEN, build_app
from tests.support.conversation import Conversation, conversation
from tests.support.web_server import SCREENSHOTS, serving

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INJECTED = '<script>window.owned = 1</script><img src=x onerror="window.owned = 2"> hello'
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def screenshots() -> Path:
    """The run's screenshots folder (tests/conftest.py prints it at the end of the run)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield launched
        await launched.close()


@pytest.fixture
async def talk(redis_url: str, llm: FakeLLM) -> AsyncIterator[Conversation]:
    async with conversation(
        redis_url, llm, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_PAIRING=True
    ) as running:
        yield running


async def _shot(page: Page, folder: Path, name: str) -> None:
    await page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


async def test_an_operator_walks_through_the_console(
    talk: Conversation, browser: Browser, screenshots: Path
) -> None:
    app, _ = build_app(talk.redis, talk.settings)
    async with serving(app) as port:
        base = f"http://127.0.0.1:{port}/admin"
        context = await browser.new_context(viewport=PHONE)
        page = await context.new_page()
        broken: list[str] = []
        page.on("console", lambda m: broken.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: broken.append(str(e)))

        await _sign_in(page, base, screenshots)
        await _open_the_real_turns_conversation(talk, page, base, screenshots)
        await _watch_a_turn_live_and_stop_it(talk, page)
        await _reset(talk, page)
        await _approve_a_pairing_code(talk, page, base, screenshots)
        await _change_a_budget(talk, page, base, screenshots)
        for name in ("usage", "approvals", "feedback", "audit", "health"):
            await page.goto(f"{base}/{name}")
            await expect(page.locator("h1")).to_be_visible()
            await _shot(page, screenshots, name)
        assert await page.locator("#usage-chart").count() == 0  # health is last: no chart
        await page.goto(f"{base}/usage")
        await expect(page.locator("#usage-chart")).to_have_attribute("data-drawn", "1")
        await expect(page.get_by_role("cell", name="U1", exact=False).first).to_be_visible()
        await context.close()
    assert [m for m in broken if not m.startswith("Failed to load resource")] == [], broken


async def _sign_in(page: Page, base: str, folder: Path) -> None:
    await page.goto(f"{base}/health")
    await _shot(page, folder, "signin")
    await page.fill("input[name=token]", "not the token")
    await page.click("button[type=submit]")
    await expect(page.get_by_role("alert")).to_have_text("Wrong token.")
    await page.fill("input[name=token]", TOKEN)
    await page.fill("input[name=name]", "Dana")
    await page.click("button[type=submit]")
    await expect(page.locator("h1")).to_have_text("Health")


async def _open_the_real_turns_conversation(
    talk: Conversation, page: Page, base: str, folder: Path
) -> None:
    await talk.say(INJECTED)
    await page.goto(f"{base}/conversations")
    await _shot(page, folder, "conversations")
    await page.click(f"text={talk.key}")
    await expect(page.locator(".entry.user .text").first).to_have_text(INJECTED)
    await expect(page.locator(".entry.assistant .text").first).to_contain_text("fake reply to:")
    assert await page.evaluate("window.owned") is None
    assert await page.locator(".entry img").count() == 0
    await _shot(page, folder, "conversation")


async def _watch_a_turn_live_and_stop_it(talk: Conversation, page: Page) -> None:
    talk.llm.hang_next(after_tokens=3)
    await talk.send("a question that takes long")
    # No reload: the page's event stream shows the message, the running turn, its text.
    await expect(
        page.locator(".entry .text", has_text="a question that takes long")
    ).to_be_visible()
    await expect(page.locator("#running")).to_be_visible()
    await expect(page.locator(".entry.writing")).to_be_visible()
    await page.click("#stop")
    await expect(page.locator(".note")).to_have_text("Stopping the reply.")
    await talk.idle()
    await expect(page.locator("#running")).to_have_count(0)
    stopped = await talk.history()
    assert stopped[-1]["role"] == "assistant"


async def _reset(talk: Conversation, page: Page) -> None:
    await page.click("#reset")  # the "I mean it" box is required first
    assert await talk.history() != []
    await page.check("input[name=sure]")
    await page.click("#reset")
    await expect(page.locator(".note")).to_have_text("Started a fresh conversation.")
    await expect(page.locator(".entry")).to_have_count(0)
    assert await talk.history() == []


async def _approve_a_pairing_code(talk: Conversation, page: Page, base: str, folder: Path) -> None:
    pairing = Pairing(talk.redis)
    code = await pairing.request("telegram:555")
    assert code is not None
    await page.goto(f"{base}/pairing")
    await expect(page.get_by_text(code)).to_be_visible()
    await page.fill("#pairing-code", code.lower())
    await page.locator("form.row button").click()
    await expect(page.locator(".note")).to_have_text("Approved telegram:555.")
    await _shot(page, folder, "pairing")
    assert await pairing.paired() == ["telegram:555"]


async def _change_a_budget(talk: Conversation, page: Page, base: str, folder: Path) -> None:
    await page.goto(f"{base}/settings?scope=test:W")
    await page.select_option("#setting-key", "budget_user_daily")
    await page.fill("#setting-value", "lots")
    await page.click("button[value=set]")
    await expect(page.get_by_role("alert")).to_contain_text("budget")
    await page.select_option("#setting-key", "budget_user_daily")
    await page.fill("#setting-value", "3usd")
    await page.click("button[value=set]")
    row = page.locator("tr", has=page.get_by_text("budget_user_daily", exact=True))
    await expect(row).to_contain_text(re.compile(r"3usd\s*test:W"))
    await _shot(page, folder, "settings")
    scoped = ScopedSettings(talk.redis, talk.settings)
    await scoped.load()
    assert scoped.at("test:W") == {"budget_user_daily": "3usd"}
    await asyncio.sleep(0)
