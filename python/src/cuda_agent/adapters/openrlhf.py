# SPDX-License-Identifier: Apache-2.0
"""OpenRLHF's multi-turn agent over one episode: `AgentInstance` and `AgentExecutor`, the two
names OpenRLHF looks for in the file `--agent_func_path` names (point it at this module's file).

Each prompt's label holds the task (`{"name": ..., "source": ...}`, or its JSON text). `reset`
opens an episode and puts SKILL.md and the tools in front of the prompt; `step` runs the tool
calls of the model's text (`cuda_agent.adapters.text_protocol`) in the episode's sandbox and
hands back their responses; a reply without a tool call, or turn `$CUDA_AGENT_MAX_TURNS`
(default 16), ends the episode with the trusted reward (the milestone reward, -1 to 3) as
`rewards` and `scores`. The server is `$CUDA_AGENT_URL` (default http://127.0.0.1:8080) with
`$CUDA_AGENT_TOKEN`.

OpenRLHF's package imports transformers and more at import time; where it is installed this
module builds on its `AgentInstanceBase` and `MultiTurnAgentExecutor`, elsewhere on stand-ins
with the same interface (`openrlhf/utils/agent.py`: async `reset(states)` answering
{"observation"}, async `step(states)` answering {"rewards", "scores", "environment_feedback",
"done", "extra_logs"}).
"""

import json
import os
from typing import Any, Dict, Optional

from ..client import AsyncClient, AsyncEpisode, Json
from .text_protocol import parse_tool_calls, run_tool_calls, system_prompt

try:
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:
    class AgentInstanceBase:  # OpenRLHF's interface, for hosts without it
        def __init__(self, *args: Any, **kwargs: Any):
            pass

    class MultiTurnAgentExecutor:
        def __init__(self, agent_instance_cls: type):
            self.agent_instance_cls = agent_instance_cls

__all__ = ["AgentExecutor", "AgentInstance"]


def _task_of(label: Any) -> Json:
    task = json.loads(label) if isinstance(label, str) else label
    if not isinstance(task, dict) or "name" not in task or "source" not in task:
        raise ValueError("cuda_agent.adapters.openrlhf: the prompt's label must be the task, "
                         "{'name': ..., 'source': ...}, or its JSON text")
    return {"name": task["name"], "source": task["source"]}


def _reward(value: float) -> Any:
    try:  # OpenRLHF reads rewards as tensors (.item())
        import torch
        return torch.tensor(value)
    except ImportError:
        return value


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.client = AsyncClient(os.environ.get("CUDA_AGENT_URL", "http://127.0.0.1:8080"),
                                  os.environ.get("CUDA_AGENT_TOKEN"))
        self.max_turns = int(os.environ.get("CUDA_AGENT_MAX_TURNS", "16"))
        self.episode: Optional[AsyncEpisode] = None
        self.turns = 0

    async def reset(self, states: Dict[str, Any], **kwargs: Any) -> Dict[str, Any]:
        self.episode = await self.client.open_episode(_task_of(states.get("label")))
        self.turns = 0
        return {"observation": system_prompt(self.episode.skill, self.episode.tools) + "\n\n" +
                               str(states.get("observation", ""))}

    async def step(self, states: Dict[str, Any], **kwargs: Any) -> Dict[str, Any]:
        if self.episode is None:
            raise RuntimeError("AgentInstance.step before reset")
        self.turns += 1
        calls = parse_tool_calls(states.get("action_text", ""))
        responses = await run_tool_calls(self.episode, calls)
        if calls and self.turns < self.max_turns:
            return {"rewards": _reward(0.0), "scores": _reward(0.0), "environment_feedback": "\n".join(responses),
                    "done": False, "sampling_params": states.get("sampling_params"), "extra_logs": {}}
        status = await self.episode.finish()
        await self.episode.close()
        await self.client.close()
        evaluated = status.get("outcome") == "evaluated" and isinstance(status.get("reward"), dict)
        reward = float(status["reward"]["value"]) if evaluated else 0.0
        feedback = "\n".join(responses) + ("\n" if responses else "") + "Evaluated: reward %g." % reward
        return {"rewards": _reward(reward), "scores": _reward(reward), "environment_feedback": feedback, "done": True,
                "sampling_params": states.get("sampling_params"),
                "extra_logs": {"cuda_agent_reward": reward, "cuda_agent_masked": 0.0 if evaluated else 1.0}}


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
