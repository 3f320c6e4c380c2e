"""One settings object, read once from the environment and `.env`, validated at start.

The CLI builds it and passes it down; nothing else in the core reads the
environment. Secrets are `SecretStr`, so they never show in a repr, a log line
or an error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.errors import ConfigError
from gateway.settings.defaults import ECHO_MODEL, MODEL_RETRIES, STREAM_IDLE_TIMEOUT
from gateway.settings.values import Rate, budget_amount, parse_rate
from gateway.state.cipher import check_keys
from gateway.state.connection import RedisOptions, parse_url
from gateway.state.replicas import WaitOptions

ADMIN_TOKEN_MIN = 16  # the console's sign-in token: long enough that the sign-in lock is enough
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant taking part in a team chat. Answer clearly and "
    "concisely, in Markdown. Several people may be talking; each user message "
    "in a group starts with the speaker's name."
)
# What the Slack adapter calls and the events it reads, as bot scopes of an OAuth install.
DEFAULT_SLACK_SCOPES = (
    "app_mentions:read",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "chat:write",
    "reactions:write",
    "commands",
    "files:read",
    "users:read",
    "assistant:write",
)
# The platforms whose replies can carry feedback buttons (GATEWAY_FEEDBACK).
FEEDBACK_PLATFORMS = ("telegram", "discord", "slack")
_TELEGRAM_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class ModelPrice(BaseModel):
    """A model's price in USD per million tokens (GATEWAY_MODEL_PRICES), before litellm's map."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def per_token(self) -> tuple[float, float]:
        return self.input_per_mtok / 1e6, self.output_per_mtok / 1e6


class Settings(BaseSettings):
    """Every setting of the gateway; names are the environment variables."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    redis_url: str | None = Field(default=None, alias="REDIS_URL")
    data_dir: Path = Field(default=Path(".gateway"), alias="GATEWAY_DATA_DIR")
    # TLS (rediss://): the authorities a server's certificate is checked against; unset,
    # the system's. Certificates and host names are always checked.
    redis_ca_file: Path | None = Field(default=None, alias="GATEWAY_REDIS_CA_FILE")
    # How long a command the server did not run (no connection, a redirect, a failover
    # in progress) is retried before it counts as Redis being down.
    redis_retry_seconds: float = Field(default=10.0, alias="GATEWAY_REDIS_RETRY_SECONDS", ge=0)
    # An event is acknowledged to its platform only once this many replicas have it
    # (WAIT, or WAITAOF with GATEWAY_REDIS_WAIT_AOF); 0: once the primary has it.
    redis_wait_replicas: int = Field(default=0, alias="GATEWAY_REDIS_WAIT_REPLICAS", ge=0)
    redis_wait_timeout: float = Field(default=1.0, alias="GATEWAY_REDIS_WAIT_TIMEOUT", gt=0)
    redis_wait_aof: bool = Field(default=False, alias="GATEWAY_REDIS_WAIT_AOF")
    # How many shards the job streams and the sessions are spread over (gateway/state/shards.py):
    # fixed for the life of a deployment (the keys are named by it).
    job_shards: int = Field(default=16, alias="GATEWAY_JOB_SHARDS", ge=1, le=1024)

    model: str = Field(default=ECHO_MODEL, alias="GATEWAY_MODEL")
    api_base: str | None = Field(default=None, alias="GATEWAY_API_BASE")
    api_key: SecretStr | None = Field(default=None, alias="GATEWAY_API_KEY")
    side_model_name: str | None = Field(default=None, alias="GATEWAY_SIDE_MODEL")
    compression_model_name: str | None = Field(default=None, alias="GATEWAY_COMPRESSION_MODEL")
    system_prompt: str = Field(default=DEFAULT_SYSTEM_PROMPT, alias="GATEWAY_SYSTEM_PROMPT")
    token_budget: int | None = Field(default=None, alias="GATEWAY_TOKEN_BUDGET", gt=0)
    # One deadline for a turn's attempts (the call and its retries) until its first
    # text, and for a summary's whole call: a user waits on all of them.
    model_timeout: float = Field(default=120.0, alias="GATEWAY_MODEL_TIMEOUT", gt=0)
    # The longest silence of a streamed answer, counted from its request (the wait
    # for the headers and for the first piece included): a stream that stalls, or
    # never starts, is cut off after this.
    stream_idle_timeout: float = Field(
        default=STREAM_IDLE_TIMEOUT, alias="GATEWAY_STREAM_IDLE_TIMEOUT", gt=0
    )
    model_retries: int = Field(default=MODEL_RETRIES, alias="GATEWAY_MODEL_RETRIES", ge=0, le=10)
    max_tokens: int | None = Field(default=None, alias="GATEWAY_MAX_TOKENS", gt=0)
    max_message_chars: int = Field(default=100_000, alias="GATEWAY_MAX_MESSAGE_CHARS", ge=100)

    side_max_tokens: int = Field(default=2048, alias="GATEWAY_SIDE_MAX_TOKENS", gt=0)
    side_temperature: float = Field(default=0.3, alias="GATEWAY_SIDE_TEMPERATURE", ge=0, le=2)
    # A side question's whole call, retries included (it is not streamed).
    side_timeout: float = Field(default=180.0, alias="GATEWAY_SIDE_TIMEOUT", gt=0)
    side_max_in_flight: int = Field(default=3, alias="GATEWAY_SIDE_MAX_IN_FLIGHT", ge=1)
    side_message_cap: int = Field(default=2000, alias="GATEWAY_SIDE_MESSAGE_CAP", ge=100)
    side_transcript_budget: int = Field(
        default=24000, alias="GATEWAY_SIDE_TRANSCRIPT_BUDGET", ge=500
    )

    lease_ttl: float = Field(default=30.0, alias="GATEWAY_LEASE_TTL", ge=0.5)
    worker_concurrency: int = Field(default=64, alias="GATEWAY_WORKER_CONCURRENCY", ge=1)
    # litellm's calls, counts and lookups in processes of their own (gateway.models.pool);
    # 0 keeps them in the worker. Only a worker that calls a model (not `echo`) starts any.
    model_processes: int = Field(default=1, alias="GATEWAY_MODEL_PROCESSES", ge=0, le=64)

    host: str = Field(default="0.0.0.0", alias="HOST")
    port: int = Field(default=8080, alias="PORT", ge=0, le=65535)
    log_format: Literal["text", "json"] = Field(default="text", alias="GATEWAY_LOG_FORMAT")
    log_level: str = Field(default="INFO", alias="GATEWAY_LOG_LEVEL")

    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    slack_edit_interval: float = Field(default=1.0, alias="SLACK_EDIT_INTERVAL", ge=0)
    slack_allow_external: bool = Field(default=False, alias="SLACK_ALLOW_EXTERNAL")
    # Slack in many workspaces (OAuth v2 installs): the names slack-bolt itself reads.
    slack_client_id: str | None = Field(default=None, alias="SLACK_CLIENT_ID")
    slack_client_secret: SecretStr | None = Field(default=None, alias="SLACK_CLIENT_SECRET")
    slack_scopes_text: str | None = Field(default=None, alias="SLACK_SCOPES")
    slack_redirect_uri: str | None = Field(default=None, alias="SLACK_REDIRECT_URI")
    # Fernet keys, newest first: installation tokens are encrypted with them in Redis.
    secret_key: SecretStr | None = Field(default=None, alias="GATEWAY_SECRET_KEY")

    telegram_bot_token: SecretStr | None = Field(default=None, alias="TELEGRAM_BOT_TOKEN")
    telegram_webhook_secret: SecretStr | None = Field(default=None, alias="TELEGRAM_WEBHOOK_SECRET")
    telegram_api_url: str = Field(default="https://api.telegram.org/bot", alias="TELEGRAM_API_URL")
    telegram_allow_all: bool = Field(default=False, alias="TELEGRAM_ALLOW_ALL")
    telegram_edit_interval: float = Field(default=1.0, alias="TELEGRAM_EDIT_INTERVAL", ge=0)
    telegram_group_edit_interval: float = Field(
        default=3.0, alias="TELEGRAM_GROUP_EDIT_INTERVAL", ge=0
    )

    discord_bot_token: SecretStr | None = Field(default=None, alias="DISCORD_BOT_TOKEN")
    discord_api_url: str | None = Field(default=None, alias="DISCORD_API_URL")
    discord_gateway_url: str | None = Field(default=None, alias="DISCORD_GATEWAY_URL")
    discord_allow_all: bool = Field(default=False, alias="DISCORD_ALLOW_ALL")
    discord_edit_interval: float = Field(default=1.0, alias="DISCORD_EDIT_INTERVAL", ge=0)
    discord_auto_thread: bool = Field(default=False, alias="DISCORD_AUTO_THREAD")
    discord_shard_count: int | None = Field(default=None, alias="DISCORD_SHARD_COUNT", ge=1)
    discord_shard_ids: str | None = Field(default=None, alias="DISCORD_SHARD_IDS")
    discord_command_guilds: str | None = Field(default=None, alias="DISCORD_COMMAND_GUILDS")

    allowed_users: str = Field(default="", alias="GATEWAY_ALLOWED_USERS")
    # Platforms besides Slack's native streams whose replies carry feedback buttons.
    feedback_text: str = Field(default="", alias="GATEWAY_FEEDBACK")
    # Strangers on Telegram and Discord get a pairing code the operator can approve.
    pairing: bool = Field(default=False, alias="GATEWAY_PAIRING")
    # Messages (and `/btw`) per user and per conversation, "N/min"; unset: no limit.
    rate_user_text: str | None = Field(default=None, alias="GATEWAY_RATE_USER")
    rate_conversation_text: str | None = Field(default=None, alias="GATEWAY_RATE_CONVERSATION")
    rate_burst: int | None = Field(default=None, alias="GATEWAY_RATE_BURST", ge=1)

    # MCP tool servers (gateway.tools); unset: the assistant has no tools.
    mcp_config: Path | None = Field(default=None, alias="GATEWAY_MCP_CONFIG")
    tool_max_steps: int = Field(default=8, alias="GATEWAY_TOOL_MAX_STEPS", ge=1)
    tool_timeout: float = Field(default=60.0, alias="GATEWAY_TOOL_TIMEOUT", gt=0)
    tool_result_chars: int = Field(default=16_000, alias="GATEWAY_TOOL_RESULT_CHARS", ge=100)
    # How long a destructive call may wait for the asker's approval.
    confirm_timeout: float = Field(default=600.0, alias="GATEWAY_CONFIRM_TIMEOUT", gt=0)

    # Shared files (gateway.media): downloaded and read by the worker before a turn.
    media_file_bytes: int = Field(default=20_000_000, alias="GATEWAY_MEDIA_FILE_BYTES", ge=1)
    media_message_files: int = Field(default=10, alias="GATEWAY_MEDIA_MESSAGE_FILES", ge=0)
    media_message_bytes: int = Field(default=50_000_000, alias="GATEWAY_MEDIA_MESSAGE_BYTES", ge=1)
    media_session_bytes: int = Field(default=100_000_000, alias="GATEWAY_MEDIA_SESSION_BYTES", ge=1)
    media_ttl: int = Field(default=7 * 86_400, alias="GATEWAY_MEDIA_TTL", ge=60)
    media_concurrency: int = Field(default=3, alias="GATEWAY_MEDIA_CONCURRENCY", ge=1)
    # An album's items arrive as messages of their own: a turn waits this long after
    # the latest for the next, so the album is answered as one message.
    album_wait: float = Field(default=1.0, alias="GATEWAY_ALBUM_WAIT", ge=0)
    download_timeout: float = Field(default=10.0, alias="GATEWAY_DOWNLOAD_TIMEOUT", gt=0)
    download_deadline: float = Field(default=60.0, alias="GATEWAY_DOWNLOAD_DEADLINE", gt=0)
    image_max_pixels: int = Field(default=50_000_000, alias="GATEWAY_IMAGE_MAX_PIXELS", ge=1)
    image_max_side: int = Field(default=1568, alias="GATEWAY_IMAGE_MAX_SIDE", ge=16)
    image_turns: int = Field(default=3, alias="GATEWAY_IMAGE_TURNS", ge=0)
    pdf_max_pages: int = Field(default=50, alias="GATEWAY_PDF_MAX_PAGES", ge=1)
    document_chars: int = Field(default=50_000, alias="GATEWAY_DOCUMENT_CHARS", ge=100)
    # Unset: voice messages are not transcribed (the user is told once how to enable it).
    transcription_model: str | None = Field(default=None, alias="GATEWAY_TRANSCRIPTION_MODEL")
    transcription_bytes: int = Field(default=25_000_000, alias="GATEWAY_TRANSCRIPTION_BYTES", ge=1)

    # Unset: sessions are kept for good. Removing conversations cannot be undone,
    # so it is the operator's choice, never a default.
    session_retention_days: int | None = Field(default=None, alias="GATEWAY_SESSION_RETENTION_DAYS")

    # JSON: {"model": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict, alias="GATEWAY_MODEL_PRICES")
    # "2usd" or "500000tokens"; unset: no such budget (gateway/spend/budgets.py)
    budget_user_daily: str | None = Field(default=None, alias="GATEWAY_BUDGET_USER_DAILY")
    budget_user_monthly: str | None = Field(default=None, alias="GATEWAY_BUDGET_USER_MONTHLY")
    budget_workspace_daily: str | None = Field(default=None, alias="GATEWAY_BUDGET_WORKSPACE_DAILY")
    budget_workspace_monthly: str | None = Field(
        default=None, alias="GATEWAY_BUDGET_WORKSPACE_MONTHLY"
    )

    # The operator console on `gateway web` (/admin): unset, there is none.
    admin_token: SecretStr | None = Field(default=None, alias="GATEWAY_ADMIN_TOKEN")
    # `platform:user_id` entries who may sign in with Slack beside its workspaces' admins.
    admin_users_text: str = Field(default="", alias="GATEWAY_ADMIN_USERS")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value:
            parse_url(value)  # its ValueError names no password
        return value or None

    @field_validator("redis_ca_file")
    @classmethod
    def _ca_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{value} is not a file")
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _telegram_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _TELEGRAM_SECRET.match(value.get_secret_value()):
            raise ValueError("must be 1 to 256 characters of A-Z a-z 0-9 _ -")
        return value

    @field_validator("feedback_text")
    @classmethod
    def _feedback(cls, value: str) -> str:
        named = [p.strip().lower() for p in value.split(",") if p.strip()]
        unknown = [p for p in named if p not in FEEDBACK_PLATFORMS]
        if unknown:
            raise ValueError(
                f"must be platforms among {', '.join(FEEDBACK_PLATFORMS)}, comma-separated "
                f"(got {unknown[0]!r})"
            )
        return ",".join(named)

    @field_validator("admin_token")
    @classmethod
    def _admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < ADMIN_TOKEN_MIN:
            raise ValueError(f"must be at least {ADMIN_TOKEN_MIN} characters (a random string)")
        return value

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_keys(value.get_secret_value())
        return value

    @field_validator("slack_client_id", "slack_scopes_text", "slack_redirect_uri")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("session_retention_days", mode="before")
    @classmethod
    def _retention(cls, value: object) -> object:
        text = str(value).strip() if value is not None else None
        if text is not None and not (text.isdigit() and int(text) >= 1):
            raise ValueError(
                f"must be a whole number of days, 1 or more (got {text!r}); "
                "leave it unset to keep sessions for good"
            )
        return value

    @field_validator("rate_user_text", "rate_conversation_text", mode="before")
    @classmethod
    def _rate(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None  # set but empty: no limit, as when unset
        if isinstance(value, str):
            parse_rate(value)
        return value

    @property
    def rate_user(self) -> Rate | None:
        return self._rate_of(self.rate_user_text)

    @property
    def rate_conversation(self) -> Rate | None:
        return self._rate_of(self.rate_conversation_text)

    def _rate_of(self, text: str | None) -> Rate | None:
        return None if text is None else parse_rate(text, self.rate_burst)

    @field_validator(
        "budget_user_daily",
        "budget_user_monthly",
        "budget_workspace_daily",
        "budget_workspace_monthly",
    )
    @classmethod
    def _budget(cls, value: str | None) -> str | None:
        return budget_amount(value)

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"must be JSON ({exc.msg} at character {exc.pos})") from None

    @property
    def redis_options(self) -> RedisOptions:
        return RedisOptions(ca_file=self.redis_ca_file, retry_seconds=self.redis_retry_seconds)

    @property
    def replica_wait(self) -> WaitOptions:
        return WaitOptions(
            self.redis_wait_replicas,
            self.redis_wait_timeout,
            self.redis_wait_aof,
            within=self.redis_retry_seconds,
        )

    @property
    def side_model(self) -> str:
        return self.side_model_name or self.model

    @property
    def compression_model(self) -> str:
        return self.compression_model_name or self.side_model

    @property
    def uses_echo(self) -> bool:
        return self.model == ECHO_MODEL

    @property
    def allowed_user_set(self) -> frozenset[str]:
        return frozenset(u.strip() for u in self.allowed_users.split(",") if u.strip())

    @property
    def admin_users(self) -> frozenset[str]:
        """Who may sign in to the console with a platform, beside its workspaces' admins."""
        return frozenset(u.strip() for u in self.admin_users_text.split(",") if u.strip())

    @property
    def feedback_platforms(self) -> frozenset[str]:
        """GATEWAY_FEEDBACK's platforms (`telegram,discord`): their replies carry feedback
        buttons (Slack's native streams always do)."""
        return frozenset(p.strip().lower() for p in self.feedback_text.split(",") if p.strip())

    @property
    def slack_many_workspaces(self) -> bool:
        """Slack installed through OAuth into any number of workspaces (SLACK_CLIENT_ID)."""
        return self.slack_client_id is not None

    @property
    def slack_scopes(self) -> tuple[str, ...]:
        if self.slack_scopes_text is None:
            return DEFAULT_SLACK_SCOPES
        return tuple(s.strip() for s in self.slack_scopes_text.split(",") if s.strip())

    @property
    def slack_enabled(self) -> bool:
        return self.slack_bot_token is not None or self.slack_many_workspaces

    @property
    def telegram_enabled(self) -> bool:
        return self.telegram_bot_token is not None

    @property
    def discord_enabled(self) -> bool:
        return self.discord_bot_token is not None

    @property
    def enabled_platforms(self) -> tuple[str, ...]:
        flags = {
            "slack": self.slack_enabled,
            "telegram": self.telegram_enabled,
            "discord": self.discord_enabled,
        }
        return tuple(name for name, on in flags.items() if on)


def load_settings(**overrides: object) -> Settings:
    """Read the settings, turning a validation failure into one ConfigError line."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "settings"
        alias = Settings.model_fields[name].alias if name in Settings.model_fields else name
        raise ConfigError(f"{alias}: {first['msg']}") from None


def require(settings: Settings, *names: str, because: str) -> None:
    """Fail with one line when a setting that `because` needs is unset."""
    for name in names:
        if getattr(settings, name) is None:
            alias = Settings.model_fields[name].alias
            raise ConfigError(f"{alias} is required {because}")
