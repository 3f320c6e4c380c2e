"""A model call's attempts: what is retried, how many times, and never past one deadline."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import ModelError, ModelRateLimited, ModelRejected, ModelUnavailable
from gateway.models.retries import Deadline, backoff, with_retries


class Attempts:
    """An attempt that fails with each of `failures` in turn, then answers "done"."""

    def __init__(self, *failures: ModelError) -> None:
        self.failures, self.deadlines = list(failures), list[Deadline]()

    async def __call__(self, deadline: Deadline) -> str:
        self.deadlines.append(deadline)
        if self.failures:
            raise self.failures.pop(0)
        return "done"


async def test_a_failure_another_attempt_may_cure_is_retried_within_one_deadline() -> None:
    attempts = Attempts(ModelUnavailable("refused"))
    assert await with_retries(attempts, retries=2, within=30) == "done"
    assert len(attempts.deadlines) == 2 and attempts.deadlines[0] == attempts.deadlines[1]


async def test_a_refused_request_is_not_retried() -> None:
    attempts = Attempts(ModelRejected("bad request"))
    with pytest.raises(ModelRejected):
        await with_retries(attempts, retries=3, within=30)
    assert len(attempts.deadlines) == 1


async def test_the_last_failure_is_the_calls_once_the_retries_are_spent() -> None:
    attempts = Attempts(ModelUnavailable("one"), ModelUnavailable("two"))
    with pytest.raises(ModelUnavailable, match="two"):
        await with_retries(attempts, retries=1, within=30)


async def test_no_retry_is_made_whose_wait_would_end_past_the_deadline() -> None:
    attempts = Attempts(ModelRateLimited("slow down", retry_after=5.0))
    started = asyncio.get_running_loop().time()
    with pytest.raises(ModelRateLimited):
        await with_retries(attempts, retries=3, within=1.0)
    assert len(attempts.deadlines) == 1
    assert asyncio.get_running_loop().time() - started < 1.0


def test_backoff_grows_is_capped_and_honours_a_429s_ask() -> None:
    error = ModelUnavailable("x")
    assert all(0.25 <= backoff(0, error) <= 0.75 for _ in range(50))
    assert all(4.0 <= backoff(10, error) <= 12.0 for _ in range(50))
    assert backoff(0, ModelRateLimited("429", retry_after=3.0)) >= 3.0


async def test_a_deadline_bounds_waits_by_what_is_left() -> None:
    deadline = Deadline.within(0.5)
    assert 0 < deadline.left() <= 0.5
    assert deadline.bound(10.0) <= 0.5 and deadline.bound(0.1) == 0.1
    assert Deadline.within(-1).left() == 0.0
