# SPDX-License-Identifier: Apache-2.0
"""The OpenEnv environment against a running cuda-agent serve, built on OpenEnv's own
Environment, Action, Observation and State (openenv-core installed without its dependencies,
plus the few its imports need), and served by OpenEnv's own server to its own client."""

import json
import socket
import threading
import time

import pytest

import cuda_agent
from conftest import candidate_files

interfaces = pytest.importorskip("openenv.core.env_server.interfaces",
                                 reason="OpenEnv (openenv-core) is not installed (scripts/setup.sh installs it)")
from cuda_agent.adapters import openenv  # noqa: E402  (needs OpenEnv, checked above)


def call(name, **arguments):
    return "<tool_call>\n%s\n</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def test_an_episode_through_openenv_s_interface_reaches_the_reward_and_reset_opens_a_fresh_one(server_url,
                                                                                                relu_task):
    env = openenv.KernelEnvironment(server_url, task=relu_task)
    assert isinstance(env, interfaces.Environment)
    first = env.reset()
    assert isinstance(first, openenv.KernelObservation) and not first.done
    assert "<tools>" in first.content and {"Bash", "Write", "Verify"} <= {tool["name"] for tool in first.tools}
    assert "model_new.py" in first.files
    episode_id = env.state.episode_id
    assert episode_id.startswith("ep-") and env.state.step_count == 0 and env.state.task == "relu"

    reply = "Let me write it.\n" + call("Bash", command="rm -rf kernels/*") + call("Read", file_path="model_new.py")
    for path, content in candidate_files("correct_relu", "openenv").items():
        reply += call("Write", file_path=path, content=content)
    reply += call("Teleport") + "<tool_call>{broken</tool_call>"
    step = env.step(openenv.KernelAction(text=reply))
    assert not step.done and step.reward == 0.0 and step.is_error
    assert step.content.count("<tool_response>") == 6
    assert "no tool 'Teleport'" in step.content and "not valid JSON" in step.content

    verified = env.step(openenv.KernelAction(tool="Verify"))
    assert not verified.done and "<tool_response>" not in verified.content
    done = env.step(openenv.KernelAction(text="The candidate is ready."))
    assert done.done and done.reward == 1.0 and not done.mask_sample
    assert done.evaluation["outcome"] == "evaluated" and done.content.startswith("Evaluated: reward 1")
    assert (env.state.episode_id, env.state.step_count, env.state.finished) == (episode_id, 3, True)

    # Evaluated, the episode is gone from the server, and the environment takes no more steps.
    with cuda_agent.Client(server_url) as client:
        with pytest.raises(cuda_agent.ServiceError) as gone:
            client.request("GET", "/v1/episodes/" + episode_id)
    assert gone.value.status == 404
    with pytest.raises(RuntimeError, match="reset"):
        env.step(openenv.KernelAction(tool="Bash", arguments={"command": "ls"}))

    again = env.reset()
    assert not again.done and env.state.episode_id != episode_id
    assert (env.state.step_count, env.state.finished) == (0, False)
    env.close()


def test_a_wrong_candidate_gets_the_rejection_reward(server_url, relu_task):
    env = openenv.KernelEnvironment(server_url, task=[relu_task])
    env.reset(seed=3)
    assert not env.step(openenv.KernelAction(tool="Bash", arguments={"command": "rm -rf kernels/*"})).is_error
    assert not env.step(openenv.KernelAction(tool="Read", arguments={"file_path": "model_new.py"})).is_error
    for path, content in candidate_files("missing_last_element", "openenv").items():
        written = env.step({"tool": "Write", "arguments": {"file_path": path, "content": content}})
        assert not written.is_error, written.content
    unknown = env.step(openenv.KernelAction(tool="Teleport"))
    assert unknown.is_error and unknown.content.startswith("Error: ") and "Teleport" in unknown.content
    done = env.step(openenv.KernelAction(tool="finish"))
    assert done.done and done.reward == -1.0 and not done.mask_sample
    assert done.evaluation["rejection"]["message"] in done.content
    env.close()


def test_the_last_step_ends_the_episode_with_its_evaluation(server_url, relu_task):
    env = openenv.KernelEnvironment(server_url, task=lambda seed: relu_task, max_steps=1)
    env.reset()
    step = env.step(openenv.KernelAction(text=call("Bash", command="echo hello")))
    assert step.done and step.metadata["truncated"] and "hello" in step.content
    assert step.evaluation["stage"] == "finished"
    env.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_openenv_s_server_and_client_run_an_episode_per_session(server_url, relu_task):
    uvicorn = pytest.importorskip("uvicorn")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(openenv.create_app(server_url, max_concurrent_envs=2), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 30
        while not server.started:
            assert thread.is_alive() and time.time() < deadline, "OpenEnv's server did not start"
            time.sleep(0.05)
        with openenv.KernelEnvClient(base_url="http://127.0.0.1:%d" % port).sync() as env:
            opened = env.reset(task=relu_task)
            assert not opened.done and "<tools>" in opened.observation.content
            state = env.state()
            assert isinstance(state, openenv.KernelState) and state.episode_id.startswith("ep-")
            listed = env.step(openenv.KernelAction(tool="Bash", arguments={"command": "ls"}))
            assert not listed.done and "model_new.py" in listed.observation.content
            finished = env.step(openenv.KernelAction(tool="finish"))
            assert finished.done and finished.observation.evaluation["stage"] == "finished"
            assert finished.reward == finished.observation.evaluation["reward"]["value"]
            assert env.state().step_count == 2
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_an_unreachable_server_is_a_clear_error(relu_task):
    env = openenv.KernelEnvironment("http://127.0.0.1:9", task=relu_task, retry=cuda_agent.Retry(attempts=1))
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:9 could not be reached"):
        env.reset()
    assert env.state.episode_id is None
    with pytest.raises(RuntimeError):
        env.step(openenv.KernelAction(tool="Bash", arguments={"command": "ls"}))
    env.close()


def test_actions_and_tasks_are_checked_before_anything_opens():
    with pytest.raises(ValueError):
        openenv.KernelAction()
    with pytest.raises(ValueError):
        openenv.KernelAction(text="hi", tool="Bash")
    env = openenv.KernelEnvironment("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="no task"):
        env.reset()
    with pytest.raises(ValueError, match="no task"):
        openenv.KernelEnvironment("http://127.0.0.1:9", task=[]).reset()
