"""How long rendering and splitting a long reply takes, per platform and shape of text.

A streamed reply is rendered and split on every flush, on the worker's event
loop: a converter or splitter that is quadratic on some input stalls every turn
of that worker. For each platform and each shape of `tests/support/adversarial.py`
this times one render plus one `split_markdown` (the platform's real limit and
the sender's own measure) at each size, and prints the ratio of the largest size
to the smallest (linear: the size ratio, 4 for 25k -> 100k; quadratic: 16) and
the ratio to ordinary Markdown of the same size, run in the same process.

    python bench/render.py [--sizes 25000,50000,100000] [--shapes star-word,mix]
                           [--platforms slack,telegram,discord] [--repeat 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.discord import render as discord_render  # noqa: E402
from adapters.discord.sender import DiscordSender  # noqa: E402
from adapters.slack.client import web_client  # noqa: E402
from adapters.slack.render import to_mrkdwn  # noqa: E402
from adapters.slack.sender import SlackSender  # noqa: E402
from adapters.telegram import render as markup  # noqa: E402
from adapters.telegram.client import BotClient, prepare_process  # noqa: E402
from adapters.telegram.sender import TelegramSender  # noqa: E402
from gateway.delivery.splitting import split_markdown  # noqa: E402
from gateway.messages import Address  # noqa: E402
from tests.support.adversarial import SHAPES, adversarial  # noqa: E402

ADDRESS = Address(platform="bench", workspace="w", channel="1")
ORDINARY = (
    "## A heading\n\nSome **bold** text, some *italic* text, a `code span` and a "
    "[link](https://example.com/a?b=1&c=2).\n\n- one item\n- two *items*\n  - nested\n\n"
    "```python\ndef f(x):\n    return x < 2 and x > 0\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
)


@dataclass(frozen=True)
class Target:
    name: str
    render: Callable[[str], str]
    measure: Callable[[str], int]
    limit: int


def targets() -> list[Target]:
    """The three platforms, measured by their real senders (no network is touched)."""
    slack = SlackSender(web_client("xoxb-bench", "http://127.0.0.1:9/api/"), edit_interval=1.0)
    telegram = TelegramSender(
        BotClient.build("1:bench", "http://127.0.0.1:9/bot"),
        edit_interval=1.0,
        group_edit_interval=3.0,
    )
    discord = DiscordSender("bench", edit_interval=1.0)
    return [
        Target("slack", to_mrkdwn, slack.measure, slack.limits(ADDRESS).max_length),
        Target("telegram", markup.render, telegram.measure, telegram.limits(ADDRESS).max_length),
        Target(
            "discord", discord_render.render, discord.measure, discord.limits(ADDRESS).max_length
        ),
    ]


def seconds(work: Callable[[], object], repeat: int) -> float:
    """The best of `repeat` runs: load on the machine slows a run, never speeds one."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def timings(target: Target, shape: str, sizes: list[int], repeat: int) -> list[float]:
    """Render plus split of the shape at each size (the text is made before the clock runs)."""
    return [
        seconds(partial(render_and_split, target, text_of(shape, size)), repeat) for size in sizes
    ]


def render_and_split(target: Target, text: str) -> None:
    target.render(text)
    split_markdown(text, target.limit, target.measure)


def text_of(shape: str, size: int) -> str:
    if shape == "ordinary":
        return (ORDINARY * (size // len(ORDINARY) + 1))[:size]
    return adversarial(shape, size)


def main() -> None:
    prepare_process()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="25000,50000,100000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--platforms", default="slack,telegram,discord")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    chosen = [t for t in targets() if t.name in args.platforms.split(",")]
    print(
        f"render + split, ms; ratio of {sizes[-1] // 1000}k to {sizes[0] // 1000}k "
        f"(linear {sizes[-1] / sizes[0]:.0f}, quadratic {(sizes[-1] / sizes[0]) ** 2:.0f}); "
        "ratio to ordinary Markdown at the largest size"
    )
    print(
        f"{'platform':<9} {'shape':<18} "
        + " ".join(f"{size // 1000:>6}k" for size in sizes)
        + f" {'growth':>7} {'/ordinary':>9}"
    )
    for target in chosen:
        ordinary = timings(target, "ordinary", sizes, args.repeat)
        print(line(target.name, "ordinary", ordinary, ordinary[-1]), flush=True)
        for shape in args.shapes.split(","):
            times = timings(target, shape, sizes, args.repeat)
            print(line(target.name, shape, times, ordinary[-1]), flush=True)


def line(platform: str, shape: str, times: list[float], ordinary: float) -> str:
    figures = " ".join(f"{t * 1000:7.1f}" for t in times)
    return (
        f"{platform:<9} {shape:<18} {figures} {times[-1] / max(times[0], 1e-6):7.1f} "
        f"{times[-1] / max(ordinary, 1e-6):9.2f}"
    )


if __name__ == "__main__":
    main()
