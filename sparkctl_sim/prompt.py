"""A chat request as the simulator reads it: message text, image URLs, the prompt's token count."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparkctl_sim import tokenizer

IMAGE_TOKENS = 256
MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3


class RequestError(ValueError):
    """A malformed chat request (HTTP 400)."""



@dataclass
class Prompt:
    """The parts of a chat request the responder reads."""

    messages: list[dict[str, Any]]
    user_text: str  # the last user message's text
    all_text: str  # every message's text, in order
    image_urls: list[str] = field(default_factory=list)  # in the last user message
    prompt_tokens: int = 0


def content_parts(content: Any) -> tuple[str, list[str]]:
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise RequestError("message content must be a string or a list of content parts")
    texts: list[str] = []
    urls: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            raise RequestError("each content part must be an object")
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "image_url":
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str):
                raise RequestError("image_url content parts need an image_url.url string")
            urls.append(url)
        else:
            raise RequestError(f"unsupported content part type {kind!r}")
    return "\n".join(texts), urls


def read_prompt(messages: Any, tools: Any = None) -> Prompt:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    texts: list[str] = []
    user_text = ""
    user_urls: list[str] = []
    tokens = REPLY_PRIMING
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError("each message must be an object with a role")
        text, urls = content_parts(message.get("content"))
        calls = message.get("tool_calls")
        if calls:
            text += "\n" + json.dumps(calls, sort_keys=True)
        texts.append(text)
        tokens += MESSAGE_OVERHEAD + tokenizer.count(text) + IMAGE_TOKENS * len(urls)
        if message["role"] == "user":
            user_text, user_urls = text, urls
    if tools:
        tokens += tokenizer.count(json.dumps(tools, sort_keys=True)) + 8
    return Prompt(messages, user_text, "\n".join(texts), user_urls, tokens)


