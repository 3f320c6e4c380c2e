"""Redis: the connection and every key name the gateway uses.

Every multi-key script and transaction names keys of one hash tag, so each runs
on one slot of a Redis Cluster (docs/architecture.md, "Keys on a cluster"):

- a session's keys, its shard's job streams, session index, channel indexes and
  settings version share the shard's tag (`gateway/state/shards.py`);
- what is global (settings, metrics, feedback, pairing, approvals' deadlines,
  health, the layout) shares `{gw}`;
- a spend key's day and month share their owner's tag; a conversation's and its
  user's rate buckets share their workspace's.

Which layout a database holds is recorded in it (`Keys.LAYOUT`) and checked when a
process opens it (`ensure_layout`): version 1 named a session's keys by the session
(`gw:{<session key>}:…`), kept one job stream per platform and left the global keys
untagged; version 2 left Slack's installations untagged; version 3 is this one, for a
given number of shards. A process refuses (LayoutMismatch) a database of an older
version or of another shard count: its keys would not be found, and new ones would be
written beside them (a version 2 database with no installations is taken as version 3).
`gateway migrate` moves an older database (`gateway/state/migrate.py`).

Long because: every key name is here, in one table (`Keys`), and the check of the
layout they form (`ensure_layout`) sits with the connection every process opens
through `open_redis`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisError

from gateway.errors import LayoutMismatch, StoreUnavailable
from gateway.state import connection, shards
from gateway.state.connection import RedisOptions, redact_text, redact_url
from gateway.state.embedded_redis import EmbeddedRedis

PREFIX = "gw"
GLOBAL = f"{PREFIX}:{{gw}}"  # the keys every process shares, in one slot
GROUP = "gw-workers"
DEDUPE_TTL = 26 * 3600  # longer than Telegram's 24 h and Slack's ~5 min retry windows


class Keys:
    """Key names, in one place."""

    @staticmethod
    def session(session_key: str, part: str) -> str:
        return f"{PREFIX}:{{{shards.session_tag(session_key)}}}:{session_key}:{part}"

    @staticmethod
    def shard(shard: int, part: str) -> str:
        """A key of a shard's own (its job streams, its indexes), in the shard's slot."""
        return f"{PREFIX}:{{{shards.tag(shard)}}}:{part}"

    @staticmethod
    def history(session_key: str) -> str:
        return Keys.session(session_key, "history")

    @staticmethod
    def inbox(session_key: str) -> str:
        return Keys.session(session_key, "inbox")

    @staticmethod
    def meta(session_key: str) -> str:
        return Keys.session(session_key, "meta")

    @staticmethod
    def lease(session_key: str) -> str:
        return Keys.session(session_key, "lease")

    @staticmethod
    def queued(session_key: str) -> str:
        return Keys.session(session_key, "queued")

    @staticmethod
    def live(session_key: str) -> str:
        return Keys.session(session_key, "live")

    @staticmethod
    def replies(session_key: str) -> str:
        return Keys.session(session_key, "replies")

    @staticmethod
    def injections(session_key: str) -> str:
        return Keys.session(session_key, "injections")

    @staticmethod
    def turn_injections(session_key: str) -> str:
        return Keys.session(session_key, "injections:turn")

    @staticmethod
    def segments(session_key: str) -> str:
        return Keys.session(session_key, "segments")

    @staticmethod
    def side_in_flight(session_key: str) -> str:
        return Keys.session(session_key, "side")

    @staticmethod
    def compressing(session_key: str) -> str:
        return Keys.session(session_key, "compressing")

    @staticmethod
    def media(session_key: str) -> str:
        """The session's processed attachments (a hash, `gateway.media.store`)."""
        return Keys.session(session_key, "media")

    @staticmethod
    def album(session_key: str) -> str:
        """An album's items still arriving (PX, refreshed by each): claims wait for it."""
        return Keys.session(session_key, "album")

    @staticmethod
    def seen(session_key: str, event_id: str) -> str:
        return Keys.session(session_key, f"seen:{event_id}")

    @staticmethod
    def approvals(session_key: str) -> str:
        """A hash of the session's approval requests (`gateway/approvals/store.py` names its
        fields): one key per session, so a reset and retention remove them by name."""
        return Keys.session(session_key, "approvals")

    @staticmethod
    def side_answers(session_key: str) -> str:
        """The newest `/btw` side answers given in the session (capped list, oldest first):
        never part of its history, kept for the operator console to show beside it."""
        return Keys.session(session_key, "side_answers")

    @staticmethod
    def rate(session_key: str) -> str:
        """The conversation's rate-limit bucket (`gateway/inbound/rate_limit.py`); not a part a
        reset removes, so `/reset` does not refill it. It expires once full. Under its
        workspace's tag, beside its users' buckets (one script takes from both)."""
        return f"{PREFIX}:{{{_workspace_tag(session_key)}}}:rate:conversation:{session_key}"

    # The parts of a session that a reset removes, by the names the reset script takes.
    _PARTS: ClassVar[dict[str, str]] = {
        "meta": "meta",
        "history": "history",
        "inbox": "inbox",
        "live": "live",
        "replies": "replies",
        "injections": "injections",
        "turn_injections": "injections:turn",
        "segments": "segments",
        "compressing": "compressing",
        "approvals": "approvals",
        "media": "media",
        "side_answers": "side_answers",
    }

    @staticmethod
    def parts(session_key: str) -> dict[str, str]:
        """Every key of a session except dedupe marks (reset keeps those), by name."""
        return {name: Keys.session(session_key, part) for name, part in Keys._PARTS.items()}

    @staticmethod
    def all_parts(session_key: str) -> list[str]:
        return list(Keys.parts(session_key).values())

    @staticmethod
    def acked(written_key: str) -> str:
        """A short-lived mark written with each WAIT for replicas (gateway/state/replicas.py),
        in the slot of `written_key`: its hash tag, or the whole key as the tag."""
        start = written_key.find("{")
        end = written_key.find("}", start + 1)
        tag = written_key[start + 1 : end] if 0 <= start < end - 1 else written_key
        return f"{PREFIX}:{{{tag}}}:acked"

    @staticmethod
    def jobs(platform: str, shard: int) -> str:
        """One shard's job stream of a platform."""
        return Keys.shard(shard, f"jobs:{platform}")

    @staticmethod
    def job_streams(platform: str) -> list[str]:
        """Every shard's job stream of a platform, in shard order."""
        return [Keys.jobs(platform, shard) for shard in range(shards.count())]

    @staticmethod
    def session_jobs(session_key: str, platform: str) -> str:
        """The job stream a session's jobs go to: its platform's, in its shard."""
        return Keys.jobs(platform, shards.shard_of(session_key))

    JOB_STREAMS_MATCH = f"{PREFIX}:{{*}}:jobs:*"  # a SCAN pattern of every job stream

    # Every stream that takes jobs PUBLISHes its name here as each job is added (in the
    # same script): what wakes a worker, which reads that stream alone.
    JOBS_CHANNEL = f"{PREFIX}:jobs"

    @staticmethod
    def console_jobs(run: str, session_key: str) -> str:
        """The job stream of one `gateway run --console` (its replies reach its terminal),
        in the console session's slot."""
        return f"{PREFIX}:{{{shards.session_tag(session_key)}}}:jobs:console:{run}"

    CONSOLE_JOBS_MARK = ":jobs:console:"  # in the name of every console run's stream

    @staticmethod
    def consoles(session_key: str) -> str:
        """The console runs' job streams, scored by when each run's life ends unless it
        renews it (ms, server clock; 0: ended with jobs left): where a run finds the
        jobs an interrupted or killed one left (gateway/state/console_jobs.py). In the
        console session's slot, with the streams it moves jobs between."""
        return f"{PREFIX}:{{{shards.session_tag(session_key)}}}:consoles"

    @staticmethod
    def sessions(shard: int) -> str:
        """A shard's sessions, scored by last activity (a message, a recorded turn, a
        job): the listing, and where retention finds the idle ones."""
        return Keys.shard(shard, "sessions")

    @staticmethod
    def session_index(session_key: str) -> str:
        """The index of sessions a session is in (its shard's)."""
        return Keys.sessions(shards.shard_of(session_key))

    @staticmethod
    def session_indexes() -> list[str]:
        return [Keys.sessions(shard) for shard in range(shards.count())]

    @staticmethod
    def settings_version(session_key: str) -> str:
        """The settings' version as a session's shard knows it: a copy of
        `SETTINGS_VERSION` that the claim and ingest scripts read in their slot, raised
        after every change (`gateway/settings/scoped.py`)."""
        return Keys.shard_settings_version(shards.shard_of(session_key))

    @staticmethod
    def shard_settings_version(shard: int) -> str:
        return Keys.shard(shard, "settings:version")

    PRUNE_LOCK = f"{GLOBAL}:prune"  # held by the worker whose turn it is to prune
    CANCEL_CHANNEL = f"{PREFIX}:cancel"
    METRICS = f"{GLOBAL}:metrics"
    HEALTH = f"{GLOBAL}:health"  # a hash: component -> its latest report
    # The key layout this database holds (`gateway/state/layout.py`): version, shards.
    LAYOUT = f"{GLOBAL}:layout"
    # Workers seen, scored by when each last said it was alive (ms): what
    # `gateway migrate` looks at before it moves anything.
    WORKERS = f"{GLOBAL}:workers"

    @staticmethod
    def processes(kind: str) -> str:
        """Processes of one kind (`web`), scored by when each last said it was alive (ms):
        what the console's health page counts (`gateway/state/processes.py`)."""
        return f"{GLOBAL}:processes:{kind}"

    # Pending approvals of every session, member `<session key> <approval id>`, scored
    # by deadline: where `ApprovalStore.expire_due` finds the ones that timed out.
    APPROVALS_DUE = f"{GLOBAL}:approvals"

    # Pairing (gateway/inbound/pairing.py): code -> user, codes by expiry, paired users (user ->
    # approval time, beside GATEWAY_ALLOWED_USERS), and wrong codes in the lock window.
    PAIRING_CODES = f"{GLOBAL}:pairing:codes"
    PAIRING_PENDING = f"{GLOBAL}:pairing:pending"
    PAIRING_FAILURES = f"{GLOBAL}:pairing:failures"
    PAIRED = f"{GLOBAL}:paired"

    # Settings by scope (gateway/settings/scoped.py): a hash of `<scope>|<key>` -> value, and the
    # version every change bumps (copied into each shard: `settings_version`).
    SETTINGS = f"{GLOBAL}:settings"
    SETTINGS_VERSION = f"{GLOBAL}:settings:version"

    @staticmethod
    def approval_session(approval_id: str) -> str:
        """approval id -> its session key. Outside any session's hash tag on purpose: a
        click carries only the approval id (a Telegram button holds 64 bytes, a session
        key may not fit), and this is how the click finds its session. Expires after
        the approval's deadline."""
        return f"{PREFIX}:approval_session:{approval_id}"

    # Feedback on replies (gateway/feedback/store.py): every click, newest last, scored by
    # its time (ms); each member the click as JSON, replaced when its clicker changes it.
    FEEDBACK_LOG = f"{GLOBAL}:feedback:log"

    @staticmethod
    def feedback_reply(platform: str, channel: str, message_id: str) -> str:
        """A reply that takes feedback, by the message its buttons are under: its
        session, turn, model, platform and workspace, and each clicker's vote. The
        click names the message only, so the key is outside the session's hash tag."""
        return f"{GLOBAL}:feedback:reply:{platform}:{channel}:{message_id}"

    @staticmethod
    def channel_sessions(channel_key: str) -> str:
        """A channel's sessions (its threads), in their shard (all of a channel's
        sessions are in one shard)."""
        return Keys.shard(shards.shard_of(channel_key), f"channel:{channel_key}")

    @staticmethod
    def usage(scope: str, ident: str) -> str:
        """A hash of one user's, session's, workspace's or model's usage, by UTC day
        (`gateway/spend/usage.py` names its fields)."""
        return f"{PREFIX}:usage:{scope}:{ident}"

    @staticmethod
    def spend(scope: str, ident: str, period: str) -> str:
        """A hash of what a user or workspace used in one day or month (`YYYY-MM[-DD]`)
        and what calls in flight hold: budgets read it (`gateway/state/scripts/budget_hold.lua`)."""
        return f"{PREFIX}:spend:{{{scope}:{ident}}}:{period}"  # an owner's periods: one slot

    @staticmethod
    def pacing(chat_key: str) -> str:
        """A chat's send pacing: its next free send time. The key keeps its first name
        (`budget`), so a running chat's pause is not dropped by an upgrade."""
        return f"{PREFIX}:budget:{chat_key}"

    @staticmethod
    def native_refused(chat_key: str) -> str:
        """A chat whose platform refused its streaming surface (the error code, with a
        TTL): its replies are edited in place until the key expires."""
        return f"{PREFIX}:native_refused:{chat_key}"

    @staticmethod
    def untitled(thread_key: str) -> str:
        """An assistant thread opened and not yet titled (EX a week): its first message
        deletes it, and only the one whose DEL removed it sets the thread's title."""
        return f"{PREFIX}:untitled:{thread_key}"

    @staticmethod
    def refused(user_key: str) -> str:
        return f"{PREFIX}:refused:{user_key}"

    @staticmethod
    def user_rate(user_key: str, session_key: str) -> str:
        """A user's rate-limit bucket, across every conversation of the workspace of
        `session_key` (under that workspace's tag, beside its conversations' buckets)."""
        return f"{PREFIX}:{{{_workspace_tag(session_key)}}}:rate:user:{user_key}"

    @staticmethod
    def rate_told(bucket_key: str) -> str:
        """A rate-limit bucket's notice-once mark (PX its window)."""
        return f"{bucket_key}:told"

    @staticmethod
    def user_name(platform: str, user_id: str) -> str:
        return f"{PREFIX}:user:{platform}:{user_id}"

    # A platform installed through OAuth into many workspaces (Slack): each installation's
    # owner is `team:<workspace>` or, for an org-wide install, `org:<org>`. Tokens
    # in these records are encrypted with GATEWAY_SECRET_KEY (gateway/state/cipher.py).
    # An owner's records share the owner's tag, so that they are written together (and
    # a token rotated under a WATCH of them) on one slot; the set of owners is global.

    @staticmethod
    def installed(platform: str) -> str:
        """The set of owners whose bot is installed: counted by `doctor`, checked at start."""
        return f"{GLOBAL}:installed:{platform}"

    @staticmethod
    def installation(platform: str, owner: str, user_id: str | None = None) -> str:
        """The latest installation of an owner (JSON), or the one a user made."""
        suffix = f":user:{user_id}" if user_id else ""
        return f"{PREFIX}:{{inst:{platform}:{owner}}}:installation{suffix}"

    @staticmethod
    def installed_bot(platform: str, owner: str) -> str:
        """The bot of an owner's installation (JSON): the token replies are sent with."""
        return f"{PREFIX}:{{inst:{platform}:{owner}}}:bot"

    @staticmethod
    def installations_match(platform: str) -> str:
        """A SCAN pattern of every owner's records."""
        return f"{PREFIX}:{{inst:{platform}:*"

    @staticmethod
    def token_refresh(platform: str, owner: str) -> str:
        """Who is refreshing an owner's expiring bot token (SET NX PX: one process at a
        time uses its refresh token), or `failed:<error>` for a pause after a failure."""
        return f"{PREFIX}:token_refresh:{platform}:{owner}"

    @staticmethod
    def workspace_org(platform: str, workspace: str) -> str:
        """workspace -> the org whose org-wide install serves it (seen on its events)."""
        return f"{PREFIX}:org_of:{platform}:{workspace}"

    @staticmethod
    def oauth_state(platform: str, state: str) -> str:
        """An install's one-time OAuth state (EX its lifetime), consumed by the redirect."""
        return f"{PREFIX}:oauth_state:{platform}:{state}"

    # The operator console (gateway/console/): its sign-ins, the sign-in lock's failure
    # counts, and the audit log of every change made through it (newest first, capped).
    ADMIN_AUDIT = f"{PREFIX}:admin:audit"

    @staticmethod
    def admin_session(digest: str) -> str:
        """A console sign-in, by the SHA-256 of its cookie (the cookie itself is not stored)."""
        return f"{PREFIX}:admin:session:{digest}"

    @staticmethod
    def admin_sign_in_state(state: str) -> str:
        """A "Sign in with Slack" under way: its one-time state -> its nonce (EX 10 min)."""
        return f"{PREFIX}:admin:sign_in_state:{state}"

    @staticmethod
    def admin_failures(source: str) -> str:
        """Wrong sign-ins from one address (or `*`: from anywhere) in the lock window."""
        return f"{PREFIX}:admin:failures:{source}"


LAYOUT_VERSION = 3
# Keys every version 1 database that took any message has (its session index, its
# metrics); one that has neither holds nothing that must be moved.
V1_MARKS = ("gw:sessions", "gw:metrics", "gw:settings:version")
# What version 2 named otherwise than version 3: the installations of a platform in many
# workspaces (untagged). A version 2 database without them is version 3 already.
V2_INSTALLATIONS = ("gw:installed:*", "gw:installation:*", "gw:bot:*")


@dataclass(frozen=True, slots=True)
class Layout:
    """A database's key layout: its version, and its shard count."""

    version: int
    shards: int


async def stored_layout(redis: aioredis.Redis) -> Layout | None:
    """The layout recorded here; version 1 when none is but version 1 keys are found;
    None for an empty database."""
    found = cast(dict[str, str], await redis.hgetall(Keys.LAYOUT))
    if found:
        return Layout(int(found["version"]), int(found["shards"]))
    for key in V1_MARKS:
        if await redis.exists(key):
            return Layout(1, 1)
    return None


async def has_v2_installations(redis: aioredis.Redis) -> bool:
    """Whether version 2's installation records are here (what `gateway migrate` moves)."""
    for match in V2_INSTALLATIONS:
        async for _ in redis.scan_iter(match=match, count=1000):
            return True
    return False


async def record_layout(redis: aioredis.Redis) -> None:
    """This process's layout, recorded as the database's."""
    mapping: dict[str | bytes, str | int] = {"version": LAYOUT_VERSION, "shards": shards.count()}
    await redis.hset(Keys.LAYOUT, mapping=mapping)  # type: ignore[arg-type]


async def ensure_layout(redis: aioredis.Redis) -> None:
    """Record the layout in an empty database; refuse one laid out otherwise."""
    found = await stored_layout(redis)
    if found is None:
        await record_layout(redis)
    elif found.version == 2 and not await has_v2_installations(redis):
        await redis.hset(Keys.LAYOUT, "version", LAYOUT_VERSION)  # nothing to move
    elif found.version != LAYOUT_VERSION:
        raise LayoutMismatch(
            f"Redis holds an older key layout (version {found.version}): stop the gateway's "
            "processes and run `gateway migrate` once"
        )
    elif found.shards != shards.count():
        raise LayoutMismatch(
            f"Redis holds keys laid out for {found.shards} job shards but "
            f"GATEWAY_JOB_SHARDS is {shards.count()}: the count is fixed for a deployment"
        )


def on_cluster(redis: object) -> bool:
    """Whether `redis` is a Redis Cluster client (its multi-key calls must be single-slot)."""
    return isinstance(redis, RedisCluster)


def by_slot(keys: Sequence[str]) -> list[list[int]]:
    """The positions of `keys` grouped by hash slot, each group in order, the groups in
    the order their first key comes."""
    groups: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        groups.setdefault(key_slot(key.encode()), []).append(position)
    return list(groups.values())


def _workspace_tag(session_key: str) -> str:
    platform, workspace = [*session_key.split(":", 2), "", ""][:2]
    return f"w:{platform}:{workspace}"


def connect(url: str, options: RedisOptions | None = None) -> aioredis.Redis:
    """The client for `url`, a server, a Sentinel set or a Cluster (`gateway.state.connection`)."""
    return connection.connect(url, options)


@asynccontextmanager
async def open_redis(
    url: str | None,
    data_dir: Path,
    options: RedisOptions | None = None,
    *,
    check_layout: bool = True,
) -> AsyncIterator[aioredis.Redis]:
    """Redis at `url` (REDIS_URL), or the embedded server under `data_dir` when it is
    None (stopped again on exit, if this process started it). Fails with
    StoreUnavailable when nothing answers, and with LayoutMismatch when it holds keys
    of another layout (`ensure_layout`; not checked by `gateway migrate`)."""
    embedded = None
    if url is None:
        embedded = EmbeddedRedis(data_dir)
        url = embedded.start()
    client = connect(url, options)
    try:
        await ping(client, url)
        if check_layout:
            await ensure_layout(client)
        yield client
    finally:
        await client.aclose()
        if embedded is not None:
            embedded.stop()


async def ping(client: aioredis.Redis, url_for_errors: str) -> None:
    """Fail with StoreUnavailable (naming the host, never a password) when Redis is down."""
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(
            f"Redis at {redact_url(url_for_errors)} does not answer: {type(exc).__name__}: "
            f"{redact_text(str(exc), url_for_errors)}"
        ) from None
