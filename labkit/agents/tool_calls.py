"""Tool calls in Qwen's (Hermes) text format: write them, find them in a completion, parse them.

A tool-using policy (ReTool, arXiv 2504.11536; ToRL, arXiv 2503.23383) interleaves its text with
calls whose results the environment appends as tokens the policy did not sample. Qwen's chat
templates write a call as a JSON object between tags, and the tool's answer comes back in a user
turn::

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "425*13"}}
    </tool_call>

    <tool_response>
    5525
    </tool_response>

The same text is what TRL's ``GRPOTrainer(environment_factory=...)`` parses for Qwen models, so
episodes written here can be handed to TRL unchanged.

The policy's text is untrusted: :func:`parse_tool_call` refuses oversized text before parsing,
uses :func:`json.loads` only, and raises :class:`ToolCallError` with a one-line message short
enough to be the tool's reply, so a malformed call costs the policy a turn and tells it why.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass

__all__ = ["MAX_ERROR_CHARS", "MAX_TOOL_CALL_CHARS", "TOOL_CALL_CLOSE", "TOOL_CALL_OPEN",
           "TOOL_RESPONSE_CLOSE", "TOOL_RESPONSE_OPEN", "ToolCall", "ToolCallError",
           "environment_tools", "format_tool_call", "format_tool_response", "last_tool_call",
           "parse_tool_call", "run_tool_call"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
#: Longer call texts are refused unread: a real call to the lab's tools is under 100 characters.
MAX_TOOL_CALL_CHARS = 2000
#: Prefix of every reply that reports a failure to the policy (shared with the tools).
ERROR_PREFIX = "error: "

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SCALARS = (str, int, float, bool, type(None))
# TRL's environment contract: these public methods are the environment's, not tools
_NOT_TOOLS = ("reset", "get_reward")


class ToolCallError(ValueError):
    """A tool call the environment cannot run; the message is the reply the policy reads."""


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: the tool's ``name`` and its keyword ``arguments`` (JSON scalars only)."""

    name: str
    arguments: dict


def format_tool_call(name: str, arguments: dict) -> str:
    """The text of a call, as Qwen's chat template renders it (no newline after the close tag).

    ``arguments`` are written by :func:`json.dumps` with its default separators and the keys in
    the given order; non-ASCII stays as is, as the template's ``tojson`` filter leaves it.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"name must be an identifier of at most 64 characters, got {name!r}")
    if not isinstance(arguments, dict):
        raise TypeError(f"arguments must be a dict, got {type(arguments).__name__}")
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def format_tool_response(reply: str) -> str:
    """The user turn that carries a tool's ``reply`` back to the policy, in Qwen's format."""
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a string, got {type(reply).__name__}")
    return f"{TOOL_RESPONSE_OPEN}\n{reply}\n{TOOL_RESPONSE_CLOSE}"


def last_tool_call(completion_text: str) -> str | None:
    """The body of the final complete ``<tool_call>...</tool_call>`` in a completion, else None.

    Rule, tolerant of unbalanced and nested tags: take the last close tag, then the last open tag
    before it, and return the text from that open tag to the first close tag after it (which
    holds neither tag). ``<tool_call>a</tool_call><tool_call>b`` gives ``a`` (``b`` is never
    closed); ``<tool_call><tool_call>a</tool_call></tool_call>`` gives ``a``. The body is
    returned as written (surrounding newlines included); :func:`parse_tool_call` strips them.
    """
    if not isinstance(completion_text, str):
        return None
    last_close = completion_text.rfind(TOOL_CALL_CLOSE)
    start = completion_text.rfind(TOOL_CALL_OPEN, 0, max(last_close, 0))
    if last_close < 0 or start < 0:
        return None
    start += len(TOOL_CALL_OPEN)
    return completion_text[start:completion_text.find(TOOL_CALL_CLOSE, start)]


#: Deepest bracket nesting parsed: the call object and its arguments object need 2.
_MAX_NESTING = 8


def _nesting_depth(text: str) -> int:
    """Deepest nesting of JSON brackets outside strings (one pass, no parsing)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_tool_call(text: str) -> ToolCall:
    """Parse a call's body (the text between the tags) into a :class:`ToolCall`.

    A whole block ``<tool_call>...</tool_call>`` is accepted too: after stripping whitespace, one
    open tag at the start and one close tag at the end are removed. The body must be a JSON object
    with exactly the keys ``name`` (an identifier) and ``arguments`` (an object whose values are
    strings, numbers, booleans or null: nested objects and arrays are refused). Text over
    :data:`MAX_TOOL_CALL_CHARS` is refused before parsing; NaN, Infinity and numbers that
    overflow to infinity, which :func:`json.loads` would accept, and repeated keys are refused
    too. Raises :class:`ToolCallError` with a one-line message under 80 characters.
    """
    if not isinstance(text, str):
        raise ToolCallError(f"tool call must be text, got {type(text).__name__}")
    if len(text) > MAX_TOOL_CALL_CHARS:
        raise ToolCallError(f"tool call is {len(text)} characters; the limit is "
                            f"{MAX_TOOL_CALL_CHARS}")
    body = text.strip()
    if body.startswith(TOOL_CALL_OPEN) and body.endswith(TOOL_CALL_CLOSE):
        body = body[len(TOOL_CALL_OPEN):-len(TOOL_CALL_CLOSE)].strip()
    if _nesting_depth(body) > _MAX_NESTING:
        # checked before parsing: how deep json.loads may recurse depends on the interpreter's
        # recursion limit, which the host process may have raised
        raise ToolCallError("tool call is nested too deeply")
    try:
        call = json.loads(body, object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                          parse_float=_finite_float)
    except RecursionError:
        raise ToolCallError("tool call is nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, or our hooks' refusals
        raise ToolCallError(_json_message(error)) from None
    if not isinstance(call, dict):
        raise ToolCallError(f"tool call must be a JSON object, got {_json_type(call)}")
    if set(call) != {"name", "arguments"}:
        extra = sorted(set(call) - {"name", "arguments"})
        missing = sorted({"name", "arguments"} - set(call))
        problem = f"unknown key {_short(extra[0])}" if extra else f"missing key {missing[0]!r}"
        raise ToolCallError(f"tool call: {problem}; keys are 'name' and 'arguments'")
    name, arguments = call["name"], call["arguments"]
    if not isinstance(name, str):
        raise ToolCallError(f"tool call: 'name' must be a string, got {_json_type(name)}")
    if not _NAME_RE.fullmatch(name):
        raise ToolCallError(f"tool call: no tool is named {_short(name)}")
    if not isinstance(arguments, dict):
        raise ToolCallError(f"tool call: 'arguments' must be an object, got {_json_type(arguments)}")
    for key, value in arguments.items():
        if not isinstance(value, _SCALARS):
            raise ToolCallError(f"tool call: argument {_short(key)} must be a JSON scalar, got "
                                f"{_json_type(value)}")
    return ToolCall(name, arguments)


def environment_tools(env) -> dict:
    """The tool methods of an environment instance by name, found by TRL's rule: every public
    function of its class except ``reset`` and ``get_reward``."""
    return {name: getattr(env, name)
            for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in _NOT_TOOLS and not name.startswith("_")}


def run_tool_call(env, body: str) -> str:
    """Parse a call's body, run it on ``env`` and return the reply text; never raises on the
    policy's text (a malformed call, an unknown tool or wrong argument names give an
    ``error: ...`` reply). The lab's tools return their own errors as replies; a tool that
    raises instead (an ``Exception``: a ``KeyError`` on an argument it did not expect, a
    ``TypeError`` from a positional-only parameter) is answered with
    ``error: <tool> raised <type>: <message>``, as TRL answers a failing tool with its error, so
    one bad call costs the policy a turn, not the training step. ``KeyboardInterrupt`` and the
    other non-``Exception`` signals still stop the run.
    """
    try:
        call = parse_tool_call(body)
    except ToolCallError as error:
        return f"{ERROR_PREFIX}{error}"
    tools = environment_tools(env)
    if call.name not in tools:
        return (f"{ERROR_PREFIX}no tool is named {_short(call.name)}; tools: "
                f"{', '.join(tools) or 'none'}")
    tool = tools[call.name]
    parameters = inspect.signature(tool).parameters
    kinds = {parameter.kind for parameter in parameters.values()}
    unknown = ([] if inspect.Parameter.VAR_KEYWORD in kinds
               else [key for key in call.arguments if key not in parameters])
    missing = [key for key, parameter in parameters.items()
               if parameter.default is parameter.empty and key not in call.arguments
               and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                          inspect.Parameter.VAR_KEYWORD)]
    if unknown or missing:
        problem = (f"unknown argument {_short(unknown[0])}" if unknown
                   else f"missing argument {missing[0]!r}")
        return f"{ERROR_PREFIX}{problem}; {call.name} takes {', '.join(parameters)}"
    try:
        return str(tool(**call.arguments))
    except Exception as error:  # noqa: BLE001 (the tool's failure is the policy's reply)
        return f"{ERROR_PREFIX}{call.name} raised {_error_text(error)}"


#: Longest text of a tool's exception quoted in its error reply (one line).
MAX_ERROR_CHARS = 160


def _error_text(error: Exception) -> str:
    """``<type>: <message>`` of a tool's exception on one ASCII line of at most
    :data:`MAX_ERROR_CHARS` characters (a message that cannot be printed is left out)."""
    try:
        message = " ".join(str(error).split()).encode("ascii", "backslashreplace").decode()
    except Exception:  # noqa: BLE001 (an exception whose __str__ fails still gets a reply)
        message = ""
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def _unique_keys(pairs: list) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key {_short(key)} is repeated")
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise ValueError(f"number {_short(text)} is out of range")
    return value


def _json_message(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"invalid JSON at {error.pos}: {error.msg.lower()}"
    return f"tool call: {error}"


def _json_type(value) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _short(text: str, limit: int = 16) -> str:
    """``ascii(text)`` cut to ``limit`` characters, so a reply stays one short ASCII line."""
    shown = ascii(text)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"
