"""The `gateway` command: the composition root, where settings become running parts.

Every command fails with one line on stderr (never a secret) and a non-zero
exit when its configuration is wrong or Redis cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway import logs, shutdown
from gateway.cli import feedback as cli_feedback
from gateway.cli import migrate as cli_migrate
from gateway.cli import settings as cli_settings
from gateway.cli import usage as cli_usage
from gateway.cli.doctor import cmd_doctor, doctor_client
from gateway.cli.sessions import cmd_sessions, positive_days
from gateway.cli.tasks import (
    FORCED_CLEANUP,
    first,
    raise_first_failure,
    stop_event,
    stop_run,
    task,
)
from gateway.cli.tools import cmd_tools
from gateway.cli.users import cmd_users
from gateway.errors import ConfigError, GatewayError, PlatformError
from gateway.http.serve import serve_web
from gateway.inbound.ingest import Ingest
from gateway.platform import Mode, Platform
from gateway.ports import FileSource, Sender
from gateway.settings.env import Settings, load_settings
from gateway.state import embedded_redis, keys, shards
from gateway.state.connection import redact_url, url_password
from gateway.state.console_jobs import ConsoleJobs
from gateway.state.health import Health

log = logging.getLogger("gateway")

RUN_GRACE = 2.0  # after Ctrl-C, what `gateway run` is still writing gets this long to finish


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
        shards.configure(settings.job_shards)
        _setup_logging(settings, quiet=args.command == "run")
        code = asyncio.run(args.handler(settings, args))
    except GatewayError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        code = 2 if isinstance(exc, ConfigError) else 1
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl-C (gateway.shutdown)
        code = shutdown.FORCED_EXIT
    sys.exit(code)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="Chat-platform gateway bot")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="everything in one process")
    run.add_argument("--console", action="store_true", help="also read chat from stdin")
    run.set_defaults(handler=cmd_run)
    commands.add_parser("web", help="the HTTP server").set_defaults(handler=cmd_web)
    worker = commands.add_parser("worker", help="runs turns and side questions")
    worker.add_argument("--concurrency", type=int, default=None)
    worker.set_defaults(handler=cmd_worker)
    for name in ("slack", "telegram", "discord"):
        commands.add_parser(name, help=f"the {name} connection").set_defaults(
            handler=_connect_command(name)
        )
    commands.add_parser("redis", help="only the embedded Redis").set_defaults(handler=cmd_redis)
    commands.add_parser("doctor", help="check Redis, the model, tokens").set_defaults(
        handler=functools.partial(cmd_doctor, platforms=_doctor_platforms)
    )
    sessions = commands.add_parser("sessions", help="inspect, reset and prune sessions")
    sessions.add_argument("action", choices=["list", "show", "reset", "prune"])
    sessions.add_argument("key", nargs="?")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument(
        "--older-than",
        type=positive_days,
        default=None,
        metavar="DAYS",
        help="prune: remove sessions idle for more than DAYS "
        "(default: GATEWAY_SESSION_RETENTION_DAYS)",
    )
    sessions.set_defaults(handler=cmd_sessions)
    tools = commands.add_parser("tools", help="the MCP servers and the tools each offers")
    tools.add_argument("action", choices=["list"])
    tools.add_argument("--json", action="store_true")
    tools.set_defaults(handler=cmd_tools)
    users = commands.add_parser("users", help="pairing: approve codes, list, revoke users")
    users.add_argument("action", choices=["approve", "list", "revoke"])
    users.add_argument("value", nargs="?", metavar="CODE|USER")
    users.add_argument("--json", action="store_true")
    users.set_defaults(handler=cmd_users)
    cli_settings.add_parser(commands)
    cli_usage.add_parser(commands)
    cli_feedback.add_parser(commands)
    cli_migrate.add_parser(commands)
    return parser


def _setup_logging(settings: Settings, *, quiet: bool) -> None:
    level = settings.log_level
    if quiet and "log_level" not in settings.model_fields_set:
        level = "WARNING"  # the all-in-one run shares the terminal with the chat
    secrets = [
        s.get_secret_value()
        for s in (
            settings.api_key,
            settings.slack_bot_token,
            settings.slack_signing_secret,
            settings.slack_app_token,
            settings.slack_client_secret,
            settings.secret_key,
            settings.telegram_bot_token,
            settings.telegram_webhook_secret,
            settings.discord_bot_token,
            settings.admin_token,
        )
        if s is not None
    ]
    redis_password = url_password(settings.redis_url or "")  # redis-py's own log lines too
    logs.setup(level, settings.log_format, [*secrets, *filter(None, [redis_password])])


# --- shared pieces ---------------------------------------------------------------------------


def started() -> None:
    """What start-up built lives as long as the process: frozen, the collector's full
    passes no longer walk it (each such pass stalls the event loop for its length)."""
    gc.freeze()


def _platforms(settings: Settings, redis: aioredis.Redis, mode: Mode) -> list[Platform]:
    import adapters

    found = []
    for name in settings.enabled_platforms:
        platform = adapters.load(name)(settings, redis)
        platform.validate(mode)
        found.append(platform)
    return found


async def _preflight(platforms: Sequence[Platform]) -> None:
    """What each platform keeps in Redis is usable (stored tokens open with their key)."""
    for platform in platforms:
        await platform.preflight()


# --- commands --------------------------------------------------------------------------------


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.console.app import console_routes
    from gateway.http.app import create_app
    from gateway.worker import Worker

    async with keys.open_redis(
        settings.redis_url, settings.data_dir, settings.redis_options
    ) as redis:
        platforms = _platforms(settings, redis, "send")
        for platform in platforms:
            platform.validate("http" if platform.uses_http() else "connect")
        await _preflight(platforms)
        use_console = args.console or not platforms
        senders: dict[str, Sender] = {p.name: p.sender() for p in platforms}
        sources: dict[str, FileSource] = {p.name: p.file_source() for p in platforms}
        jobs = None
        if use_console:
            from adapters import console

            senders["console"] = console.ConsoleSender()
            sources["console"] = console.LocalFileSource()
            # A console's replies must reach this terminal: its jobs go to a stream of
            # its own, which takes over what an earlier run left unanswered.
            jobs = ConsoleJobs(redis, console.SESSION_KEY)
        _banner(settings, platforms, use_console)
        streams = {"console": jobs.stream} if jobs is not None else {}
        ingest = Ingest(settings, redis, streams)
        stopping = shutdown.Shutdown(RUN_GRACE).install()
        stop = stopping.requested
        worker = Worker(settings, redis, senders, streams=streams, sources=sources)
        started()
        working = task(worker.run(stop, grace=RUN_GRACE))
        tasks = [working]
        http = [p for p in platforms if p.uses_http()]
        admin = console_routes(settings, redis, ingest, sorted(senders), platforms)
        if http or admin:  # the console, when configured, is served by the all-in-one run too
            app = create_app(redis, ingest, http, sorted(senders), admin)
            tasks.append(task(serve_web(settings, app, stop)))
        # What only brings work in (connections) just closes on a stop; the console ends
        # by itself, once the line it is sending is sent.
        readers = [task(_hold_connection(p, ingest, redis)) for p in platforms if not p.uses_http()]
        if jobs is not None:
            tasks.append(task(_console(ingest, jobs, worker.ready, stop)))
            readers.append(task(_once(worker.ready, jobs.keep_alive)))
        owed = None
        try:
            await first(*tasks, *readers, task(stop.wait()), cancel=False)
        finally:
            try:
                results = await stop_run(stopping, working, worker.ready, tasks, readers)
            finally:
                for sender in senders.values():
                    await sender.aclose()
                if jobs is not None:
                    owed = await jobs.end(within=FORCED_CLEANUP)
        raise_first_failure(results)
    if owed is not None:
        print(f"gateway: {owed}", file=sys.stderr)
        return 1
    return 0


async def _console(
    ingest: Ingest, jobs: ConsoleJobs, ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """The console, once the worker reads its stream (registered then: a start that
    stalls the loop for seconds does not look like a run that is gone); its end of
    input ends the run."""
    from adapters import console

    await first(task(ready.wait()), task(stop.wait()))
    if not stop.is_set():
        await jobs.register()
        await console.run(ingest, stop=stop, jobs=jobs)
    stop.set()


async def _once(ready: asyncio.Event, then: Callable[[], Awaitable[None]]) -> None:
    await ready.wait()
    await then()


async def _hold_connection(platform: Platform, ingest: Ingest, redis: aioredis.Redis) -> None:
    await platform.startup()
    try:
        await platform.connect(ingest, Health(redis, f"{platform.name}"))
    finally:
        await platform.shutdown()


def _banner(settings: Settings, platforms: Sequence[Platform], use_console: bool) -> None:
    lines = ["gateway: running everything in one process"]
    if settings.redis_url is None:
        lines.append(
            f"  redis: embedded, data in {settings.data_dir}/ (set REDIS_URL to use your own)"
        )
    else:
        lines.append(f"  redis: {redact_url(settings.redis_url)}")
    if settings.uses_echo:
        lines.append(
            "  model: echo, an offline stand-in that repeats your message (set "
            "GATEWAY_MODEL, e.g. openai/gpt-4o-mini, and its API key)"
        )
    else:
        lines.append(f"  model: {settings.model}")
    names = [p.name for p in platforms] + (["console"] if use_console else [])
    lines.append(f"  platforms: {', '.join(names)}")
    if not platforms:
        lines.append(
            "  (no platform token is set: set SLACK_BOT_TOKEN, TELEGRAM_BOT_TOKEN or "
            "DISCORD_BOT_TOKEN to connect one)"
        )
    if use_console:
        lines.append("  type a message and press Enter; /help lists the commands")
    print("\n".join(lines), file=sys.stderr, flush=True)


async def cmd_web(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.console.app import console_routes
    from gateway.http.app import create_app

    async with keys.open_redis(
        settings.redis_url, settings.data_dir, settings.redis_options
    ) as redis:
        platforms = [p for p in _platforms(settings, redis, "http") if p.uses_http()]
        await _preflight(platforms)
        ingest = Ingest(settings, redis)
        names = ["console", *settings.enabled_platforms]
        admin = console_routes(settings, redis, ingest, names, platforms)
        app = create_app(redis, ingest, platforms, names, admin)
        served = [p.name for p in platforms] + (["the console on /admin"] if admin else [])
        what = ", ".join(served) or "health and metrics only"
        log.info("web listening on %s:%d (%s)", settings.host, settings.port, what)
        started()
        await serve_web(settings, app, stop_event())
    return 0


async def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.worker import Worker

    async with keys.open_redis(
        settings.redis_url, settings.data_dir, settings.redis_options
    ) as redis:
        platforms = _platforms(settings, redis, "send")
        if not platforms:
            raise ConfigError(
                "no platform is configured for this worker: set SLACK_BOT_TOKEN, "
                "TELEGRAM_BOT_TOKEN or DISCORD_BOT_TOKEN"
            )
        await _preflight(platforms)
        senders = {p.name: p.sender() for p in platforms}
        sources = {p.name: p.file_source() for p in platforms}
        worker = Worker(settings, redis, senders, concurrency=args.concurrency, sources=sources)
        try:
            started()
            await worker.run(stop_event())
        finally:
            for sender in senders.values():
                await sender.aclose()
    return 0


def _connect_command(
    name: str,
) -> Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]:
    async def command(settings: Settings, args: argparse.Namespace) -> int:
        import adapters

        async with keys.open_redis(
            settings.redis_url, settings.data_dir, settings.redis_options
        ) as redis:
            if name not in settings.enabled_platforms:
                raise ConfigError(f"{name.upper()}_BOT_TOKEN is required for `gateway {name}`")
            platform = adapters.load(name)(settings, redis)
            platform.validate("connect")
            ingest = Ingest(settings, redis)
            stop = stop_event()
            await first(task(_hold_connection(platform, ingest, redis)), task(stop.wait()))
        return 0

    return command


async def cmd_redis(settings: Settings, args: argparse.Namespace) -> int:
    if settings.redis_url is not None:
        raise ConfigError("REDIS_URL is set: `gateway redis` starts only the embedded server")
    embedded = embedded_redis.EmbeddedRedis(settings.data_dir)
    url = embedded.start()
    if not embedded.owner:
        print(url, flush=True)
        return 0
    print(url, flush=True)
    try:
        await stop_event().wait()
    finally:
        embedded.stop()
    return 0


async def _doctor_platforms(settings: Settings) -> list[tuple[str, bool, str]]:
    import adapters

    results = []
    async with doctor_client(settings) as client:
        for name in settings.enabled_platforms:
            try:
                platform = adapters.load(name)(settings, client)
                results.append((name, True, await platform.doctor()))
            except (GatewayError, PlatformError, RedisError) as exc:
                results.append((name, False, str(exc)))
    return results


if __name__ == "__main__":
    main()
