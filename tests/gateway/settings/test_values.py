"""The values settings are written in: a rate of messages and a budget's amount, each
with one parser for the environment and the settings by scope alike."""

from __future__ import annotations

import pytest

from gateway.settings.values import Budget, Rate, budget_amount, parse_rate


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("20/min", Rate(20, 60.0, 20)),
        ("1/s,burst 5", Rate(1, 1.0, 5)),
        (" 3 / Hour , burst 1 ", Rate(3, 3600.0, 1)),
        ("10/second", Rate(10, 1.0, 10)),
    ],
)
def test_a_rate_is_read_in_each_of_its_forms(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


def test_a_rate_without_a_burst_of_its_own_takes_the_default_then_its_count() -> None:
    assert parse_rate("20/min", default_burst=4).burst == 4
    assert parse_rate("20/min,burst 2", default_burst=4).burst == 2
    assert parse_rate("20/min").burst == 20


@pytest.mark.parametrize("text", ["0/min", "5/min,burst 0", "5/day", "5 per min", "", "-1/s"])
def test_a_rate_not_of_the_form_is_refused_naming_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"N/min \(or N/s, N/h\)"):
        parse_rate(text)


def test_a_rate_says_its_interval_and_itself_in_words() -> None:
    rate = parse_rate("30/min")
    assert rate.interval_ms == 2000.0
    assert rate.describe() == "30 per minute"


@pytest.mark.parametrize(
    ("text", "written"),
    [("2usd", "2usd"), (" 2.50 USD ", "2.50usd"), ("500000Tokens", "500000tokens")],
)
def test_a_budget_amount_is_written_in_its_one_form(text: str, written: str) -> None:
    assert budget_amount(text) == written


@pytest.mark.parametrize("text", [None, "", "   "])
def test_an_empty_budget_amount_is_no_budget(text: str | None) -> None:
    assert budget_amount(text) is None


@pytest.mark.parametrize("text", ["0usd", "2eur", "usd", "2 usd 3", "-1tokens", "1e3tokens"])
def test_a_budget_amount_not_above_zero_in_usd_or_tokens_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="above 0 in usd or tokens"):
        budget_amount(text)


def test_what_budget_amount_writes_a_budget_reads() -> None:
    for text, budget in [("2.5usd", Budget(2.5, "usd")), ("1000TOKENS", Budget(1000, "tokens"))]:
        written = budget_amount(text)
        assert Budget.parse(written) == budget
    assert Budget.parse(None) is None and Budget.parse("lots") is None
    assert str(Budget(1234.5, "usd")) == "$1,234.50"
    assert str(Budget(500000, "tokens")) == "500,000 tokens"
