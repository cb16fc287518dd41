"""Deterministic stand-ins for a tokenizer: prompt lengths and filler output.

No tokenizer ships with the emulator (it would pull in transformers and the
model's files), so prompt length is counted by a reproducible rule close to
BPE on English text: each word piece (a run of letters, digits and
underscores, or one punctuation mark) counts ``ceil(len / 4)`` tokens, plus
BOS for a completion; a list of token ids counts exactly its length (how a
trace replayer reproduces a prompt's length); a chat counts BOS, 5 per
message of the Llama-3 template plus its content, and 4 for the generation
prompt. Output token i is ``FILLER[i % len(FILLER)]``, so two identical
requests stream identical bytes.
"""

from __future__ import annotations

import re
from typing import Any

_PIECE = re.compile(r"\w+|[^\w\s]")
BOS_TOKENS = 1
CHAT_MESSAGE_OVERHEAD = 5
CHAT_GENERATION_PROMPT = 4
FILLER: tuple[str, ...] = (
    " The", " emulated", " replica", " streams", " one", " token", " per", " step",
    " while", " the", " model", " clock", " advances", " through", " its", " batch",
)  # fmt: skip


def count_text_tokens(text: str) -> int:
    """Word pieces of `text`, each ceil(len/4) tokens (see module doc)."""
    return sum(-(-len(piece) // 4) for piece in _PIECE.findall(text))


def count_prompt_tokens(prompt: Any) -> int:
    """Tokens of an OpenAI completions `prompt` (a string, token ids, or a one-item list).

    Raises ValueError naming what is wrong for anything else.
    """
    if isinstance(prompt, str):
        return BOS_TOKENS + count_text_tokens(prompt)
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return count_prompt_tokens(prompt[0])
        raise ValueError(
            "prompt must be a string, a list of token ids, or a list of exactly one of "
            "those (batched prompts are not supported by the emulator)"
        )
    raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")


def count_chat_tokens(messages: Any) -> int:
    """Tokens of a chat `messages` list after the chat template (see module doc)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    total = BOS_TOKENS + CHAT_GENERATION_PROMPT
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg:
            raise ValueError(f"messages[{i}] must be an object with a 'role'")
        total += CHAT_MESSAGE_OVERHEAD + count_text_tokens(_content_text(msg.get("content"), i))
    return total


def _content_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                raise ValueError(f"messages[{index}].content: only text parts are supported")
        return " ".join(parts)
    raise ValueError(f"messages[{index}].content must be a string or a list of parts")


def filler_text(start: int, stop: int) -> str:
    """Concatenated filler for output tokens start..stop-1."""
    n = len(FILLER)
    return "".join(FILLER[i % n] for i in range(start, stop))
