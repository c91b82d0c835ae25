# SPDX-License-Identifier: Apache-2.0
"""A SkyRL environment (`skyrl_gym.envs.base_text_env.BaseTextEnv`) over one episode.

Register it with SkyRL and name it in the dataset's `env_class`:

    from skyrl_gym.envs import register
    register(id="cuda_agent", entry_point="cuda_agent.adapters.skyrl:KernelTextEnv")

Each data row's `extras` holds the task, as `extras["task"]` or
`extras["reward_spec"]["ground_truth"]` (`{"name": ..., "source": ...}`, or its JSON text), and
optionally `max_turns` (default 16). The server is `env_config.cuda_agent_url`, else
`$CUDA_AGENT_URL` (default http://127.0.0.1:8080), with `$CUDA_AGENT_TOKEN`.

`init` opens the episode and puts SKILL.md and the tools in front of the prompt; each `step`
runs the reply's tool calls (`cuda_agent.adapters.text_protocol`) in the episode's sandbox;
a reply without one, or the last turn, ends the episode with the trusted reward (the
milestone reward, -1 to 3). An evaluation that failed for reasons not the policy's is
reported in the metadata as `mask_sample`.
"""

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from ..client import Client, Episode, Json, ServiceError
from .text_protocol import ToolCallError, parse_tool_calls, system_prompt, tool_response, unknown_tool_response

try:  # the real base class where SkyRL is installed
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError:  # pragma: no cover - exercised only without SkyRL
    class BaseTextEnv:  # the part of SkyRL's interface this environment uses
        def __init__(self):
            self.turns = 0
            self.max_turns = 1

    def BaseTextEnvStepOutput(**fields):  # noqa: N802 (SkyRL's TypedDict is called like a class)
        return dict(fields)

__all__ = ["KernelTextEnv"]


def _setting(env_config: Any, key: str) -> Optional[str]:
    if env_config is None:
        return None
    if isinstance(env_config, dict):
        return env_config.get(key)
    return getattr(env_config, key, None)


class KernelTextEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__()
        extras = extras or {}
        task = extras.get("task") or (extras.get("reward_spec") or {}).get("ground_truth")
        if isinstance(task, str):
            task = json.loads(task)
        if not isinstance(task, dict) or "name" not in task or "source" not in task:
            raise ValueError("KernelTextEnv: extras must hold the task ({'name': ..., 'source': ...}) as 'task' or "
                             "reward_spec.ground_truth")
        self.task: Json = {"name": task["name"], "source": task["source"]}
        self.max_turns = int(extras.get("max_turns", 16))
        url = _setting(env_config, "cuda_agent_url") or os.environ.get("CUDA_AGENT_URL", "http://127.0.0.1:8080")
        self.client = Client(url, os.environ.get("CUDA_AGENT_TOKEN"))
        self.episode: Optional[Episode] = None

    def init(self, prompt: List[Dict[str, str]]) -> Tuple[List[Dict[str, str]], Dict[str, Any]]:
        self.episode = self.client.open_episode(self.task)
        self.turns = 0
        system = {"role": "system", "content": system_prompt(self.episode.skill, self.episode.tools)}
        return [system] + list(prompt), {"episode": self.episode.id}

    def step(self, action: str):
        if self.episode is None:
            raise RuntimeError("KernelTextEnv.step before init")
        self.turns += 1
        calls = parse_tool_calls(action)
        if not calls:
            return self._finish()
        responses = []
        for call in calls:
            if isinstance(call, ToolCallError):
                responses.append(tool_response(str(call)))
                continue
            name, arguments = call
            try:
                responses.append(tool_response(self.episode.call(name, arguments)))
            except ServiceError as error:
                responses.append(unknown_tool_response(error))
        if self.turns >= self.max_turns:
            return self._finish()
        return BaseTextEnvStepOutput(observations=[{"role": "user", "content": "\n".join(responses)}], reward=0.0,
                                     done=False, metadata={"tool_calls": len(calls)})

    def _finish(self):
        status = self.episode.finish()
        evaluated = status.get("outcome") == "evaluated" and isinstance(status.get("reward"), dict)
        reward = float(status["reward"]["value"]) if evaluated else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True,
                                     metadata={"evaluation": status, "mask_sample": not evaluated})

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None
        self.client.close()
