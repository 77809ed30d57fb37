"""A deterministic tokenizer stand-in: token counts without a vocabulary.

Text is split into words, numbers and single punctuation marks; a word or number of n
characters counts as ceil(n / 4) tokens (BPE vocabularies average about four characters of
English per token), each punctuation mark or other symbol as one. The same text always gives
the same count, on every machine, with no model files.

For the prefix cache a prompt also has token ids: each four-character slice of a word (and
each mark) is one token, its id a CRC-32 of its text, and a chat message starts with four
template tokens naming its role. Equal text gives equal ids, so a repeated system prompt is a
repeated prefix, as it is for vLLM.

Generated text is a fixed cycle of short words, one word per token, each preceded by a space,
so counting the generated text gives back the number of tokens generated.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping

_PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_CHARS_PER_TOKEN = 4

# Chat template overhead, in tokens: per message (role markers) and once (assistant prompt).
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REPLY = 3
# Template token ids (below 256, where no CRC of real text is likely to fall).
_BEGIN_MESSAGE, _END_HEADER, _SEPARATOR = 1, 2, 3
_ASSISTANT = zlib.crc32(b"assistant")

_WORDS = ("the", "sim", "says", "one", "more", "word", "per", "step", "and", "then", "some")


def count_text_tokens(text: str) -> int:
    total = 0
    for piece in _PIECES.findall(text):
        total += -(-len(piece) // _CHARS_PER_TOKEN)
    return total


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Tokens of a chat prompt: each message's text plus the template overhead."""
    total = CHAT_TOKENS_PER_REPLY
    for message in messages:
        total += CHAT_TOKENS_PER_MESSAGE + count_text_tokens(message_text(message))
    return total


def text_token_ids(text: str) -> list[int]:
    """Token ids of `text`; as many as `count_text_tokens(text)`."""
    ids = []
    for piece in _PIECES.findall(text):
        for start in range(0, len(piece), _CHARS_PER_TOKEN):
            ids.append(zlib.crc32(piece[start : start + _CHARS_PER_TOKEN].encode()))
    return ids


def chat_token_ids(messages: Iterable[Mapping[str, object]]) -> list[int]:
    """Token ids of a chat prompt; as many as `count_chat_tokens(messages)`."""
    ids: list[int] = []
    for message in messages:
        role = zlib.crc32(str(message.get("role", "")).encode())
        ids += [_BEGIN_MESSAGE, role, _END_HEADER, _SEPARATOR]
        ids += text_token_ids(message_text(message))
    return [*ids, _BEGIN_MESSAGE, _ASSISTANT, _END_HEADER]


def message_text(message: Mapping[str, object]) -> str:
    """The text of a chat message whose content is a string or a list of text parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(str(part["text"]))
        return " ".join(parts)
    return ""


def token_text(index: int) -> str:
    """The text of the index-th generated token (one short word with a leading space)."""
    return " " + _WORDS[index % len(_WORDS)]
