"""A worker with one model process, run as its own process by models/test_pool: one
turn and one /status, then what it saw, and whether this process imported litellm.

    python -m tests.support.lean_worker REDIS_URL API_BASE
"""

from __future__ import annotations

import asyncio
import json
import sys

from gateway.inbound.ingest import Ingest
from gateway.state import shards
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.support.helpers import inbound, settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for


async def main(redis_url: str, api_base: str) -> None:
    config = settings(
        redis_url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_API_BASE=api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_PROCESSES=1,
    )
    shards.configure(config.job_shards)  # as the test process names its keys
    client = client_for(redis_url)
    sender = RecordingSender()
    worker = Worker(config, client, {"test": sender})
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await worker.ready.wait()
    ingest, sessions = Ingest(config, client), SessionStore(client)
    for text in ("hello there", "/status"):
        message = inbound(text)
        await ingest.receive(message)
        async with asyncio.timeout(30):
            while await sessions.owed(message.session_key) > 0:
                await asyncio.sleep(0.02)
    stop.set()
    await running
    await client.aclose()
    print(
        json.dumps(
            {
                "messages": list(sender.messages.values()),
                "litellm_imported": "litellm" in sys.modules,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
