"""vLLM's OpenAI-compatible JSON bodies and SSE events, byte for byte.

vLLM serialises its pydantic models compactly (no spaces), fields in
declaration order; stream events are ``data: <json>\\n\\n`` and the stream
ends with ``data: [DONE]\\n\\n``. The shapes follow vLLM's
`serving_completion.py` / `serving_chat.py`: completion chunks are dumped
with every field (hence the nulls), chat chunks without unset ones (the first
carries ``delta.role = "assistant"``, the last content chunk ``stop_reason``),
and a usage chunk (``stream_options.include_usage``) has ``choices: []``.
Pure functions: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

DONE_EVENT = b"data: [DONE]\n\n"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def sse(obj: Any) -> bytes:
    return f"data: {dumps(obj)}\n\n".encode()


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def _body(
    rid: str, kind: str, created: int, model: str, choices: list[Any], **tail: Any
) -> dict[str, Any]:
    """The fields every body and chunk opens with, in vLLM's order, then ``tail``'s."""
    return {
        "id": rid,
        "object": kind,
        "created": created,
        "model": model,
        "choices": choices,
        **tail,
    }


def _text_choice(text: str, finish_reason: str | None, **tail: Any) -> dict[str, Any]:
    """A completion's one choice (chunk and whole body alike), then ``tail``'s fields."""
    return {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        **tail,
    }


def completion_chunk(
    rid: str, created: int, model: str, text: str, finish_reason: str | None
) -> bytes:
    choice = _text_choice(text, finish_reason)
    return sse(_body(rid, "text_completion", created, model, [choice], usage=None))


def chat_role_chunk(rid: str, created: int, model: str) -> bytes:
    choice = {
        "index": 0,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }
    return sse(_body(rid, "chat.completion.chunk", created, model, [choice]))


def chat_chunk(rid: str, created: int, model: str, text: str, finish_reason: str | None) -> bytes:
    choice: dict[str, Any] = {
        "index": 0,
        "delta": {"content": text},
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = None
    return sse(_body(rid, "chat.completion.chunk", created, model, [choice]))


def usage_chunk(
    rid: str, created: int, model: str, chat: bool, prompt_tokens: int, completion_tokens: int
) -> bytes:
    kind = "chat.completion.chunk" if chat else "text_completion"
    return sse(_body(rid, kind, created, model, [], usage=usage(prompt_tokens, completion_tokens)))


def completion_response(
    rid: str, created: int, model: str, text: str, finish_reason: str, prompt: int, out: int
) -> dict[str, Any]:
    choice = _text_choice(text, finish_reason, prompt_logprobs=None)
    whole_usage = {**usage(prompt, out), "prompt_tokens_details": None}
    return _body(rid, "text_completion", created, model, [choice], usage=whole_usage)


def chat_response(
    rid: str, created: int, model: str, text: str, finish_reason: str, prompt: int, out: int
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text, "tool_calls": []},
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    whole_usage = {**usage(prompt, out), "prompt_tokens_details": None}
    return _body(
        rid, "chat.completion", created, model, [choice], usage=whole_usage, prompt_logprobs=None
    )


def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
    """vLLM's ErrorResponse."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def stream_error_event(message: str, err_type: str, code: int) -> bytes:
    """vLLM's in-stream error (``create_streaming_error_response``), then ``[DONE]``.

    A stream has already sent its 200 status, so vLLM reports a failure
    mid-stream as one ``data: {"error": <ErrorResponse>}`` event and ends it.
    """
    return sse({"error": error_body(message, err_type, code)}) + DONE_EVENT


def models_body(model: str, root: str, created: int, max_model_len: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": root,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{model}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
        ],
    }
