"""Tool calls in the model's text, in the format of current chat templates (Qwen, Hermes):

    <tool_call>{"name": "write_file", "arguments": {"path": "kernels/relu.cu", "content": "..."}}</tool_call>

One reply may hold several calls; they run in order. `arguments` may also be a JSON string (the
OpenAI wire form). Anything that does not parse becomes an error message for the model, never an
exception: a malformed call costs the model a turn, not the episode.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_CALL_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
# Models often wrap the JSON in a markdown fence inside the tags.
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

FORMAT_HINT = (
    f'Call a tool as {OPEN_TAG}{{"name": "<tool>", "arguments": {{...}}}}{CLOSE_TAG} '
    "with valid JSON (strings escaped: newlines as \\n, quotes as \\\")."
)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedReply:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one message per malformed call


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    return f"{OPEN_TAG}{json.dumps({'name': name, 'arguments': arguments})}{CLOSE_TAG}"


def parse_tool_calls(text: str) -> ParsedReply:
    reply = ParsedReply()
    for position, match in enumerate(_CALL_BLOCK.finditer(text), 1):
        call = _parse_block(match.group(1).strip(), position, reply.errors)
        if call is not None:
            reply.calls.append(call)
    closed_end = text.rfind(CLOSE_TAG)
    unclosed = text.find(OPEN_TAG, closed_end + len(CLOSE_TAG) if closed_end >= 0 else 0)
    if unclosed >= 0:
        reply.errors.append(
            f"a {OPEN_TAG} was not closed with {CLOSE_TAG} (the reply may have hit the token "
            "limit); send the call again, shorter if it holds a long file"
        )
    return reply


def _parse_block(body: str, position: int, errors: list[str]) -> ToolCall | None:
    fenced = _FENCE.match(body)
    body = fenced.group(1) if fenced else body
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as error:
        errors.append(f"tool call {position}: invalid JSON ({error.msg} at character {error.pos}). {FORMAT_HINT}")
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        errors.append(f'tool call {position}: expected an object with a "name" string. {FORMAT_HINT}')
        return None
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            errors.append(f"tool call {position} ({payload['name']}): arguments string is not JSON ({error.msg})")
            return None
    if not isinstance(arguments, dict):
        errors.append(f'tool call {position} ({payload["name"]}): "arguments" must be an object')
        return None
    return ToolCall(payload["name"], arguments)
