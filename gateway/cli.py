"""The `gateway` command: the composition root, where settings become running parts.

Every command fails with one line on stderr (never a secret) and a non-zero
exit when its configuration is wrong or Redis cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway import logs, shutdown, store
from gateway.config import Settings, load_settings
from gateway.errors import ConfigError, GatewayError, PlatformError
from gateway.health import Health
from gateway.ingest import Ingest
from gateway.ports import FileSource, Mode, Platform, Sender

log = logging.getLogger("gateway")

RUN_GRACE = 2.0  # after Ctrl-C, what `gateway run` is still writing gets this long to finish
FORCED_CLEANUP = 0.5  # after a second Ctrl-C, what the run's parts still do on their way out


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
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
        handler=cmd_doctor
    )
    sessions = commands.add_parser("sessions", help="inspect, reset and prune sessions")
    sessions.add_argument("action", choices=["list", "show", "reset", "prune"])
    sessions.add_argument("key", nargs="?")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument(
        "--older-than",
        type=_days,
        default=None,
        metavar="DAYS",
        help="prune: remove sessions idle for more than DAYS "
        "(default: GATEWAY_SESSION_RETENTION_DAYS)",
    )
    sessions.set_defaults(handler=cmd_sessions)
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
            settings.telegram_bot_token,
            settings.telegram_webhook_secret,
            settings.discord_bot_token,
        )
        if s is not None
    ]
    logs.setup(level, settings.log_format, secrets)


# --- shared pieces ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """Redis from REDIS_URL, or the embedded server (stopped again on exit)."""
    embedded = None
    url = settings.redis_url
    if url is None:
        embedded = store.EmbeddedRedis(settings.data_dir)
        url = embedded.start()
    client = store.connect(url)
    try:
        await store.ping(client, url)
        yield client
    finally:
        await client.aclose()
        if embedded is not None:
            embedded.stop()


def _platforms(settings: Settings, redis: aioredis.Redis, mode: Mode) -> list[Platform]:
    import adapters

    found = []
    for name in settings.enabled_platforms:
        platform = adapters.load(name)(settings, redis)
        platform.validate(mode)
        found.append(platform)
    return found


def _stop_event() -> asyncio.Event:
    """Set by the first SIGINT, SIGTERM or SIGHUP; the second stops the command at once."""
    return shutdown.Shutdown().install().requested


async def _serve_web(settings: Settings, app: Any, stop: asyncio.Event) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # our own handlers set `stop`; uvicorn must not take them over

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = Server(config)
    serving = asyncio.create_task(server.serve())
    await _first(serving, asyncio.create_task(stop.wait()), cancel=False)
    server.should_exit = True
    await serving


async def _first(*tasks: asyncio.Task[Any], cancel: bool = True) -> None:
    """Wait for the first task to end; cancel the rest (unless told not to); re-raise a failure."""
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    if cancel:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


def _raise_first_failure(results: Sequence[object]) -> None:
    for result in results:
        if isinstance(result, GatewayError):
            raise result


def _task(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    return asyncio.create_task(coro)


# --- commands --------------------------------------------------------------------------------


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.web import create_app
    from gateway.worker import Worker

    async with _redis(settings) as redis:
        platforms = _platforms(settings, redis, "send")
        for platform in platforms:
            platform.validate("http" if platform.uses_http() else "connect")
        use_console = args.console or not platforms
        senders: dict[str, Sender] = {p.name: p.sender() for p in platforms}
        sources: dict[str, FileSource] = {}
        if use_console:
            from adapters import console

            senders["console"] = console.ConsoleSender()
            sources["console"] = console.LocalFileSource()
        _banner(settings, platforms, use_console)
        # A console's replies must reach this terminal: its jobs go to a stream of its own.
        streams = {"console": store.Keys.jobs(f"console:{secrets.token_hex(4)}")}
        ingest = Ingest(settings, redis, streams)
        stopping = shutdown.Shutdown(RUN_GRACE).install()
        stop = stopping.requested
        worker = Worker(settings, redis, senders, streams=streams, sources=sources)
        working = _task(worker.run(stop, grace=RUN_GRACE))
        tasks = [working]
        http = [p for p in platforms if p.uses_http()]
        if http:
            app = create_app(redis, ingest, http, sorted(senders))
            tasks.append(_task(_serve_web(settings, app, stop)))
        # What only brings work in (connections, the console) just closes on a stop.
        readers = [
            _task(_hold_connection(p, ingest, redis)) for p in platforms if not p.uses_http()
        ]
        if use_console:
            readers.append(_task(_console(ingest, worker.ready, stop)))
        try:
            await _first(*tasks, *readers, _task(stop.wait()), cancel=False)
        finally:
            try:
                results = await _stop_run(stopping, working, worker.ready, tasks, readers)
            finally:
                for sender in senders.values():
                    await sender.aclose()
                with contextlib.suppress(GatewayError, RedisError, OSError):
                    await redis.delete(streams["console"])
        _raise_first_failure(results)
    return 0


async def _console(ingest: Ingest, ready: asyncio.Event, stop: asyncio.Event) -> None:
    """The console, once the worker reads its stream; its end of input ends the run."""
    from adapters import console

    await ready.wait()
    await console.run(ingest)
    stop.set()


async def _stop_run(
    stopping: shutdown.Shutdown,
    working: asyncio.Task[None],
    ready: asyncio.Event,
    tasks: Sequence[asyncio.Task[Any]],
    readers: Sequence[asyncio.Task[Any]],
) -> list[object]:
    """Stop every part of a run: the worker and web finish what they hold (the worker
    for RUN_GRACE), readers close. A second Ctrl-C (this task cancelled) cuts it short."""
    stopping.requested.set()
    for reader in readers:
        reader.cancel()
    if not ready.is_set():
        working.cancel()  # still starting (seconds of import): it holds nothing yet
    parts = [*tasks, *readers]
    try:
        if stopping.forced:
            raise asyncio.CancelledError  # it came before this stop began
        await asyncio.wait(parts)
    except asyncio.CancelledError:
        # Their own clean-up (leases given up, the model processes stopped) takes
        # moments, and needs Redis still there; what is left is cancelled on exit.
        for part in parts:
            part.cancel()
        await asyncio.wait(parts, timeout=FORCED_CLEANUP)
        raise
    return [_outcome(part) for part in parts]


def _outcome(task: asyncio.Task[Any]) -> object:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


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
        lines.append(f"  redis: {store.redact_url(settings.redis_url)}")
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
    from gateway.web import create_app

    async with _redis(settings) as redis:
        platforms = [p for p in _platforms(settings, redis, "http") if p.uses_http()]
        ingest = Ingest(settings, redis)
        app = create_app(redis, ingest, platforms, ["console", *settings.enabled_platforms])
        log.info(
            "web listening on %s:%d (%s)",
            settings.host,
            settings.port,
            ", ".join(p.name for p in platforms) or "health and metrics only",
        )
        await _serve_web(settings, app, _stop_event())
    return 0


async def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.worker import Worker

    async with _redis(settings) as redis:
        platforms = _platforms(settings, redis, "send")
        if not platforms:
            raise ConfigError(
                "no platform is configured for this worker: set SLACK_BOT_TOKEN, "
                "TELEGRAM_BOT_TOKEN or DISCORD_BOT_TOKEN"
            )
        senders = {p.name: p.sender() for p in platforms}
        worker = Worker(settings, redis, senders, concurrency=args.concurrency)
        try:
            await worker.run(_stop_event())
        finally:
            for sender in senders.values():
                await sender.aclose()
    return 0


def _connect_command(
    name: str,
) -> Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]:
    async def command(settings: Settings, args: argparse.Namespace) -> int:
        import adapters

        async with _redis(settings) as redis:
            if name not in settings.enabled_platforms:
                raise ConfigError(f"{name.upper()}_BOT_TOKEN is required for `gateway {name}`")
            platform = adapters.load(name)(settings, redis)
            platform.validate("connect")
            ingest = Ingest(settings, redis)
            stop = _stop_event()
            await _first(_task(_hold_connection(platform, ingest, redis)), _task(stop.wait()))
        return 0

    return command


async def cmd_redis(settings: Settings, args: argparse.Namespace) -> int:
    if settings.redis_url is not None:
        raise ConfigError("REDIS_URL is set: `gateway redis` starts only the embedded server")
    embedded = store.EmbeddedRedis(settings.data_dir)
    url = embedded.start()
    if not embedded.owner:
        print(url, flush=True)
        return 0
    print(url, flush=True)
    try:
        await _stop_event().wait()
    finally:
        embedded.stop()
    return 0


async def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.models import ModelCall, Models

    results: list[tuple[str, bool, str]] = []
    url = settings.redis_url
    if url is None:
        results.append(("redis", True, "embedded (REDIS_URL unset); started on demand"))
    else:
        client = store.connect(url)
        try:
            await store.ping(client, url)
            results.append(("redis", True, store.redact_url(url)))
        except GatewayError as exc:
            results.append(("redis", False, str(exc)))
        finally:
            await client.aclose()
    try:
        call = ModelCall(
            settings.model,
            [{"role": "user", "content": "ping"}],
            timeout=min(30.0, settings.model_timeout),
            max_tokens=5,
        )
        await Models.for_settings(settings).complete(call)
        results.append(("model", True, settings.model))
    except GatewayError as exc:
        results.append(("model", False, f"{settings.model}: {exc}"))
    results.extend(await _doctor_platforms(settings))
    for name, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {name:<9} {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


async def _doctor_platforms(settings: Settings) -> list[tuple[str, bool, str]]:
    import adapters

    results = []
    client = aioredis.Redis()  # platforms are checked without touching Redis
    for name in settings.enabled_platforms:
        try:
            platform = adapters.load(name)(settings, client)
            results.append((name, True, await platform.doctor()))
        except (GatewayError, PlatformError) as exc:
            results.append((name, False, str(exc)))
    await client.aclose()
    return results


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days > 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days above 0, not {text!r}")
    return days


async def cmd_sessions(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.session import SessionStore

    if args.action in {"show", "reset"} and not args.key:
        raise ConfigError(f"`gateway sessions {args.action}` needs a session KEY")
    if args.action == "prune":
        return await _prune_sessions(settings, args)
    async with _redis(settings) as redis:
        sessions = SessionStore(redis)
        if args.action == "list":
            rows = []
            for key, updated in await sessions.list_sessions(limit=1000):
                meta = await sessions.meta(key)
                rows.append(
                    {
                        "key": key,
                        "updated": updated,
                        "messages": int(meta.get("answered", 0) or 0),
                        "turns": int(meta.get("turns", 0) or 0),
                    }
                )
            _print_rows(rows, args.json)
        elif args.action == "show":
            entries = await sessions.history(args.key) + await sessions.inbox(args.key)
            if args.json:
                print(json.dumps(entries, ensure_ascii=False, indent=2))
            for entry in [] if args.json else entries:
                who = (entry.get("speaker") or {}).get("name") or entry.get("role")
                print(f"[{entry.get('role')}] {who}: {entry.get('text')}")
        else:
            await sessions.reset(args.key)
            print(json.dumps({"reset": args.key}) if args.json else f"reset {args.key}")
    return 0


async def _prune_sessions(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.retention import DAY, Retention

    days = args.older_than or settings.session_retention_days
    if days is None:
        raise ConfigError(
            "`gateway sessions prune` needs GATEWAY_SESSION_RETENTION_DAYS or --older-than DAYS"
        )
    async with _redis(settings) as redis:
        result = await Retention(redis, days * DAY).prune()
    if args.json:
        print(json.dumps({"removed": result.removed, "kept": result.kept, "older_than_days": days}))
        return 0
    noun = "session" if result.removed == 1 else "sessions"
    busy = f"; {result.kept} kept, still busy or active again" if result.kept else ""
    print(f"removed {result.removed} {noun} idle for more than {days:g} days{busy}")
    return 0


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
        print(f"{row['key']}  {row['messages']} messages  {row['turns']} turns  {when}")


if __name__ == "__main__":
    main()
