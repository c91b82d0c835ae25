# SPDX-License-Identifier: Apache-2.0
"""An OpenEnv environment (`openenv.core.env_server.interfaces.Environment`) over one episode
of the service, for TRL and the other trainers that drive OpenEnv environments.

    env = KernelEnvironment("http://127.0.0.1:8080", task=task)
    observation = env.reset()                  # SKILL.md and the tools; observation.tools
    observation = env.step(KernelAction(text='<tool_call>{"name": "Bash", ...}</tool_call>'))
    observation = env.step(KernelAction(tool="Verify"))
    observation = env.step(KernelAction(text="Done."))   # done, with the reward

An action is the model's reply as text, its tool calls written as in
`cuda_agent.adapters.text_protocol` (a reply without one ends the episode), or one tool call
(`tool`, `arguments`; the tool "finish" ends the episode). The observation's `content` is the
tools' responses and its reward 0; the step that ends the episode, or step `max_steps`, carries
the trusted evaluation of the workspace: its reward (the milestone reward, -1 to 3), the
evaluation's status as `evaluation`, and `mask_sample` where it failed for reasons not the
policy's. The episode is closed on the server once evaluated. A tool the episode lacks, or a
broken tool call, is answered in `content` for the model to read.

The task of each episode is `reset(task=...)`, else the `task` given at construction: one
task, a list (chosen by `reset(seed=...)`), or a function of the seed. The server is `url`,
else `$CUDA_AGENT_URL` (default http://127.0.0.1:8080), with `token`, else `$CUDA_AGENT_TOKEN`.

`create_app(...)` serves the environment as OpenEnv's HTTP and WebSocket server (FastAPI;
OpenEnv's package imports FastAPI itself, so it is there wherever OpenEnv imports), and
`KernelEnvClient` is OpenEnv's client of that server, typed with this module's models.
Each WebSocket session of the server is its own episode.
"""

import functools
import os
import random
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import httpx

from ..client import Client, Episode, Json, Retry, ServiceError
from .text_protocol import ToolCallError, parse_tool_calls, system_prompt, tool_response

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
except ImportError as missing:  # pragma: no cover - exercised only without OpenEnv
    raise ImportError("cuda_agent.adapters.openenv needs OpenEnv's package (pip install openenv-core; "
                      "scripts/setup.sh installs it without its heavy dependencies): %s" % missing) from missing

from pydantic import Field, model_validator

__all__ = ["KernelAction", "KernelEnvClient", "KernelEnvironment", "KernelObservation", "KernelState", "create_app"]

FINISH = "finish"

TaskChoice = Union[Json, Sequence[Json], Callable[[Optional[int]], Json]]


class KernelAction(Action):
    """The model's turn: its reply `text` with tool calls, or one call (`tool`, `arguments`)."""

    text: Optional[str] = Field(default=None, description="The reply, its tool calls in <tool_call> tags; "
                                                          "a reply without one ends the episode")
    tool: Optional[str] = Field(default=None, description='One tool to call; "finish" ends the episode')
    arguments: Dict[str, Any] = Field(default_factory=dict, description="The arguments of `tool`")

    @model_validator(mode="after")
    def _one_form(self) -> "KernelAction":
        if (self.text is None) == (self.tool is None):
            raise ValueError("a KernelAction is either the reply's text or one tool call (tool, arguments)")
        return self


class KernelObservation(Observation):
    content: str = Field(default="", description="At reset the system prompt (SKILL.md and the tools); then the "
                                                 "tools' responses; at the end the evaluation's summary")
    is_error: bool = Field(default=False, description="Whether a tool call of the step failed")
    tools: List[Json] = Field(default_factory=list, description="The episode's tools (at reset)")
    files: List[str] = Field(default_factory=list, description="The workspace's files (at reset)")
    # Fields rather than metadata: OpenEnv's server leaves metadata out of what it sends.
    evaluation: Optional[Json] = Field(default=None, description="The evaluation's status, once the episode ends")
    mask_sample: bool = Field(default=False, description="The evaluation failed for reasons not the policy's: "
                                                         "leave the sample out of training")


class KernelState(State):
    task: Optional[str] = Field(default=None, description="The name of the episode's task")
    finished: bool = Field(default=False, description="Whether the episode has been evaluated")


class KernelEnvironment(Environment[KernelAction, KernelObservation, KernelState]):
    # Each instance has an episode of its own on the server, which keeps them apart.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, task: Optional[TaskChoice] = None,
                 max_steps: int = 16, evaluation_timeout_s: Optional[float] = None, retry: Optional[Retry] = None):
        super().__init__()
        self.url = url or os.environ.get("CUDA_AGENT_URL", "http://127.0.0.1:8080")
        self.token = token if token is not None else os.environ.get("CUDA_AGENT_TOKEN")
        self.task = task
        self.max_steps = max_steps
        self.evaluation_timeout_s = evaluation_timeout_s
        self.retry = retry or Retry()
        # Made at the first reset: OpenEnv's server makes instances only to read their metadata.
        self._client: Optional[Client] = None
        self._episode: Optional[Episode] = None
        self._state = KernelState()

    # --- OpenEnv's interface -----------------------------------------------------------
    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, task: Optional[Json] = None,
              **kwargs: Any) -> KernelObservation:
        """Closes the episode in progress, if any, and opens one on the task (see the module)."""
        self._close_episode()
        chosen = self._choose_task(task, seed)
        metadata = {"openenv_episode_id": episode_id} if episode_id else None
        with self._reaching_the_server():
            self._episode = self._connected().open_episode(chosen, metadata=metadata)
        self._state = KernelState(episode_id=self._episode.id, step_count=0, task=chosen["name"])
        return KernelObservation(content=system_prompt(self._episode.skill, self._episode.tools),
                                 tools=self._episode.tools, files=sorted(self._episode.files), reward=0.0,
                                 metadata={"episode": self._episode.id})

    def step(self, action: KernelAction, timeout_s: Optional[float] = None, **kwargs: Any) -> KernelObservation:
        """Runs the action's tool calls; `timeout_s` bounds the wait for an ending step's evaluation."""
        if isinstance(action, dict):  # what a caller outside OpenEnv's server may hand over
            action = KernelAction(**action)
        if self._episode is None:
            raise RuntimeError("KernelEnvironment.step: no episode in progress (reset opens one%s)" %
                               (", the last one is over" if self._state.finished else ""))
        self._state.step_count += 1
        with self._reaching_the_server():
            if action.tool is not None:
                if action.tool == FINISH:
                    return self._finish("", timeout_s)
                responses, is_error = self._run_calls([(action.tool, action.arguments)])
                content = responses[0]
            else:
                calls = parse_tool_calls(action.text)
                if not calls:
                    return self._finish("", timeout_s)
                responses, is_error = self._run_calls(calls)
                content = "\n".join(tool_response(response) for response in responses)
            if self._state.step_count >= self.max_steps:
                return self._finish(content + "\n\n", timeout_s, truncated=True)
        return KernelObservation(content=content, is_error=is_error, reward=0.0, done=False)

    @property
    def state(self) -> KernelState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="cuda-agent", description="Write a faster CUDA/C++ kernel for a PyTorch "
                                   "model with the episode's tools; rewarded by the trusted evaluation of the "
                                   "workspace (correctness, then speedup)")

    def close(self) -> None:
        self._close_episode()
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- the episode -------------------------------------------------------------------
    def _choose_task(self, task: Optional[Json], seed: Optional[int]) -> Json:
        choice = task if task is not None else self.task
        if callable(choice):
            choice = choice(seed)
        elif isinstance(choice, Sequence) and not isinstance(choice, (str, dict)):
            choice = random.Random(seed).choice(list(choice)) if choice else None
        if not isinstance(choice, dict) or "name" not in choice or "source" not in choice:
            raise ValueError("KernelEnvironment.reset: no task ({'name': ..., 'source': ...}); give one as "
                             "reset(task=...) or KernelEnvironment(task=...)")
        return {"name": choice["name"], "source": choice["source"]}

    def _run_calls(self, calls: List[Any]) -> Tuple[List[str], bool]:
        """Each call's text, and whether any failed; the model's mistakes are answered, not raised."""
        responses, is_error = [], False
        for call in calls:
            if isinstance(call, ToolCallError):
                responses.append(str(call))
                is_error = True
                continue
            try:
                result = self._episode.call(*call)
            except ServiceError as error:
                if error.code != "unknown_tool":
                    raise
                # The model named a tool the episode lacks: its mistake, which it reads.
                responses.append("Error: " + error.message)
                is_error = True
                continue
            responses.append(result.content)
            is_error = is_error or result.is_error
        return responses, is_error

    def _finish(self, before: str, timeout_s: Optional[float], truncated: bool = False) -> KernelObservation:
        status = self._episode.finish(timeout_s if timeout_s is not None else self.evaluation_timeout_s)
        evaluated = status.get("outcome") == "evaluated" and isinstance(status.get("reward"), dict)
        reward = float(status["reward"]["value"]) if evaluated else 0.0
        summary = "Evaluated: reward %g. %s" % (reward, (status.get("rejection") or {}).get("message", ""))
        self._state.finished = True
        self._close_episode()
        return KernelObservation(content=before + summary.strip(), reward=reward, done=True, evaluation=status,
                                 mask_sample=not evaluated, metadata={"truncated": truncated})

    def _close_episode(self) -> None:
        if self._episode is not None:
            episode, self._episode = self._episode, None
            with self._reaching_the_server():
                episode.close()

    def _connected(self) -> Client:
        if self._client is None:
            self._client = Client(self.url, self.token, retry=self.retry)
        return self._client

    @contextmanager
    def _reaching_the_server(self) -> Iterator[None]:
        try:
            yield
        except httpx.TransportError as error:
            raise ConnectionError("KernelEnvironment: the cuda-agent server at %s could not be reached (%s: %s); "
                                  "is `cuda-agent serve` running there?" %
                                  (self.url, type(error).__name__, error)) from error


def create_app(url: Optional[str] = None, token: Optional[str] = None, *, max_concurrent_envs: int = 8,
               **environment_options: Any):
    """OpenEnv's FastAPI app serving `KernelEnvironment` (each WebSocket session an episode of its
    own, up to `max_concurrent_envs` at once). Run it with uvicorn:
    `uvicorn.run(create_app(url, task=tasks), host="0.0.0.0", port=8000)`."""
    factory = functools.partial(KernelEnvironment, url, token, **environment_options)
    return create_fastapi_app(factory, KernelAction, KernelObservation, max_concurrent_envs=max_concurrent_envs)


class KernelEnvClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """OpenEnv's client of a server from `create_app`: `KernelEnvClient(base_url=...).sync()`
    for the blocking form; `reset(task=..., seed=...)` as on the environment."""

    def _step_payload(self, action: KernelAction) -> Dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: Dict[str, Any]) -> "StepResult[KernelObservation]":
        observation = KernelObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> KernelState:
        return KernelState(**payload)
