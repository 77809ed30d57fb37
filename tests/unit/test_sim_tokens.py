"""The tokenizer stand-in: deterministic counts, and generated text that counts back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot_lab.sim.tokens import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_PER_REPLY,
    count_chat_tokens,
    count_text_tokens,
    token_text,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("hi", 1),
        ("hello", 2),  # five letters: ceil(5 / 4)
        ("Hello, world!", 2 + 1 + 2 + 1),
        ("2026-11-22", 1 + 1 + 1 + 1 + 1),
        ("internationalization", 5),
    ],
)
def test_counts(text: str, tokens: int) -> None:
    assert count_text_tokens(text) == tokens


@given(st.integers(min_value=0, max_value=2000))
def test_generated_text_counts_back_to_the_tokens_generated(num_tokens: int) -> None:
    text = "".join(token_text(i) for i in range(num_tokens))
    assert count_text_tokens(text) == num_tokens


@given(st.text(max_size=300), st.text(max_size=300))
def test_counts_add_over_whitespace(a: str, b: str) -> None:
    assert count_text_tokens(a + " " + b) == count_text_tokens(a) + count_text_tokens(b)


def test_chat_adds_the_template_overhead() -> None:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    expected = CHAT_TOKENS_PER_REPLY + 2 * CHAT_TOKENS_PER_MESSAGE + 1 + 2 + 2
    assert count_chat_tokens(messages) == expected


@given(st.text(max_size=200))
def test_token_ids_are_as_many_as_the_count_and_the_same_for_the_same_text(text: str) -> None:
    from tokenpilot_lab.sim.tokens import text_token_ids

    assert len(text_token_ids(text)) == count_text_tokens(text)
    assert text_token_ids(text) == text_token_ids(str(text))


def test_chat_token_ids_are_as_many_as_the_count() -> None:
    from tokenpilot_lab.sim.tokens import chat_token_ids

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    assert len(chat_token_ids(messages)) == count_chat_tokens(messages)
    # The same system prompt starts two conversations with the same tokens.
    other = [messages[0], {"role": "user", "content": "Something else entirely"}]
    assert chat_token_ids(other)[:8] == chat_token_ids(messages)[:8]
