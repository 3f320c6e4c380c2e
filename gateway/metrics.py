"""Metrics kept in Redis, so every worker on every machine adds to the same numbers.

`/metrics` on any `gateway web` reads them back and renders the Prometheus
text format through prometheus_client's own exposition code.

A worker gathers its counters for `GATHER` seconds and writes them in one call
(`Metrics(redis, gather=GATHER)`): at ten turns a second that is one round trip
where there were ten. `/metrics` is that much behind at most; a worker that is
killed loses what it held (counters, not messages: Prometheus' own counters are
lost with their process the same way), and one that stops writes them on its way
out (`aclose`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.state.counters import BUMP, Counters
from gateway.state.keys import GROUP, Keys

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOOL_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
GATHER = 1.0  # seconds a worker's counters wait to be written together
CLOSE_TIMEOUT = 2.0  # how long the last write may take on the way out


class Metrics:
    """Writers used by workers and `gateway web`: one `bump.lua` call per recorded turn,
    tool call or download, or with `gather` one per that many seconds for all of them
    (a pipeline of one command a field costs the loop the packing and parsing of each)."""

    def __init__(self, redis: Redis, gather: float = 0.0) -> None:
        self.redis = redis
        self._bump = BUMP.bind(redis)
        self.gather = gather
        self._held = Counters()
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None

    async def flush(self) -> None:
        """Write what is held now. A write Redis refuses is dropped with a log line: those
        counts are lost (sent again, a write whose answer was lost would count twice)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, Counters()
        try:
            await held.write(self._bump)
        except RedisError as exc:
            log.warning("metrics not written, dropped (%s)", exc)

    async def aclose(self) -> None:
        """Write what is held, on the way out (for CLOSE_TIMEOUT at most)."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                if self._writing is not None:
                    await asyncio.shield(self._writing)
                await self.flush()
        except TimeoutError:
            log.warning("metrics not written on the way out: Redis did not answer in time")

    async def _write(self, counters: Counters) -> None:
        if not self.gather:
            await counters.write(self._bump)
            return
        self._held.merge(counters)
        if self._timer is None and self._writing is None:
            self._timer = asyncio.get_running_loop().call_later(self.gather, self._due)

    def _due(self) -> None:
        self._timer = None
        self._writing = asyncio.create_task(self.flush())
        self._writing.add_done_callback(self._written)

    def _written(self, _: asyncio.Task[None]) -> None:
        self._writing = None
        if self._held and self._timer is None:  # what came while it was on its way
            self._timer = asyncio.get_running_loop().call_later(self.gather, self._due)

    async def turn(
        self,
        platform: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        outcome: str,
        *,
        early: str = "",
    ) -> None:
        """One finished turn; `early` says what became of a call started before its
        claim ("used", "discarded"), when there was one."""
        bucket = next((str(b) for b in LATENCY_BUCKETS if seconds <= b), "+Inf")
        counters = Counters()
        counters.hincrby(Keys.METRICS, f"turns|{platform}|{outcome}", 1)
        counters.hincrby(Keys.METRICS, f"latency_bucket|{bucket}", 1)
        counters.hincrbyfloat(Keys.METRICS, "latency_sum", seconds)
        counters.hincrby(Keys.METRICS, "tokens|prompt", prompt_tokens)
        counters.hincrby(Keys.METRICS, "tokens|completion", completion_tokens)
        if early:
            counters.hincrby(Keys.METRICS, f"early|{early}", 1)
        await self._write(counters)

    async def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        """One MCP tool call by its public name and outcome (`gateway.tools.results.OUTCOMES`)."""
        bucket = next((str(b) for b in TOOL_LATENCY_BUCKETS if seconds <= b), "+Inf")
        counters = Counters()
        counters.hincrby(Keys.METRICS, f"tools|{tool}|{outcome}", 1)
        counters.hincrby(Keys.METRICS, f"tool_latency_bucket|{bucket}", 1)
        counters.hincrbyfloat(Keys.METRICS, "tool_latency_sum", seconds)
        await self._write(counters)

    async def download(self, outcome: str, size: int) -> None:
        """One attachment download by outcome ("ok", "too_large", "timeout", "failed"),
        and the bytes it brought."""
        counters = Counters()
        counters.hincrby(Keys.METRICS, f"downloads|{outcome}", 1)
        if size:
            counters.hincrby(Keys.METRICS, "download_bytes|total", size)
        await self._write(counters)

    async def count(self, name: str, label: str, amount: int = 1) -> None:
        if not self.gather:
            await self.redis.hincrby(Keys.METRICS, f"{name}|{label}", amount)
            return
        counters = Counters()
        counters.hincrby(Keys.METRICS, f"{name}|{label}", amount)
        await self._write(counters)


async def snapshot(redis: Redis, platforms: Sequence[str]) -> tuple[dict[str, str], dict[str, int]]:
    """The stored counters, and the job queue depth by platform."""
    values = cast(dict[str, str], await redis.hgetall(Keys.METRICS))
    depth: dict[str, int] = {}
    for platform in platforms:
        lags = [await _lag(redis, stream) for stream in Keys.job_streams(platform)]
        if any(lag is not None for lag in lags):
            depth[platform] = sum(lag or 0 for lag in lags)
    return values, depth


async def _lag(redis: Redis, stream: str) -> int | None:
    """Jobs not yet read or not yet completed in `stream`; None when it does not exist."""
    if not await redis.exists(stream):
        return None
    groups = await redis.xinfo_groups(stream)
    return sum(
        int(g.get("lag") or 0) + int(g.get("pending") or 0)
        for g in groups
        if g.get("name") == GROUP
    )


class SnapshotCollector(Collector):
    """Renders one snapshot; built per scrape."""

    def __init__(self, values: dict[str, str], depth: dict[str, int]) -> None:
        self.values, self.depth = values, depth

    def collect(self) -> Iterator[Metric]:
        turns = CounterMetricFamily(
            "gateway_turns", "Main turns finished", labels=["platform", "outcome"]
        )
        errors = CounterMetricFamily("gateway_errors", "Errors by kind", labels=["kind"])
        tokens = CounterMetricFamily("gateway_model_tokens", "Model tokens", labels=["kind"])
        side = CounterMetricFamily(
            "gateway_side_questions", "Side questions answered", labels=["outcome"]
        )
        early = CounterMetricFamily(
            "gateway_early_starts",
            "Model calls started before the turn's claim returned, by what became of them",
            labels=["outcome"],
        )
        tools = CounterMetricFamily(
            "gateway_tool_calls", "MCP tool calls", labels=["tool", "outcome"]
        )
        downloads = CounterMetricFamily(
            "gateway_media_downloads", "Attachment downloads", labels=["outcome"]
        )
        download_bytes = CounterMetricFamily(
            "gateway_media_download_bytes", "Bytes of attachments downloaded"
        )
        download_bytes.add_metric([], float(self.values.get("download_bytes|total", 0)))
        rate_limited = CounterMetricFamily(
            "gateway_rate_limited_messages",
            "Messages refused over a rate limit",
            labels=["platform"],
        )
        replies = CounterMetricFamily(
            "gateway_replies",
            "Replies delivered, by the mechanism they ended with (edit, stream, draft)",
            labels=["platform", "mechanism"],
        )
        fallbacks = CounterMetricFamily(
            "gateway_stream_fallbacks",
            "Replies moved from the platform's streaming surface to edit-in-place",
            labels=["platform", "code"],
        )
        # A gauge: a changed vote moves from one value to the other, so a value's count
        # may go down. Never by user (the CLI's log names the clicker).
        feedback = GaugeMetricFamily(
            "gateway_feedback_total",
            "Standing thumbs up and down on replies",
            labels=["platform", "workspace", "model", "value"],
        )
        usage = _UsageFamilies()
        for field, raw in self.values.items():
            name, _, rest = field.partition("|")
            if name == "turns":
                platform, _, outcome = rest.partition("|")
                turns.add_metric([platform, outcome], float(raw))
            elif name == "errors":
                errors.add_metric([rest], float(raw))
            elif name == "tokens":
                tokens.add_metric([rest], float(raw))
            elif name == "side":
                side.add_metric([rest], float(raw))
            elif name == "early":
                early.add_metric([rest], float(raw))
            elif name == "downloads":
                downloads.add_metric([rest], float(raw))
            elif name == "rate_limited":
                rate_limited.add_metric([rest], float(raw))
            elif name in ("replies", "stream_fallbacks"):
                platform, _, what = rest.partition("|")
                (replies if name == "replies" else fallbacks).add_metric(
                    [platform, what], float(raw)
                )
            elif name == "tools":
                tool, _, outcome = rest.rpartition("|")
                tools.add_metric([tool, outcome], float(raw))
            elif name == "feedback":
                platform, workspace, value, model = rest.split("|", 3)
                feedback.add_metric([platform, workspace, model, value], float(raw))
            elif name.startswith("usage_"):
                usage.add(name, rest, float(raw))
        yield from (turns, errors, tokens, side, early, tools, downloads, download_bytes)
        yield from (rate_limited, replies, fallbacks, feedback)
        yield from (usage.tokens, usage.cost, usage.unpriced)
        yield self._histogram("", LATENCY_BUCKETS, "gateway_turn_latency_seconds", "Main turn")
        yield self._histogram(
            "tool_", TOOL_LATENCY_BUCKETS, "gateway_tool_latency_seconds", "Tool call"
        )
        yield self._depth()

    def _histogram(
        self, prefix: str, bounds: Sequence[float], metric: str, what: str
    ) -> HistogramMetricFamily:
        cumulative, buckets = 0.0, []
        for bound in (*bounds, "+Inf"):
            cumulative += float(self.values.get(f"{prefix}latency_bucket|{bound}", 0))
            buckets.append((str(bound), cumulative))
        return HistogramMetricFamily(
            metric,
            f"{what} duration",
            buckets=buckets,
            sum_value=float(self.values.get(f"{prefix}latency_sum", 0)),
        )

    def _depth(self) -> GaugeMetricFamily:
        gauge = GaugeMetricFamily(
            "gateway_queue_depth", "Jobs waiting or running", labels=["platform"]
        )
        for platform, depth in self.depth.items():
            gauge.add_metric([platform], depth)
        return gauge


class _UsageFamilies:
    """Tokens and cost of every model call (`gateway.spend.usage`), by platform, workspace and
    model: the model is the label last, so a `|` in its name stays in it."""

    LABELS = ("platform", "workspace", "model")

    def __init__(self) -> None:
        self.tokens = CounterMetricFamily(
            "gateway_usage_tokens", "Model tokens of every call", labels=["kind", *self.LABELS]
        )
        self.cost = CounterMetricFamily(
            "gateway_usage_cost_usd", "Cost of the calls with a known price", labels=self.LABELS
        )
        self.unpriced = CounterMetricFamily(
            "gateway_usage_unpriced_calls", "Calls whose cost is unknown", labels=self.LABELS
        )

    def add(self, name: str, rest: str, value: float) -> None:
        if name == "usage_tokens":
            kind, _, rest = rest.partition("|")
            self.tokens.add_metric([kind, *rest.split("|", 2)], value)
        elif name == "usage_cost":
            self.cost.add_metric(rest.split("|", 2), value)
        elif name == "usage_unpriced":
            self.unpriced.add_metric(rest.split("|", 2), value)
