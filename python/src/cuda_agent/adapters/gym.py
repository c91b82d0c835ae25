# SPDX-License-Identifier: Apache-2.0
"""`KernelEnv`: a Gymnasium-style environment over one episode of the service, for trainers
and agent frameworks that drive `reset` and `step` (no Gymnasium import needed).

    env = KernelEnv(cuda_agent.Client(url))
    observation, info = env.reset(options={"task": task})   # SKILL.md; info["tools"]
    observation, reward, terminated, truncated, info = env.step(
        {"name": "Bash", "arguments": {"command": "ls kernels"}})
    ...
    observation, reward, terminated, truncated, info = env.step({"name": "finish"})

An action is a tool call (a dict, or its JSON text): the observation is the tool's text and
the reward 0. The action "finish", or the step that reaches `max_steps`, ends the episode with
the trusted evaluation of the workspace: its reward (the milestone reward, -1 to 3) and the
evaluation's status in `info["evaluation"]`. An evaluation that failed for reasons not the
policy's sets `info["mask_sample"]`, so that a trainer leaves the sample out.
"""

import json
from typing import Any, Dict, Optional, Tuple, Union

from ..client import Client, Episode, Json, ServiceError

__all__ = ["KernelEnv"]

FINISH = "finish"


class KernelEnv:
    metadata = {"render_modes": []}

    def __init__(self, client: Client, *, task: Optional[Json] = None, max_steps: Optional[int] = None,
                 evaluation_timeout_s: Optional[float] = None):
        self.client = client
        self.task = task
        self.max_steps = max_steps
        self.evaluation_timeout_s = evaluation_timeout_s
        self.episode: Optional[Episode] = None
        self.steps = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Tuple[str, Json]:
        """Opens a new episode (on `options["task"]`, else the task given at construction)."""
        del seed  # the task decides what happens; nothing here is random
        self.close()
        task = (options or {}).get("task", self.task)
        if task is None:
            raise ValueError("KernelEnv.reset: give a task (options={'task': ...}, or KernelEnv(task=...))")
        self.episode = self.client.open_episode(task, metadata=(options or {}).get("metadata"))
        self.steps = 0
        info = {"episode": self.episode.id, "tools": self.episode.tools, "files": self.episode.files}
        return self.episode.skill, info

    def step(self, action: Union[str, Json]) -> Tuple[str, float, bool, bool, Json]:
        if self.episode is None:
            raise RuntimeError("KernelEnv.step before reset")
        call = _parse_action(action)
        self.steps += 1
        if call is None:
            return "Error: an action is a tool call, {\"name\": ..., \"arguments\": {...}}, or finish.", 0.0, \
                False, self._truncated(), {}
        name, arguments = call
        if name == FINISH:
            return self._finish(truncated=False)
        try:
            result = self.episode.call(name, arguments)
        except ServiceError as error:
            if error.code != "unknown_tool":
                raise
            # The model named a tool the episode lacks: its mistake, which it reads.
            return "Error: " + error.message, 0.0, False, self._truncated(), {"is_error": True}
        if self._truncated():
            observation, reward, terminated, truncated, info = self._finish(truncated=True)
            return result.content + "\n\n" + observation, reward, terminated, truncated, info
        return result.content, 0.0, False, False, {"is_error": result.is_error, "metadata": result.metadata}

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None

    def _truncated(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps

    def _finish(self, truncated: bool) -> Tuple[str, float, bool, bool, Json]:
        status = self.episode.finish(self.evaluation_timeout_s)
        info: Json = {"evaluation": status, "mask_sample": status.get("outcome") != "evaluated"}
        reward = float(status["reward"]["value"]) if isinstance(status.get("reward"), dict) else 0.0
        observation = "Evaluated: reward %g. %s" % (reward, (status.get("rejection") or {}).get("message", ""))
        return observation.strip(), reward, not truncated, truncated, info


def _parse_action(action: Union[str, Json]) -> Optional[Tuple[str, Json]]:
    if isinstance(action, str):
        if action.strip() == FINISH:
            return FINISH, {}
        try:
            action = json.loads(action)
        except ValueError:
            return None
    if not isinstance(action, dict) or not isinstance(action.get("name"), str):
        return None
    arguments = action.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return action["name"], arguments
