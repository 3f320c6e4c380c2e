"""Image messages: the time from arrival to the model request, and the worker's peak memory.

Starts its own redis-server, a file host (`python -m http.server`, its own process)
serving one 10 MB PNG per session, and the loopback fake model (its own process, a
vision model). Drives the real Ingest and Worker in this process, with one model
process (as deployed), while `--sessions` sessions each send their image at once.
Prints the time from `ingest.receive` to the model request arriving at the fake
(p50, p99) and this process's peak RSS (VmHWM in /proc/self/status), before and
after: read once every turn is done, before this process reads the fake's records
(which hold every image sent). The project's target is a peak under 250 MB. It
asserts nothing.

    python bench/media.py [--sessions 20] [--megabytes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    PLATFORM,
    ROOT,
    BenchSender,
    RemoteFake,
    free_port,
    ms,
    percentile,
    start_redis,
    wait_redis,
)
from common import inbound as text_inbound

from gateway.inbound.ingest import Ingest
from gateway.messages import Address, Attachment
from gateway.settings.env import Settings
from gateway.state.keys import connect
from gateway.worker import Worker

SESSION = re.compile(r"image (\d+)")


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def serve_files(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    process = subprocess.Popen(
        command, cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return process, f"http://127.0.0.1:{port}"


def make_files(folder: str, sessions: int, megabytes: int) -> None:
    """The images, made in a process of their own so that this one's peak RSS is the
    worker's."""
    side = int((megabytes * 1_000_000 / 3) ** 0.5)
    script = (
        "import sys; from pathlib import Path; from tests.support.media_files import noisy_png; "
        f"data = noisy_png({side}, {side}); "
        f"[Path(sys.argv[1], f'{{n}}.png').write_bytes(data) for n in range({sessions})]"
    )
    subprocess.run([sys.executable, "-c", script, folder], cwd=ROOT, check=True)


class QuietSender(BenchSender):
    def record(self, address: Address, markdown: str, final: bool) -> None:
        pass


async def wait_http(url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection(*url.removeprefix("http://").split(":"))
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise TimeoutError("the file host did not start")


async def answered(worker: Worker, keys: list[str], timeout: float) -> None:
    """Until every session's turn is done (its owed jobs completed)."""
    async with asyncio.timeout(timeout):
        while any([await worker.sessions.owed(key) for key in keys]):
            await asyncio.sleep(0.05)


async def main(sessions: int, megabytes: int) -> None:
    folder = tempfile.mkdtemp(prefix="gw-media-")
    make_files(folder, sessions, megabytes)
    redis_process, redis_url = start_redis()
    files_process, files_url = serve_files(folder)
    fake = RemoteFake()
    try:
        await wait_redis(redis_url)
        await wait_http(files_url)
        await run(redis_url, files_url, fake, sessions, megabytes)
    finally:
        fake.stop()
        files_process.terminate()
        redis_process.terminate()


async def run(redis_url: str, files_url: str, fake: RemoteFake, sessions: int, mb: int) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        REDIS_URL=redis_url,
        GATEWAY_MODEL="openai/gpt-4o",
        GATEWAY_API_BASE=fake.api_base,
        GATEWAY_API_KEY="sk-bench",
        GATEWAY_ALLOWED_USERS=f"{PLATFORM}:u1",
        GATEWAY_MODEL_PROCESSES=1,
    )
    redis = connect(redis_url)
    worker = Worker(settings, redis, {PLATFORM: QuietSender()})
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await worker.ready.wait()
    ingest = Ingest(settings, redis)
    before = rss_mb("VmRSS")
    sent: dict[int, float] = {}
    keys = []
    for n in range(sessions):
        message = text_inbound(f"c{n}", f"image {n}", n + 1)
        url = f"{files_url}/{n}.png"
        attachment = Attachment(kind="image", url=url, name=f"{n}.png", mime_type="image/png")
        keys.append(message.session_key)
        sent[n] = time.monotonic()
        await ingest.receive(message.model_copy(update={"attachments": (attachment,)}))
    await answered(worker, keys, timeout=300)
    peak = rss_mb("VmHWM")  # before this process reads the fake's records, every image in them
    arrived = {}
    for request in fake.requests("gpt-4o"):
        found = SESSION.search(str(request["body"]["messages"]))
        if found:
            arrived.setdefault(int(found.group(1)), request["received_at"])
    waits = [arrived[n] - sent[n] for n in arrived]
    print(f"{sessions} sessions, one {mb} MB PNG each, sent at once")
    print(
        f"arrival -> model request: p50 {ms(percentile(waits, 50))}, "
        f"p99 {ms(percentile(waits, 99))}"
    )
    print(f"worker RSS before {before:.0f} MB, peak {peak:.0f} MB (target < 250 MB)")
    stop.set()
    await running
    await redis.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--megabytes", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    asyncio.run(main(args.sessions, args.megabytes))
