"""GATEWAY_SECRET_KEY's cipher: sealed secrets are unreadable, open with any listed key,
and say when they were sealed with an older one; errors never quote a key or a secret."""

from __future__ import annotations

import pytest

from gateway.state.cipher import TokenCipher, WrongSecretKey, check_keys

NEW = "bmV3LWtleS1vZi10aGUtY2lwaGVyLXRlc3RzLTAxMjM="
OLD = "b2xkLWtleS1vZi10aGUtY2lwaGVyLXRlc3RzLTAxMjM="
SECRET = "xoxb-1234-secret-token"


def test_a_sealed_secret_holds_no_trace_of_it_and_opens_again() -> None:
    cipher = TokenCipher(NEW)
    sealed = cipher.seal(SECRET)
    assert SECRET not in sealed and "secret" not in sealed
    assert cipher.seal(SECRET) != sealed  # each seal has its own IV
    assert cipher.open(sealed) == SECRET
    assert cipher.is_current(sealed)


def test_another_key_cannot_open_it_and_the_error_names_only_the_variable() -> None:
    sealed = TokenCipher(OLD).seal(SECRET)
    with pytest.raises(WrongSecretKey) as refused:
        TokenCipher(NEW).open(sealed)
    message = str(refused.value)
    assert message.startswith("GATEWAY_SECRET_KEY ")
    for hidden in (NEW, OLD, SECRET, sealed):
        assert hidden not in message


def test_with_the_new_key_first_the_old_seal_opens_and_is_not_current() -> None:
    old_seal = TokenCipher(OLD).seal(SECRET)
    both = TokenCipher(f"{NEW}, {OLD}")
    assert both.open(old_seal) == SECRET
    assert not both.is_current(old_seal)
    new_seal = both.seal(SECRET)
    assert both.is_current(new_seal)
    assert TokenCipher(NEW).open(new_seal) == SECRET


@pytest.mark.parametrize("text", ["", " , ", "short", NEW[:-4], f"{NEW},not base64!", "é" * 44])
def test_a_malformed_key_is_refused_without_quoting_it(text: str) -> None:
    with pytest.raises(ValueError, match="Fernet keys") as refused:
        check_keys(text)
    assert not text.strip(" ,") or text not in str(refused.value)
