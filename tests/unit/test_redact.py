"""harness.redact: exact secrets, Anthropic-shaped keys, and auth header values."""

from __future__ import annotations

import pytest

from harness.redact import REDACTED, Redactor


def test_exact_secret_is_removed_everywhere() -> None:
    r = Redactor(["hunter2-super-secret"])
    out = r.text("a hunter2-super-secret b hunter2-super-secret")
    assert out == f"a {REDACTED} b {REDACTED}"


def test_short_or_empty_secrets_are_ignored() -> None:
    r = Redactor(["", "short", "1234567"])
    assert r.text("short 1234567 stays") == "short 1234567 stays"


def test_longest_secret_first() -> None:
    r = Redactor(["abcdefgh", "abcdefgh-and-more"])
    assert r.text("x abcdefgh-and-more y") == f"x {REDACTED} y"
    assert "and-more" not in r.text("abcdefgh-and-more")


def test_add_a_secret_later() -> None:
    r = Redactor()
    assert r.text("value-of-the-token") == "value-of-the-token"
    r.add("value-of-the-token")
    r.add("value-of-the-token")
    r.add("tiny")
    assert r.text("value-of-the-token tiny") == f"{REDACTED} tiny"


@pytest.mark.parametrize(
    "key",
    [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-AAAA",
        "sk-ant-admin01-abcdefgh",
        "sk-ant-oat01-ZZZZZZZZZZZZ",
    ],
)
def test_anthropic_shaped_keys(key: str) -> None:
    out = Redactor().text(f"export ANTHROPIC_API_KEY={key}; echo done")
    assert key not in out
    assert "sk-ant-" not in out
    assert out.endswith("; echo done")


def test_sk_ant_prefix_alone_is_not_a_key() -> None:
    assert Redactor().text("sk-ant-short") == "sk-ant-short"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("x-api-key: abcdefghijklmnop", "abcdefghijklmnop"),
        ("X-Api-Key:abcdefghijklmnop", "abcdefghijklmnop"),
        ('{"x-api-key": "abc.def-ghi_jklmnop"}', "abc.def-ghi_jklmnop"),
        ("x-api-key='ABCDEFGHIJKLMNOP'", "ABCDEFGHIJKLMNOP"),
        ("Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.payload", "eyJhbGciOi.JIUzI1NiJ9.payload"),
        ('{"authorization": "Bearer tok_0123456789abc"}', "tok_0123456789abc"),
        ("authorization=bearer   0123456789abcdef", "0123456789abcdef"),
    ],
)
def test_header_values(text: str, secret: str) -> None:
    out = Redactor().text(text)
    assert secret not in out
    assert out == text.replace(secret, REDACTED)  # only the value goes; the header name stays


def test_header_name_is_kept() -> None:
    assert Redactor().text("x-api-key: abcdefghijklmnop") == f"x-api-key: {REDACTED}"
    assert Redactor().text("Authorization: Bearer abcdefghijklmnop") == f"Authorization: Bearer {REDACTED}"


def test_placeholder_like_short_values_are_kept() -> None:
    assert Redactor().text("x-api-key: short") == "x-api-key: short"


def test_ordinary_text_is_untouched() -> None:
    text = "diff --git a/x b/x\n+def key(): return 'sk-'\nAuthorization required\n"
    assert Redactor(["not-present-secret"]).text(text) == text


def test_bytes_round_trip_and_invalid_utf8() -> None:
    r = Redactor(["the-secret-value"])
    assert r.data(b"") == b""
    data = b"\xff\xfe binary the-secret-value \x00\x01"
    out = r.data(data)
    assert b"the-secret-value" not in out
    assert out.startswith(b"\xff\xfe binary ")
    assert out.endswith(b" \x00\x01")
    assert r.data(b"\x80\x81\x82") == b"\x80\x81\x82"
