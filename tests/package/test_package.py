# SPDX-License-Identifier: Apache-2.0
"""The Python package against a running cuda-agent serve (CPU slots, the real harness): the
blocking and asyncio clients, episodes, the Gymnasium-style environment, the verl reward
function; and against stub servers, how the clients retry; and its wheel."""

import asyncio
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

import httpx
import pytest

import cuda_agent
from cuda_agent.adapters import verl
from conftest import SOURCE, candidate_files


def test_evaluate_waits_for_the_reward_and_a_batch_gets_one_status_per_request(server_url, relu_task):
    with cuda_agent.Client(server_url) as client:
        assert client.health()["status"] == "ok"
        status = client.evaluate(relu_task, candidate_files("correct_relu", "one"), metadata={"sample": 1})
        assert status["outcome"] == "evaluated"
        assert status["reward"]["value"] == 1
        assert status["metadata"] == {"sample": 1}
        batch = client.submit([
            cuda_agent.evaluation_request(relu_task, candidate_files("correct_relu", "two")),
            cuda_agent.evaluation_request(relu_task, candidate_files("missing_last_element", "two")),
        ])
        rewards = [client.wait(each["id"], timeout_s=600)["reward"]["value"] for each in batch]
        assert rewards == [1, -1]


def test_a_request_and_an_episode_choose_their_policy(server_url, relu_task):
    strict = {"tolerance": "strict", "libraries": {"cublas": False}}
    with cuda_agent.Client(server_url) as client:
        status = client.evaluate(relu_task, candidate_files("correct_relu", "strict"), policy=strict)
        assert status["outcome"] == "evaluated" and status["reward"]["value"] == 1
        assert status["policy"]["tolerance"] == "strict" and status["policy"]["libraries"]["cublas"] is False
        with client.open_episode(relu_task, policy={"tolerance": "strict"}) as episode:
            assert episode.status()["policy"]["tolerance"] == "strict"
        # What the server cannot give is refused, naming the field.
        with pytest.raises(cuda_agent.ServiceError) as refused:
            client.evaluate(relu_task, candidate_files("correct_relu", "bad"), policy={"tolerance": "loose"})
        assert refused.value.status == 400 and "tolerance" in refused.value.message


def test_a_refusal_is_a_service_error_with_the_servers_status_and_code(server_url, relu_task):
    with cuda_agent.Client(server_url) as client:
        with pytest.raises(cuda_agent.ServiceError) as refused:
            client.evaluate(relu_task, {"evil.py": "import os\n"})
        assert refused.value.status == 400
        assert refused.value.code == "invalid_candidate"
        with pytest.raises(cuda_agent.ServiceError) as unknown:
            client.status("ev-none")
        assert unknown.value.status == 404


def test_the_asyncio_client_evaluates_side_by_side(server_url, relu_task):
    async def both():
        async with cuda_agent.AsyncClient(server_url) as client:
            return await asyncio.gather(
                client.evaluate(relu_task, candidate_files("correct_relu", "async")),
                client.evaluate(relu_task, candidate_files("missing_last_element", "async")))

    statuses = asyncio.run(both())
    assert [status["reward"]["value"] for status in statuses] == [1, -1]


def write_candidate(call, files):
    """The candidate written with the episode's own tools, over the starter."""
    assert not call("Bash", {"command": "rm -rf kernels/*"}).is_error
    call("Read", {"file_path": "model_new.py"})
    for path, content in files.items():
        written = call("Write", {"file_path": path, "content": content})
        assert not written.is_error, written.content


def test_an_episode_runs_tools_in_its_sandbox_and_finishes_with_the_trusted_reward(server_url, relu_task):
    with cuda_agent.Client(server_url) as client:
        with client.open_episode(relu_task, metadata={"rollout": 5}) as episode:
            assert "model_new.py" in episode.skill
            assert {tool["name"] for tool in episode.tools} >= {"Bash", "Read", "Write", "Compile", "Verify"}
            listed = episode.call("Bash", command="ls")
            assert not listed.is_error and "model.py" in listed.content
            write_candidate(episode.call, candidate_files("correct_relu", "episode"))
            verified = episode.call("Verify")
            assert not verified.is_error, verified.content
            status = episode.finish(timeout_s=600)
            assert status["reward"]["value"] == 1
            assert status["metadata"]["rollout"] == 5
            assert episode.status()["finished"] is True
        # Closed on leaving the block.
        with pytest.raises(cuda_agent.ServiceError) as gone:
            episode.call("Bash", command="ls")
        assert gone.value.status == 404


def test_the_gym_environment_steps_through_tool_calls_to_the_reward(server_url, relu_task):
    with cuda_agent.Client(server_url) as client:
        env = cuda_agent.KernelEnv(client, task=relu_task)
        observation, info = env.reset()
        assert "SKILL" in observation or "model_new.py" in observation
        assert any(tool["name"] == "Bash" for tool in info["tools"])
        # Mistakes the policy makes are observations, not exceptions.
        observation, reward, terminated, truncated, _ = env.step("not a tool call")
        assert observation.startswith("Error") and reward == 0 and not terminated and not truncated
        observation, _, _, _, step_info = env.step({"name": "Teleport", "arguments": {}})
        assert "no tool" in observation and step_info["is_error"]

        def call(name, arguments):
            observation, _, terminated, _, step_info = env.step({"name": name, "arguments": json.dumps(arguments)})
            assert not terminated
            return cuda_agent.ToolResult(observation, step_info.get("is_error", False), {})

        write_candidate(call, candidate_files("correct_relu", "gym"))
        observation, reward, terminated, truncated, info = env.step("finish")
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["mask_sample"] is False
        assert info["evaluation"]["outcome"] == "evaluated"
        env.close()


def test_the_gym_environment_truncates_at_max_steps_and_still_scores(server_url, relu_task):
    with cuda_agent.Client(server_url) as client:
        env = cuda_agent.KernelEnv(client, task=relu_task, max_steps=1)
        env.reset()
        _, reward, terminated, truncated, info = env.step({"name": "Bash", "arguments": {"command": "true"}})
        assert truncated and not terminated
        assert info["evaluation"]["stage"] == "finished"
        assert reward == info["evaluation"]["reward"]["value"]
        env.close()


def test_the_verl_reward_scores_the_completions_fenced_files(server_url, relu_task, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_URL", server_url)
    files = candidate_files("correct_relu", "verl")
    completion = "Here is the kernel.\n\n```python model_new.py\n%s```\n\n```cpp kernels/toolbox.cpp\n%s```\n" % (
        files["model_new.py"], files["kernels/toolbox.cpp"])
    scored = asyncio.run(verl.compute_score("kernelbench", completion, json.dumps(relu_task), {"index": 3}))
    assert scored["score"] == 1.0 and scored["correct"]
    nothing = asyncio.run(verl.compute_score("kernelbench", "I could not do it.", relu_task))
    assert nothing["score"] == -1.0
    with pytest.raises(ValueError):
        asyncio.run(verl.compute_score("kernelbench", completion, {"name": "no source"}))


def test_files_from_reply_takes_the_blocks_that_name_candidate_paths():
    reply = ("```python model_new.py\nfirst\n```\n"
             "```cuda kernels/relu.cu\n__global__ void k() {}\n```\n"
             "```text notes.txt\nignored\n```\n"
             "```cpp kernels/../escape.cpp\nignored\n```\n"
             "~~~python ./model_new.py\nsecond\n~~~\n"
             "```python\nno path\n```\n")
    assert cuda_agent.files_from_reply(reply) == {"model_new.py": "second\n",
                                                  "kernels/relu.cu": "__global__ void k() {}\n"}
    assert cuda_agent.files_from_reply("no code at all") == {}


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next of `answers` (status, body)."""

    answers = []

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        status, body = self.answers.pop(0) if self.answers else (500, {"error": {"code": "x", "message": "x"}})
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *arguments):
        pass


@pytest.fixture
def scripted_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def test_the_clients_retry_what_the_server_could_not_take(scripted_server):
    busy = (503, {"error": {"code": "draining", "message": "restarting"}})
    _Scripted.answers[:] = [busy, (429, {"error": {"code": "queue_full", "message": "full"}}), (200, {"status": "ok"})]
    url = "http://127.0.0.1:%d" % scripted_server.server_address[1]
    quick = cuda_agent.Retry(attempts=3, first_delay_s=0.01, max_delay_s=0.02)
    with cuda_agent.Client(url, retry=quick) as client:
        assert client.health() == {"status": "ok"}
    # Out of attempts: the last refusal, as the server gave it.
    _Scripted.answers[:] = [busy, busy, busy]
    with cuda_agent.Client(url, retry=quick) as client:
        with pytest.raises(cuda_agent.ServiceError) as refused:
            client.health()
    assert (refused.value.status, refused.value.code) == (503, "draining")

    async def asynchronous():
        async with cuda_agent.AsyncClient(url, retry=quick) as client:
            return await client.health()

    _Scripted.answers[:] = [busy, (200, {"status": "ok"})]
    assert asyncio.run(asynchronous()) == {"status": "ok"}


def test_a_server_that_is_not_there_fails_after_the_retries():
    with cuda_agent.Client("http://127.0.0.1:9", retry=cuda_agent.Retry(attempts=2, first_delay_s=0.01)) as client:
        with pytest.raises(httpx.ConnectError):
            client.health()


def test_the_wheel_builds_and_its_package_imports():
    with tempfile.TemporaryDirectory() as work:
        # Built from a copy: setuptools leaves its build tree beside the sources.
        project = pathlib.Path(work) / "project"
        shutil.copytree(SOURCE / "python", project, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir",
             work, str(project)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-2000:]
        wheels = list(pathlib.Path(work).glob("cuda_agent-*.whl"))
        assert len(wheels) == 1
        target = pathlib.Path(work) / "site"
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                                    str(target), str(wheels[0])], capture_output=True, text=True)
        assert installed.returncode == 0, installed.stderr[-2000:]
        imported = subprocess.run(
            [sys.executable, "-c", "import cuda_agent, cuda_agent.adapters.verl; print(cuda_agent.__file__)"],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)}, cwd=work)
        assert imported.returncode == 0, imported.stderr[-2000:]
        assert imported.stdout.strip().startswith(str(target))
