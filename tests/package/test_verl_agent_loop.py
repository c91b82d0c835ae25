# SPDX-License-Identifier: Apache-2.0
"""verl's agent loop against a running cuda-agent serve, built on verl's own AgentLoopBase
(verl installed without its dependencies, plus the few its agent loop's imports need).

The loop is made as verl's workers make it: from the YAML list that
`rollout.agent.agent_loop_config_path` names, through Hydra, with verl's Qwen token builder.
Its model is a scripted server manager that answers canned replies, and its tokenizer a
byte-level one with a ChatML template, built here (nothing is downloaded)."""

import asyncio
import json

import httpx
import pytest

import cuda_agent
from conftest import candidate_files

agent_loop = pytest.importorskip("verl.experimental.agent_loop.agent_loop",
                                 reason="verl is not installed (scripts/setup.sh installs it)")

import hydra.utils  # noqa: E402  (verl's dependencies, there wherever verl imports)
from omegaconf import OmegaConf  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from cuda_agent.adapters import verl_agent_loop  # noqa: E402

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# What README.md of the package tells users to write.
AGENT_LOOP_YAML = """
- name: cuda_agent
  _target_: cuda_agent.adapters.verl_agent_loop.KernelAgentLoop
  max_turns: %d
  cuda_agent_url: %s
"""

LOGPROB = -0.25


@pytest.fixture(scope="module")
def tokenizer():
    """Every byte a token of its own, and ChatML's markers: any text round-trips."""
    vocab = {char: index for index, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    model = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    model.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], chat_template=CHATML)


class ScriptedServer:
    """verl's server manager as the loop sees it: `generate` answers the next canned reply,
    ended by the stop token as a model's is, with a log-probability for each token."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts = []
        self.answers = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        assert sampling_params["temperature"] == 1.0
        self.prompts.append(list(prompt_ids))
        reply = self.replies.pop(0) if self.replies else "Done."
        token_ids = self.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        self.answers.append(token_ids)
        return TokenOutput(token_ids=token_ids, log_probs=[LOGPROB] * len(token_ids), stop_reason="completed",
                           extra_fields={"max_global_steps": len(self.prompts)})


def call(name, **arguments):
    return "<tool_call>\n%s\n</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def run_loop(tokenizer, server, task, *, url, max_turns=8, prompt_length=65536, response_length=32768, retry=None,
             **loop_options):
    """One rollout of the agent loop as verl's AgentLoopWorker makes and runs it."""
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": prompt_length, "response_length": response_length,
        "multi_turn": {"max_assistant_turns": None}}}, "data": {}})
    (entry,) = OmegaConf.create(AGENT_LOOP_YAML % (max_turns, url))
    row = {"raw_prompt": [{"role": "user", "content": "Make this model faster."}], "data_source": "kernelbench",
           "reward_model": {"style": "rule", "ground_truth": json.dumps(task)}, "extra_info": {"index": 7},
           "index": 7, "tools_kwargs": {}}

    async def rollout():
        loop = hydra.utils.instantiate(
            config=entry, trainer_config=agent_loop.DictConfigWrap(config), server_manager=server,
            tokenizer=tokenizer, processor=None, hf_model_type="qwen2", dataset_cls=None,
            data_config=agent_loop.DictConfigWrap(config.data), tools=agent_loop.ToolListWrap([]), **loop_options)
        assert isinstance(loop, agent_loop.AgentLoopBase)
        if retry is not None:  # an object Hydra's arguments would turn into a config
            loop.retry = retry
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **row)

    return asyncio.run(rollout())


def assert_closed(server_url, episode_id):
    with cuda_agent.Client(server_url) as client:
        with pytest.raises(cuda_agent.ServiceError) as gone:
            client.request("GET", "/v1/episodes/" + episode_id)
    assert gone.value.status == 404


def record_opened_episodes(patch, opened):
    """Keeps the episodes the loop opens in `opened`, for runs that end in an exception."""
    original = cuda_agent.AsyncClient.open_episode

    async def recording(self, *args, **kwargs):
        opened.append(await original(self, *args, **kwargs))
        return opened[-1]

    patch.setattr(cuda_agent.AsyncClient, "open_episode", recording)


def test_the_loop_is_registered_under_its_name():
    assert agent_loop._agent_loop_registry["cuda_agent"] == {
        "_target_": "cuda_agent.adapters.verl_agent_loop.KernelAgentLoop"}


def test_tool_calls_reach_the_reward_and_their_results_are_masked_out(server_url, relu_task, tokenizer):
    files = candidate_files("correct_relu", "verl-agent-loop")
    first = "I will write the kernel.\n" + call("Bash", command="rm -rf kernels/*")
    first += call("Read", file_path="model_new.py")
    first += "".join(call("Write", file_path=path, content=content) for path, content in files.items())
    first += call("Teleport")
    server = ScriptedServer(tokenizer, [first, "The candidate is ready."])
    output = run_loop(tokenizer, server, relu_task, url=server_url)

    assert output.reward_score == 1.0
    assert output.extra_fields["reward_extra_info"] == {"correct": True, "reason": ""}
    assert output.extra_fields["cuda_agent"]["ended"] == "done"
    assert output.extra_fields["max_global_steps"] == 2
    assert output.num_turns == 4  # the prompt, two replies, one round of tool results
    assert len(server.prompts) == 2

    # The prompt: SKILL.md and the tools as the system message, then the row's prompt.
    prompt = tokenizer.decode(output.prompt_ids)
    assert prompt.startswith("<|im_start|>system\n") and "<tools>" in prompt and '"name": "Bash"' in prompt
    assert prompt.endswith("<|im_start|>user\nMake this model faster.<|im_end|>\n<|im_start|>assistant\n")
    assert output.prompt_ids == server.prompts[0]

    # The response: the first reply (mask 1), the tools' results (mask 0), the second reply (mask 1).
    reply1, reply2 = server.answers
    observed = len(server.prompts[1]) - len(server.prompts[0]) - len(reply1)
    assert observed > 0
    assert output.prompt_ids + output.response_ids == server.prompts[1] + reply2
    assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs)
    assert output.response_mask == [1] * len(reply1) + [0] * observed + [1] * len(reply2)
    assert output.response_logprobs == [LOGPROB] * len(reply1) + [0.0] * observed + [LOGPROB] * len(reply2)
    results = tokenizer.decode(output.response_ids[len(reply1):len(reply1) + observed])
    assert results.startswith("\n<|im_start|>user\n<tool_response>")  # Qwen's builder adds the newline
    assert results.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert results.count("<tool_response>") == 3 + len(files)
    assert "no tool 'Teleport'" in results
    assert_closed(server_url, output.extra_fields["cuda_agent"]["episode"])


def test_the_turn_limit_ends_the_episode_with_its_reward_and_closes_it(server_url, relu_task, tokenizer):
    server = ScriptedServer(tokenizer, [call("Bash", command="true")] * 5)
    output = run_loop(tokenizer, server, relu_task, url=server_url, max_turns=2)
    assert len(server.prompts) == 2
    assert output.extra_fields["cuda_agent"]["ended"] == "max_turns"
    assert isinstance(output.reward_score, float)
    # The last turn's results are not in the response: nothing of the model's follows them.
    last = server.answers[-1]
    assert output.response_ids[-len(last):] == last and output.response_mask[-len(last):] == [1] * len(last)
    assert output.prompt_ids + output.response_ids == server.prompts[1] + last
    assert_closed(server_url, output.extra_fields["cuda_agent"]["episode"])


def test_a_reply_without_a_tool_call_finishes_the_episode(server_url, relu_task, tokenizer):
    server = ScriptedServer(tokenizer, ["I have nothing to change."])
    output = run_loop(tokenizer, server, relu_task, url=server_url)
    assert len(server.prompts) == 1
    assert output.extra_fields["cuda_agent"]["ended"] == "done"
    assert output.response_ids == server.answers[0] and output.response_mask == [1] * len(server.answers[0])
    assert output.num_turns == 2 and isinstance(output.reward_score, float)
    assert_closed(server_url, output.extra_fields["cuda_agent"]["episode"])


def test_a_response_with_no_room_for_the_tools_results_ends_the_episode(server_url, relu_task, tokenizer):
    server = ScriptedServer(tokenizer, [call("Read", file_path="model.py")])
    output = run_loop(tokenizer, server, relu_task, url=server_url, response_length=200)
    assert len(server.prompts) == 1
    assert output.extra_fields["cuda_agent"]["ended"] == "response_length"
    assert output.response_ids == server.answers[0] and set(output.response_mask) == {1}
    assert len(output.response_ids) <= 200
    assert_closed(server_url, output.extra_fields["cuda_agent"]["episode"])


def test_an_evaluation_that_does_not_score_raises_and_the_episode_is_still_closed(server_url, relu_task, tokenizer):
    # A workspace of its own (no cached result), and no time to wait for its evaluation.
    server = ScriptedServer(tokenizer, [call("Bash", command="echo '# unscored' >> model_new.py"), "Done."])
    opened = []
    with pytest.MonkeyPatch.context() as patch:
        record_opened_episodes(patch, opened)
        with pytest.raises(RuntimeError, match="did not score"):
            run_loop(tokenizer, server, relu_task, url=server_url, evaluation_timeout_s=0.001)
    assert len(server.prompts) == 2
    assert_closed(server_url, opened[0].id)


def test_a_prompt_that_verl_would_cut_is_refused_and_the_episode_closed(server_url, relu_task, tokenizer):
    server = ScriptedServer(tokenizer, ["Done."])
    opened = []
    with pytest.MonkeyPatch.context() as patch:
        record_opened_episodes(patch, opened)
        with pytest.raises(ValueError, match="fills rollout.prompt_length"):
            run_loop(tokenizer, server, relu_task, url=server_url, prompt_length=1000)
    assert server.prompts == []
    assert_closed(server_url, opened[0].id)


def test_an_unreachable_server_raises_before_the_model_is_asked(relu_task, tokenizer):
    server = ScriptedServer(tokenizer, ["Done."])
    with pytest.raises(httpx.ConnectError):
        run_loop(tokenizer, server, relu_task, url="http://127.0.0.1:9", retry=cuda_agent.Retry(attempts=1))
    assert server.prompts == []
