# SPDX-License-Identifier: Apache-2.0
"""verl's agent loop over one episode: `KernelAgentLoop`, an `AgentLoopBase` registered as
"cuda_agent", for multi-turn rollouts in which the model works in the episode's sandbox and
is rewarded by the trusted evaluation of what its workspace holds at the end.

verl makes its agent loops in its own workers from a YAML list that
`actor_rollout_ref.rollout.agent.agent_loop_config_path` names:

    - name: cuda_agent
      _target_: cuda_agent.adapters.verl_agent_loop.KernelAgentLoop
      max_turns: 16                          # else rollout.multi_turn.max_assistant_turns, else 16
      cuda_agent_url: http://10.0.0.5:8080   # else extra_info["cuda_agent_url"], else $CUDA_AGENT_URL

and each data row names it (`agent_name: cuda_agent`, or `rollout.agent.default_agent_loop`).
Its task is `reward_model.ground_truth` (or `extra_info["task"]`), as for the reward function
`cuda_agent.adapters.verl.compute_score`; the token is `$CUDA_AGENT_TOKEN`.

A run opens an episode and puts SKILL.md and the tools in a system message before the row's
prompt; each turn the model's reply (its tokens, mask 1) is read for tool calls written as in
`cuda_agent.adapters.text_protocol`, which run in the episode's sandbox; their responses come
back as a user message (its tokens, mask 0: the model did not write them). A reply without a
tool call, the last turn, or a response grown to `rollout.response_length` ends the episode:
the tool calls of the last reply still run, then the evaluation of the workspace gives the
milestone reward (-1 to 3) as `reward_score`, so verl needs no reward function for these rows.
The episode is closed on every path. An evaluation that did not score the workspace (the
evaluation failed, or timed out, for reasons not the policy's), or a server that cannot be
reached, raises: the sample is not scored as the policy's failure.

Tokens go through the base class's Continuous Token helpers, which keep the chat template's
boundary tokens (mask 0) between turns as verl's own `ToolAgentLoop` does.
"""

import os
from typing import Any, Dict, List, Optional
from uuid import uuid4

from ..client import AsyncClient, AsyncEpisode, Json, Retry
from .text_protocol import parse_tool_calls, run_tool_calls, system_prompt
from .verl import _task_of

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.utils.profiler import simple_timer
    from verl.utils.rollout_trace import rollout_trace_op
except ImportError as missing:  # pragma: no cover - exercised only without verl
    raise ImportError("cuda_agent.adapters.verl_agent_loop needs verl (pip install verl; scripts/setup.sh installs "
                      "it without its heavy dependencies): %s" % missing) from missing

__all__ = ["KernelAgentLoop"]

DEFAULT_MAX_TURNS = 16


@register("cuda_agent")
class KernelAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, max_turns: Optional[int] = None, cuda_agent_url: Optional[str] = None,
                 evaluation_timeout_s: Optional[float] = None, retry: Optional[Retry] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        configured = self.rollout_config.get("multi_turn", {}).get("max_assistant_turns")
        self.max_turns = int(max_turns or configured or DEFAULT_MAX_TURNS)
        self.response_length = int(self.rollout_config.response_length)
        self.cuda_agent_url = cuda_agent_url
        self.evaluation_timeout_s = evaluation_timeout_s
        self.retry = retry or Retry()

    @rollout_trace_op
    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        task = _task_of((kwargs.get("reward_model") or {}).get("ground_truth"), extra_info)
        url = self.cuda_agent_url or extra_info.get("cuda_agent_url") or os.environ.get(
            "CUDA_AGENT_URL", "http://127.0.0.1:8080")
        metadata = {key: kwargs[key] for key in ("data_source", "index") if key in kwargs}
        async with AsyncClient(url, os.environ.get("CUDA_AGENT_TOKEN"), retry=self.retry) as client:
            episode = await client.open_episode(task, metadata={key: _plain(value) for key, value in metadata.items()})
            try:
                return await self._roll_out(episode, list(kwargs["raw_prompt"]), sampling_params)
            finally:
                await episode.close()

    async def _roll_out(self, episode: AsyncEpisode, prompt: List[Any],
                        sampling_params: Dict[str, Any]) -> AgentLoopOutput:
        messages = _with_system_prompt(system_prompt(episode.skill, episode.tools), prompt)
        token_ids = await self.ct_build_initial_tokens(messages)
        if len(token_ids) >= self.rollout_config.prompt_length:
            # verl cuts a longer prompt's beginning, which is SKILL.md and the tools.
            raise ValueError("the prompt (SKILL.md, the tools and the row's messages) fills rollout.prompt_length "
                             "(%d tokens); raise it" % self.rollout_config.prompt_length)
        mask: List[int] = []  # over the response: the tokens after the prompt
        logprobs: Optional[List[float]] = None
        metrics: Dict[str, Any] = {}
        extra_fields: Dict[str, Any] = {}
        request_id = uuid4().hex
        turns = tool_turns = 0
        while True:
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(request_id=request_id, prompt_ids=token_ids,
                                                            sampling_params=sampling_params)
            turns += 1
            if "num_preempted" not in metrics:  # -1: the server does not say
                metrics["num_preempted"] = output.num_preempted if output.num_preempted is not None else -1
            elif output.num_preempted:
                metrics["num_preempted"] += output.num_preempted
            # The server's fields as of the last turn, but the weights' version the episode began on.
            first_version = extra_fields.get("min_global_steps")
            extra_fields.update(output.extra_fields)
            if first_version is not None:
                extra_fields["min_global_steps"] = first_version
            if output.log_probs and logprobs is None:
                logprobs = [0.0] * len(mask)
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                token_ids, output.token_ids, mask, logprobs,
                assistant_logprobs=None if logprobs is None else (output.log_probs or [0.0] * len(output.token_ids)))
            token_ids = merged.token_ids
            reply = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": reply})

            calls = parse_tool_calls(reply)
            if not calls:
                ended = "done"
                break
            with simple_timer("tool_calls", metrics):
                responses = await run_tool_calls(episode, calls)
            if turns >= self.max_turns:
                ended = "max_turns"
                break
            before = list(messages)
            messages.append({"role": "user", "content": "\n".join(responses)})
            merged, grown_mask, grown_logprobs = await self.ct_merge_context_msg(
                before, messages, token_ids, mask, logprobs)
            if len(grown_mask) >= self.response_length:
                ended = "response_length"  # no room left for the model to read them and answer
                break
            token_ids, mask, logprobs = merged.token_ids, grown_mask, grown_logprobs
            tool_turns += 1

        with simple_timer("compute_score", metrics):
            status = await episode.finish(self.evaluation_timeout_s)
        if status.get("outcome") != "evaluated" or not isinstance(status.get("reward"), dict):
            raise RuntimeError("the evaluation of episode %s did not score its workspace (%s): %s"
                               % (episode.id, status.get("outcome"), status.get("message", "")))
        reward = float(status["reward"]["value"])
        prompt_ids = token_ids[:len(token_ids) - len(mask)]
        response_ids = token_ids[len(token_ids) - len(mask):]
        extra_fields.update({
            "turn_scores": [], "tool_rewards": [],  # the keys verl's own loops give every sample
            "reward_extra_info": {"correct": reward >= 1,
                                  "reason": (status.get("rejection") or {}).get("reason", "")},
            "cuda_agent": {"episode": episode.id, "evaluation": status.get("id"), "ended": ended},
        })
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:self.response_length],
            response_mask=mask[:self.response_length],
            response_logprobs=logprobs[:self.response_length] if logprobs else None,
            reward_score=reward,
            num_turns=1 + turns + tool_turns,  # the prompt, the model's turns, the tools' answers
            metrics=metrics,
            extra_fields=extra_fields,
        )


def _with_system_prompt(system: str, prompt: List[Any]) -> List[Json]:
    """The row's messages after SKILL.md and the tools; a system message of the row's own
    follows them in the one system message that chat templates allow."""
    messages = [dict(message) for message in prompt]
    if messages and messages[0].get("role") == "system":
        system += "\n\n" + str(messages.pop(0).get("content", ""))
    return [{"role": "system", "content": system}] + messages


def _plain(value: Any) -> Any:
    """A value of verl's batch (numpy's scalars among them) as JSON takes it."""
    return value.item() if hasattr(value, "item") else value
