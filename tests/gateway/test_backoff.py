"""The one backoff every reconnecting connection waits with."""

from __future__ import annotations

import itertools

import pytest

from gateway.backoff import Backoff


def test_each_attempt_waits_twice_the_one_before_up_to_the_limit() -> None:
    backoff = Backoff(first=0.5, limit=30.0)
    assert [backoff.delay(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


def test_a_run_of_delays_starts_at_the_first_each_time() -> None:
    backoff = Backoff(first=1.0, limit=4.0)
    assert list(itertools.islice(backoff.delays(), 5)) == [1, 2, 4, 4, 4]
    assert next(backoff.delays()) == 1


def test_a_long_run_of_failures_stays_at_the_limit() -> None:
    assert Backoff(first=1.0, limit=60.0).delay(10_000) == 60


def test_no_backoff_at_all_waits_nothing() -> None:
    assert list(itertools.islice(Backoff(first=0.0, limit=0.0).delays(), 3)) == [0, 0, 0]


@pytest.mark.parametrize("attempt", [0, 3, 9])
def test_jitter_takes_off_at_most_its_share(attempt: int) -> None:
    backoff = Backoff(first=1.0, limit=60.0, jitter=0.5)
    ceiling = Backoff(first=1.0, limit=60.0).delay(attempt)
    delays = {backoff.delay(attempt) for _ in range(200)}
    assert all(ceiling * 0.5 <= delay <= ceiling for delay in delays)
    assert len(delays) > 1  # random: 200 draws are not all the same
