# SPDX-License-Identifier: Apache-2.0
"""The SkyRL environment against a running cuda-agent serve, built on SkyRL's own
BaseTextEnv (skyrl-gym installed without its dependencies, plus the few its imports need)."""

import json

import pytest

from cuda_agent.adapters import skyrl
from cuda_agent.adapters.text_protocol import ToolCallError, parse_tool_calls
from conftest import candidate_files

base_text_env = pytest.importorskip("skyrl_gym.envs.base_text_env",
                                    reason="skyrl-gym is not installed (scripts/setup.sh installs it)")


def call(name, **arguments):
    return "<tool_call>\n%s\n</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def test_the_environment_is_a_skyrl_text_env_and_runs_an_episode_to_its_reward(server_url, relu_task):
    env = skyrl.KernelTextEnv({"cuda_agent_url": server_url},
                              {"reward_spec": {"ground_truth": json.dumps(relu_task)}, "max_turns": 8})
    assert isinstance(env, base_text_env.BaseTextEnv)
    prompt, info = env.init([{"role": "user", "content": "Make it faster."}])
    assert prompt[0]["role"] == "system" and "<tools>" in prompt[0]["content"] and "Bash" in prompt[0]["content"]
    assert prompt[1]["content"] == "Make it faster." and info["episode"].startswith("ep-")

    files = candidate_files("correct_relu", "skyrl")
    reply = "Let me write it.\n" + call("Bash", command="rm -rf kernels/*") + call("Read", file_path="model_new.py")
    for path, content in files.items():
        reply += call("Write", file_path=path, content=content)
    reply += call("Teleport") + "<tool_call>{broken</tool_call>"
    step = env.step(reply)
    assert not step["done"] and step["reward"] == 0.0
    observation = step["observations"][0]["content"]
    assert observation.count("<tool_response>") == 6
    assert "no tool 'Teleport'" in observation and "not valid JSON" in observation

    verified = env.step(call("Verify"))["observations"][0]["content"]
    assert "<tool_response>" in verified
    done = env.step("The candidate is ready.")
    assert done["done"] and done["reward"] == 1.0
    assert done["metadata"]["mask_sample"] is False
    env.close()


def test_the_last_turn_ends_the_episode_with_its_reward(server_url, relu_task):
    env = skyrl.KernelTextEnv({"cuda_agent_url": server_url}, {"task": relu_task, "max_turns": 1})
    env.init([])
    step = env.step(call("Bash", command="true"))
    assert step["done"] and step["metadata"]["evaluation"]["stage"] == "finished"
    env.close()


def test_a_row_without_a_task_is_refused_before_anything_opens():
    with pytest.raises(ValueError):
        skyrl.KernelTextEnv({}, {"reward_spec": {"ground_truth": {"name": "x"}}})


def test_tool_calls_are_read_in_order_and_broken_ones_say_why():
    calls = parse_tool_calls(call("Read", file_path="a") + "text" +
                             '<tool_call>{"name": "Bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>' +
                             '<tool_call>{"arguments": {}}</tool_call>')
    assert calls[:2] == [("Read", {"file_path": "a"}), ("Bash", {"command": "ls"})]
    assert isinstance(calls[2], ToolCallError)
    assert parse_tool_calls("no calls here") == []
