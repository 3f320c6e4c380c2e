"""Downloads over real HTTP from the loopback file host: limits, statuses, stalls, headers."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gateway.errors import DownloadFailed, DownloadTimeout, MediaTooLarge
from gateway.media.download import Downloader
from gateway.ports import Download
from tests.fakes.files import FakeFiles

MB = 1_000_000


@pytest.fixture
async def downloader() -> Downloader:
    fetcher = Downloader(timeout=0.5, deadline=2.0)
    yield fetcher  # type: ignore[misc]
    await fetcher.aclose()


async def test_a_file_comes_back_whole_with_the_headers_its_source_gave(
    files: FakeFiles, downloader: Downloader
) -> None:
    url = files.add("a.bin", b"x" * 300_000, require={"Authorization": "Bearer xoxb-1"})
    data = await downloader.fetch(Download(url, {"Authorization": "Bearer xoxb-1"}), 20 * MB)
    assert data == b"x" * 300_000
    with pytest.raises(DownloadFailed, match="refused"):
        await downloader.fetch(Download(url), 20 * MB)


async def test_a_missing_file_is_not_found_and_a_server_error_names_its_status(
    files: FakeFiles, downloader: Downloader
) -> None:
    with pytest.raises(DownloadFailed, match="not found"):
        await downloader.fetch(Download(f"{files.url}/files/gone.png"), MB)
    url = files.add("broken", b"", status=502)
    with pytest.raises(DownloadFailed, match="HTTP 502"):
        await downloader.fetch(Download(url), MB)


async def test_a_declared_length_over_the_limit_is_refused_before_its_body_is_read(
    files: FakeFiles, downloader: Downloader
) -> None:
    url = files.add("big.bin", b"\0" * (30 * MB))
    with pytest.raises(MediaTooLarge, match="over the 20 MB limit"):
        await downloader.fetch(Download(url), 20 * MB)
    assert files.files["big.bin"].sent < 40 * MB


async def test_an_undeclared_64_mb_file_is_cut_off_at_the_limit_holding_no_more(
    files: FakeFiles, downloader: Downloader
) -> None:
    # Far past the limit: what the fake counts as sent includes the loopback socket's
    # buffers, which grow to megabytes each way on a busy machine.
    url = files.add("big.bin", b"\0" * (64 * MB), declare_length=False)
    tracemalloc.start()
    try:
        with pytest.raises(MediaTooLarge, match="over the 20 MB limit"):
            await downloader.fetch(Download(url), 20 * MB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * MB + 4 * MB  # the limit, and one chunk's worth of buffers
    assert files.files["big.bin"].sent < 40 * MB


async def test_a_download_that_stalls_ends_at_the_read_timeout(
    files: FakeFiles, downloader: Downloader
) -> None:
    url = files.add("stuck.bin", b"y" * 500_000, stall_after=65_536)
    with pytest.raises(DownloadTimeout, match="stalled"):
        await downloader.fetch(Download(url), 20 * MB)


async def test_a_slow_trickle_ends_at_the_deadline(files: FakeFiles) -> None:
    fetcher = Downloader(timeout=1.0, deadline=0.5)
    url = files.add("slow.bin", b"z" * 200_000, trickle=0.05)
    try:
        with pytest.raises(DownloadTimeout, match="too long"):
            await fetcher.fetch(Download(url), 20 * MB)
    finally:
        await fetcher.aclose()


async def test_a_local_file_is_read_only_from_a_local_source(
    tmp_path: Path, downloader: Downloader
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("local notes")
    url = path.as_uri()
    assert await downloader.fetch(Download(url, local=True), MB) == b"local notes"
    with pytest.raises(DownloadFailed, match="cannot be downloaded"):
        await downloader.fetch(Download(url), MB)  # a platform's URL never reads this machine
    with pytest.raises(MediaTooLarge):
        await downloader.fetch(Download(url, local=True), 5)
