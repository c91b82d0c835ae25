#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A coordinator (cuda-agent serve --workers-only) with two cuda-agent worker processes on
CPU slots, with the real harness:

1. tokens: a client's token does not open the worker routes (403), a worker's token does
   not open the client routes (401);
2. a batch of correct and wrong candidates is spread over both workers; one worker is
   killed (SIGKILL) while it holds requests; the coordinator finds it lost, gives what it
   held to the other, and every request gets exactly one result, with the right reward;
3. the killed worker started again registers and takes work; SIGTERM makes a worker
   deregister and exit 0.

    workers_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
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

CLIENT_TOKEN = "client-token-0123456789abcdef"
WORKER_TOKEN = "worker-token-0123456789abcdef"


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def call(base, method, path, body=None, token=CLIENT_TOKEN, timeout=900):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            return response.status, (json.loads(body) if body.strip().startswith(b"{") else body.decode())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def candidate(root, name, marker):
    adversarial = root / "tests" / "adversarial"
    model = (adversarial / "candidates" / name / "model_new.py").read_text()
    kernel = (adversarial / "kernels" / "cpu" / "toolbox.cpp").read_text()
    task = (adversarial / "tasks" / "cpu" / "relu.py").read_text()
    return {"task": {"name": "relu", "source": task},
            "candidate": {"files": {"model_new.py": model + "\n# %s\n" % marker, "kernels/toolbox.cpp": kernel}},
            "metadata": {"candidate": name}}


def start_worker(binary, base, work, name, log):
    token_file = work / "worker.token"
    token_file.write_text(WORKER_TOKEN + "\n")
    return subprocess.Popen(
        [binary, "worker", "--coordinator", base, "--token-file", str(token_file), "--name", name, "--device", "cpu",
         "--slots-per-device", "1", "--build-workers", "1", "--capacity", "2", "--cache-dir", str(work / "cache"),
         "--work-dir", str(work / name)],
        stdout=log, stderr=subprocess.STDOUT)


def workers(base):
    code, answer = call(base, "GET", "/v1/workers")
    if code != 200:
        fail("GET /v1/workers answered %s: %s" % (code, answer))
    return {entry["registration"]["name"]: entry for entry in answer["workers"]}


def wait_until(what, predicate, seconds):
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            fail("%s: not within %d s" % (what, seconds))
        time.sleep(0.2)


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    work = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-workers-test-"))
    os.chmod(work, 0o755)
    log_path = work / "processes.log"
    log = open(log_path, "a")
    processes = []
    try:
        (work / "tokens").write_text(CLIENT_TOKEN + " trainer\n")
        (work / "worker-tokens").write_text(WORKER_TOKEN + " node\n")
        port_file = work / "port"
        coordinator = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--state-dir",
             str(work / "state"), "--device", "cpu", "--no-profile", "--workers-only", "--tokens",
             str(work / "tokens"), "--worker-tokens", str(work / "worker-tokens"), "--worker-timeout-s", "3",
             "--no-episodes"],
            stdout=log, stderr=subprocess.STDOUT)
        processes.append(coordinator)
        wait_until("the coordinator listens", port_file.exists, 60)
        base = "http://127.0.0.1:%s" % port_file.read_text().strip()

        # 1. Tokens.
        code, answer = call(base, "POST", "/v1/workers", {"name": "intruder", "capacity": 1})
        if code != 403 or answer["error"]["code"] != "not_a_worker":
            fail("a client's token registered a worker: %s %s" % (code, answer))
        code, answer = call(base, "POST", "/v1/evaluations", candidate(root, "correct_relu", "x"),
                            token=WORKER_TOKEN)
        if code != 401:
            fail("a worker's token submitted an evaluation: %s %s" % (code, answer))
        print("tokens: a client cannot act as a worker, nor a worker as a client")

        steady = start_worker(binary, base, work, "steady", log)
        doomed = start_worker(binary, base, work, "doomed", log)
        processes += [steady, doomed]
        wait_until("both workers register", lambda: len(workers(base)) == 2, 120)

        # 2. A batch; one worker killed while it holds requests.
        names = ["correct_relu", "missing_last_element"] * 4
        code, answer = call(base, "POST", "/v1/evaluations", {"requests": [
            candidate(root, name, "batch-%d" % i) for i, name in enumerate(names)]})
        if code != 202:
            fail("the batch answered %s: %s" % (code, answer))
        ids = [status["id"] for status in answer["evaluations"]]
        wait_until("the doomed worker holds requests", lambda: workers(base).get("doomed", {}).get("holds", 0) > 0, 300)
        doomed.kill()
        doomed.wait()
        print("killed the worker 'doomed' while it held %s" % "requests")
        for identifier, name in zip(ids, names):
            code, status = call(base, "GET", "/v1/evaluations/%s?wait=600" % identifier)
            if code != 200 or status["stage"] != "finished" or status["outcome"] != "evaluated":
                fail("%s (%s): %s" % (identifier, name, json.dumps(status)[:800]))
            expected = 1 if name == "correct_relu" else -1
            if status["reward"]["value"] != expected:
                fail("%s (%s): reward %s, expected %s: %s" % (identifier, name, status["reward"]["value"], expected,
                                                              json.dumps(status.get("rejection"))[:600] + json.dumps((status.get("evaluation") or {}).get("compile"))[:3000]))
        code, metrics = call(base, "GET", "/metrics")
        requeued = [line for line in metrics.splitlines() if line.startswith("cuda_agent_evaluations_requeued_total ")]
        finished = [line for line in metrics.splitlines()
                    if line.startswith('cuda_agent_evaluations_finished_total{outcome="evaluated"}')]
        if not requeued or float(requeued[0].split()[1]) < 1:
            fail("nothing was re-queued after the kill: %s" % requeued)
        if not finished or float(finished[0].split()[1]) != len(names):
            fail("the coordinator counted %s results for %d requests" % (finished, len(names)))
        if "doomed" in workers(base):
            fail("the killed worker is still registered")
        journal = [json.loads(line) for line in (work / "state" / "journal.jsonl").read_text().splitlines() if line]
        for identifier in ids:
            results = [record for record in journal if record["type"] == "finished" and record["id"] == identifier]
            if len(results) != 1:
                fail("%s has %d results in the journal" % (identifier, len(results)))
        print("batch: %d requests, each with exactly one result; %s" % (len(names), requeued[0]))

        # 3. Back again, then SIGTERM.
        again = start_worker(binary, base, work, "doomed", log)
        processes.append(again)
        wait_until("the restarted worker registers", lambda: "doomed" in workers(base), 120)
        code, status = call(base, "POST", "/v1/evaluations?wait=600", candidate(root, "correct_relu", "after"))
        if code != 200 or status["evaluations"][0]["reward"]["value"] != 1:
            fail("after the restart: %s %s" % (code, json.dumps(status)[:600]))
        again.send_signal(signal.SIGTERM)
        if again.wait(timeout=120) != 0:
            fail("the worker exited with %s after SIGTERM" % again.returncode)
        wait_until("the stopped worker deregisters", lambda: "doomed" not in workers(base), 10)
        print("restart: registered again and evaluated; SIGTERM: deregistered, exit 0")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        log.close()
        print("--- coordinator and worker log (tail) ---")
        print("\n".join(log_path.read_text().splitlines()[-25:]))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
