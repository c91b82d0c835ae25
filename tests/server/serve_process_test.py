#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cuda-agent serve as a process, on CPU slots with the real harness:

1. two candidates of the adversarial suite (a correct ReLU, one that misses the last
   element) are submitted in one batch and waited for: rewards 1 and -1;
   then an episode through the NeMo-Gym routes: the correct candidate written with the
   Write tool in the episode's sandbox, passed by its Verify tool, and /verify answers
   with reward 1;
2. the server is killed (SIGKILL) right after it accepted two more; started again on the
   same state directory, it runs them and answers for every earlier result;
3. SIGTERM drains: the evaluation it holds finishes, a new request is refused with 503,
   and the process exits 0.

    serve_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


class Server:
    def __init__(self, binary, state, log):
        self.port_file = state.parent / "port"
        if self.port_file.exists():
            self.port_file.unlink()
        self.log = open(log, "a")
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", str(self.port_file), "--state-dir",
             str(state), "--device", "cpu", "--slots-per-device", "2", "--build-workers", "1", "--no-profile"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not self.port_file.exists():
            if self.process.poll() is not None:
                fail("the server exited with %s before listening (log: %s)" % (self.process.returncode, log))
            if time.time() > deadline:
                fail("the server did not listen within 60 s")
            time.sleep(0.1)
        self.base = "http://127.0.0.1:%s" % self.port_file.read_text().strip()

    def call(self, method, path, body=None, headers=None, answer_headers=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=900) as response:
                if answer_headers is not None:
                    answer_headers.update(response.headers.items())
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


def candidate(root, name, marker=""):
    adversarial = root / "tests" / "adversarial"
    model = (adversarial / "candidates" / name / "model_new.py").read_text()
    kernel = (adversarial / "kernels" / "cpu" / "toolbox.cpp").read_text()
    task = (adversarial / "tasks" / "cpu" / "relu.py").read_text()
    return {"task": {"name": "relu", "source": task},
            "candidate": {"files": {"model_new.py": model + ("\n# %s\n" % marker if marker else ""),
                                    "kernels/toolbox.cpp": kernel}},
            "metadata": {"candidate": name}}


def nemo_gym_episode(server, root):
    """An episode as a NeMo-Gym agent runs one: seed, tool routes with the cookie, verify."""
    relu = candidate(root, "correct_relu")
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Write ModelNew."}]},
           "task": relu["task"]}
    headers = {}
    code, seeded = server.call("POST", "/seed_session", row, answer_headers=headers)
    if code != 200 or "Set-Cookie" not in headers:
        fail("/seed_session answered %s: %s %s" % (code, seeded, headers))
    session = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    names = [tool["name"] for tool in seeded["tools"]]
    for needed in ("Bash", "Read", "Write", "Compile", "Verify", "Profile"):
        if needed not in names:
            fail("the episode has no %s tool: %s" % (needed, names))

    def tool(name, arguments):
        code, result = server.call("POST", "/" + name, arguments, headers=session)
        if code != 200:
            fail("/%s answered %s: %s" % (name, code, result))
        return result

    if tool("Bash", {"command": "rm -rf kernels/* && ls"})["is_error"]:
        fail("Bash failed in the episode's sandbox")
    tool("Read", {"file_path": "model_new.py"})
    for path, content in relu["candidate"]["files"].items():
        written = tool("Write", {"file_path": path, "content": content})
        if written["is_error"]:
            fail("Write %s: %s" % (path, written["content"]))
    verified = tool("Verify", {})
    if verified["is_error"]:
        fail("the Verify tool refused the correct candidate: %s" % verified["content"][:800])
    code, verdict = server.call("POST", "/verify", {"responses_create_params": row["responses_create_params"],
                                                    "response": {"id": "resp-1", "output": []}}, headers=session)
    if code != 200 or verdict.get("reward") != 1 or verdict.get("mask_sample"):
        fail("/verify answered %s: %s" % (code, json.dumps(verdict)[:800]))
    server.call("POST", "/close_session", {}, headers=session)


def expect_reward(status, value, what):
    if status.get("stage") != "finished" or status.get("outcome") != "evaluated":
        fail("%s: not evaluated: %s" % (what, json.dumps(status)[:800]))
    if status["reward"]["value"] != value:
        fail("%s: reward %s, expected %s: %s" % (what, status["reward"]["value"], value,
                                                 json.dumps(status.get("rejection"))[:400]))


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    work = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-serve-test-"))
    os.chmod(work, 0o755)
    state = work / "state"
    log = work / "serve.log"
    try:
        # 1. A batch, waited for.
        server = Server(binary, state, log)
        code, answer = server.call("POST", "/v1/evaluations?wait=600", {"requests": [
            candidate(root, "correct_relu"), candidate(root, "missing_last_element")]})
        if code != 200:
            fail("the batch answered %s: %s" % (code, answer))
        expect_reward(answer["evaluations"][0], 1, "correct_relu")
        expect_reward(answer["evaluations"][1], -1, "missing_last_element")
        first_ids = [status["id"] for status in answer["evaluations"]]
        print("batch: rewards 1 and -1")
        nemo_gym_episode(server, root)
        print("episode: written and verified with the tools, /verify reward 1")

        # 2. Killed with two accepted; started again.
        code, answer = server.call("POST", "/v1/evaluations", {"requests": [
            candidate(root, "correct_relu", "again"), candidate(root, "missing_last_element", "again")]})
        if code != 202:
            fail("the second batch answered %s: %s" % (code, answer))
        pending = [status["id"] for status in answer["evaluations"]]
        server.process.kill()
        server.process.wait()
        server = Server(binary, state, log)
        code, health = server.call("GET", "/healthz")
        if code != 200 or health["recovered"] < 1:
            fail("after SIGKILL, the new server recovered nothing: %s" % health)
        for identifier, value in zip(first_ids, (1, -1)):
            expect_reward(server.call("GET", "/v1/evaluations/" + identifier)[1], value, "earlier " + identifier)
        for identifier, value in zip(pending, (1, -1)):
            expect_reward(server.call("GET", "/v1/evaluations/%s?wait=600" % identifier)[1], value,
                          "recovered " + identifier)
        print("SIGKILL: %d recovered and finished; earlier results kept" % health["recovered"])

        # 3. SIGTERM drains.
        code, answer = server.call("POST", "/v1/evaluations", candidate(root, "correct_relu", "drain"))
        held = answer["evaluations"][0]["id"]
        server.process.send_signal(signal.SIGTERM)
        deadline = time.time() + 30
        while True:
            code, refusal = server.call("POST", "/v1/evaluations", candidate(root, "correct_relu", "late"))
            if code == 503:
                break
            if time.time() > deadline:
                fail("a request during the drain answered %s: %s" % (code, refusal))
            time.sleep(0.05)
        if refusal["error"]["code"] != "draining":
            fail("the refusal during the drain: %s" % refusal)
        if server.process.wait(timeout=600) != 0:
            fail("the drained server exited with %s" % server.process.returncode)
        journal = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines() if line]
        finished = [record for record in journal if record["type"] == "finished" and record["id"] == held]
        if not finished:
            fail("the evaluation held at SIGTERM did not finish before the exit")
        expect_reward(finished[0]["status"], 1, "drained " + held)
        print("SIGTERM: the held evaluation finished, a new one got 503, exit 0")
    finally:
        print("--- server log (tail) ---")
        if log.exists():
            print("\n".join(log.read_text().splitlines()[-15:]))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
