"""`gateway web` as a subprocess: the console is on /admin only with GATEWAY_ADMIN_TOKEN,
and an open live page does not keep the process from stopping."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

import httpx

from tests.fakes.llm_server import FakeLLM
from tests.gateway.console.conftest import TOKEN
from tests.support.processes import environment, gateway
from tests.support.redis_servers import free_port


async def test_gateway_web_serves_the_console_only_when_configured(
    tmp_path: Path, redis_url: str, llm: FakeLLM
) -> None:
    env = environment(redis_url, llm.api_base, free_port())
    async with gateway(tmp_path, env, "web") as web, httpx.AsyncClient() as client:
        assert (await client.get(web.url("/admin/signin"))).status_code == 404
    env = environment(redis_url, llm.api_base, free_port(), GATEWAY_ADMIN_TOKEN=TOKEN)
    async with gateway(tmp_path, env, "web") as web:
        async with httpx.AsyncClient(timeout=10) as client:
            origin = web.url("")
            signed = await client.post(
                web.url("/admin/signin"), data={"token": TOKEN}, headers={"origin": origin}
            )
            assert signed.status_code == 303
            shown = (await client.get(web.url("/admin/health"))).text
            assert re.search(r"<td>web</td><td>1</td>", shown), "this gateway web is counted"
            async with client.stream("GET", web.url("/admin/events/health")) as live:
                assert live.status_code == 200
                process = web.running[0]
                process.send_signal(signal.SIGTERM)
                started = time.monotonic()
                while process.poll() is None:
                    assert time.monotonic() - started < 9, "gateway web did not stop"
                    await asyncio.sleep(0.05)
        assert process.returncode == 0
        assert "the console on /admin" in web.output()
