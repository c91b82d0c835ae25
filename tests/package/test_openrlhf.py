# SPDX-License-Identifier: Apache-2.0
"""OpenRLHF's multi-turn agent against a running cuda-agent serve. OpenRLHF's package pulls in
transformers when imported, so the test drives the agent as `MultiTurnAgentExecutor.execute`
does (openrlhf/utils/agent.py): reset with {"observation", "label"}, then step with
{"observation_text", "action_text", "label", "sampling_params"} until done."""

import asyncio
import json

from cuda_agent.adapters import openrlhf
from conftest import candidate_files


def call(name, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def test_an_agent_instance_works_through_tool_calls_to_the_trusted_reward(server_url, relu_task, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_URL", server_url)
    executor = openrlhf.AgentExecutor()
    assert executor.agent_instance_cls is openrlhf.AgentInstance

    async def episode():
        agent = openrlhf.AgentInstance()
        reset = await agent.reset({"observation": "Write a faster ReLU.", "label": json.dumps(relu_task)})
        assert "<tools>" in reset["observation"] and reset["observation"].endswith("Write a faster ReLU.")
        files = candidate_files("correct_relu", "openrlhf")
        action = call("Bash", command="rm -rf kernels/*") + call("Read", file_path="model_new.py")
        for path, content in files.items():
            action += call("Write", file_path=path, content=content)
        step = await agent.step({"observation_text": reset["observation"], "action_text": action,
                                 "label": json.dumps(relu_task), "sampling_params": None})
        assert step["done"] is False and float(step["rewards"]) == 0.0
        assert step["environment_feedback"].count("<tool_response>") == 4
        final = await agent.step({"observation_text": "", "action_text": "Done.", "label": json.dumps(relu_task),
                                  "sampling_params": None})
        return final

    final = asyncio.run(episode())
    assert final["done"] is True
    assert final["rewards"].item() == 1.0 and final["scores"].item() == 1.0
    assert final["extra_logs"]["cuda_agent_masked"] == 0.0
    assert "Evaluated: reward 1" in final["environment_feedback"]
