"""The values a turn's steps hand each other: the turn under its lease (`Turn`), what
stops it from outside (`RunningTurn`), the turn once its request is prepared
(`AnsweringTurn`: what a tool loop runs on), and what its model call came to
(`TurnResult`).

A turn's compiled request (`PreparedTurn`) is `prepare.py`'s: an early start is made
of one, and a `Turn` carries its early start.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.approvals.waiting import Asker
from gateway.delivery.stream import ReplyStream
from gateway.errors import ModelError
from gateway.models import Usage
from gateway.settings.scoped import SessionSettings
from gateway.spend.budgets import Hold
from gateway.state.lease import Lease
from gateway.state.session import Claim
from gateway.turn.early_start import EarlyStart
from gateway.turn.prepare import PreparedTurn


@dataclass
class RunningTurn:
    """What the worker needs to stop a turn from outside (a /stop, a lost lease)."""

    session_key: str
    lease: Lease
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""

    def request_stop(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.stop.set()


@dataclass
class TurnResult:
    """What a turn's model call came to: its text, the error that ended it, or a stop."""

    text: str
    error: ModelError | None = None
    stopped: bool = False

    @property
    def whole(self) -> bool:
        """Neither failed nor stopped: the reply is all the model had to say."""
        return self.error is None and not self.stopped


@dataclass(frozen=True, slots=True)
class Turn:
    """One run of a session's turn, under its lease: what its steps pass each other."""

    session_key: str
    lease: Lease
    claim: Claim
    running: RunningTurn
    early: EarlyStart | None = None

    @property
    def kept_early(self) -> EarlyStart | None:
        """The early call, while the turn goes on with it."""
        return self.early if self.early is not None and self.early.kept else None


@dataclass(frozen=True, slots=True)
class AnsweringTurn:
    """A turn once its request is prepared and its reply opened: what its calls count
    their tokens into, whose message it answers, the session's settings for it, and
    what it holds on its budgets (its calls carry it to their usage write)."""

    turn: Turn
    prepared: PreparedTurn
    usage: Usage
    stream: ReplyStream
    asker: Asker
    settings: SessionSettings
    hold: Hold | None = None
