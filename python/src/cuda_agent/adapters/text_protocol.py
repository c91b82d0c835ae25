# SPDX-License-Identifier: Apache-2.0
"""Tool calls written in a model's text, for trainers whose environments take the reply as
text (SkyRL, OpenRLHF, OpenEnv, verl's agent loop): the Hermes convention that Qwen and many
open models are trained on.

    <tool_call>
    {"name": "Bash", "arguments": {"command": "ls kernels"}}
    </tool_call>

Each call's result goes back as `<tool_response>...</tool_response>`. A reply without a tool
call ends the episode: the model says it is done.
"""

import json
import re
from typing import List, Tuple, Union

from ..client import AsyncEpisode, Json, ServiceError, ToolResult

__all__ = ["ToolCallError", "parse_tool_calls", "run_tool_calls", "system_prompt", "tool_response",
           "unknown_tool_response"]

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class ToolCallError(str):
    """A tool call the reply meant but that cannot be run (its JSON is broken): the text to
    show the model instead of a result."""


ToolCall = Union[Tuple[str, Json], ToolCallError]


def system_prompt(skill: str, tools: List[Json]) -> str:
    """SKILL.md, then the tools as JSON Schemas and how to call them."""
    described = "\n".join(json.dumps({"type": "function", "function": {
        "name": tool["name"], "description": tool["description"], "parameters": tool["parameters"]}})
        for tool in tools)
    return (skill.rstrip() + "\n\n# Tools\n\nYou may call one or more of these functions. Their signatures, as JSON "
            "Schemas:\n<tools>\n" + described + "\n</tools>\n\nFor each call, write a JSON object with the "
            "function's name and arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\nEach result comes back '
            "inside <tool_response></tool_response> tags. When the workspace holds your final candidate, reply "
            "without a tool call: that ends the episode, and the candidate is evaluated.")


def parse_tool_calls(reply: str) -> List[ToolCall]:
    """The calls of `reply`, in order: (name, arguments), or a `ToolCallError` in its place."""
    calls: List[ToolCall] = []
    for match in _CALL.finditer(reply):
        try:
            call = json.loads(match.group(1))
        except ValueError as error:
            calls.append(ToolCallError("Error: the tool call is not valid JSON (%s)." % error))
            continue
        arguments = call.get("arguments", {}) if isinstance(call, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                arguments = None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(arguments, dict):
            calls.append(ToolCallError('Error: a tool call is {"name": "...", "arguments": {...}}.'))
            continue
        calls.append((call["name"], arguments))
    return calls


def tool_response(result: Union[ToolResult, str]) -> str:
    content = result if isinstance(result, str) else result.content
    return "<tool_response>\n" + content + "\n</tool_response>"


def unknown_tool_response(error: Exception) -> str:
    """The response to a call of a tool the episode lacks (a `ServiceError` with code
    "unknown_tool"): the model's mistake, which it reads; any other error is raised again."""
    if getattr(error, "code", None) != "unknown_tool":
        raise error
    return tool_response("Error: " + getattr(error, "message", str(error)))


async def run_tool_calls(episode: AsyncEpisode, calls: List[ToolCall]) -> List[str]:
    """Runs `calls` in `episode`, in order: each one's `tool_response`. The model's mistakes (a
    broken call, a tool the episode lacks) are answered for it to read; any other failure raises."""
    responses = []
    for call in calls:
        if isinstance(call, ToolCallError):
            responses.append(tool_response(str(call)))
            continue
        try:
            responses.append(tool_response(await episode.call(*call)))
        except ServiceError as error:
            responses.append(unknown_tool_response(error))
    return responses
