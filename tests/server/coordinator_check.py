# SPDX-License-Identifier: Apache-2.0
"""What the process tests of a coordinator with remote workers share, whoever starts the
workers (by hand, Ray, Slurm): the coordinator on loopback with client and worker tokens,
the HTTP calls, and the batch of real candidates during which one worker is killed and
after which every request must have exactly one result, with the right reward."""

import contextlib
import json
import pathlib
import shutil
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
            return response.status, (json.loads(body) if body.strip()[:1] in (b"{", b"[") else body.decode())
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, text.decode(errors="replace")


def wait_until(what, predicate, seconds, every=0.2):
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            fail("%s: not within %d s" % (what, seconds))
        time.sleep(every)


def candidate(root, name, marker):
    """A request for one of the suite's CPU candidates on its ReLU task; `marker` makes its
    files, and so its cache key, its own."""
    adversarial = pathlib.Path(root) / "tests" / "adversarial"
    model = (adversarial / "candidates" / name / "model_new.py").read_text()
    kernel = (adversarial / "kernels" / "cpu" / "toolbox.cpp").read_text()
    task = (adversarial / "tasks" / "cpu" / "relu.py").read_text()
    return {"task": {"name": "relu", "source": task},
            "candidate": {"files": {"model_new.py": model + "\n# %s\n" % marker, "kernels/toolbox.cpp": kernel}},
            "metadata": {"candidate": name}}


def write_tokens(work):
    """The client and worker token files a coordinator is started with, and a worker's own."""
    work = pathlib.Path(work)
    (work / "tokens").write_text(CLIENT_TOKEN + " trainer\n")
    (work / "worker-tokens").write_text(WORKER_TOKEN + " node\n")
    (work / "worker.token").write_text(WORKER_TOKEN + "\n")
    return work / "worker.token"


def start_coordinator(binary, work, log, extra=()):
    """`cuda-agent serve --workers-only` on a free loopback port; returns (process, base URL)."""
    work = pathlib.Path(work)
    write_tokens(work)
    port_file = work / "port"
    process = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--state-dir",
         str(work / "state"), "--device", "cpu", "--no-profile", "--workers-only", "--tokens", str(work / "tokens"),
         "--worker-tokens", str(work / "worker-tokens"), "--worker-timeout-s", "3", "--no-episodes", *extra],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not port_file.exists():
        if process.poll() is not None:
            fail("the coordinator exited with %s before it listened" % process.returncode)
        if time.time() > deadline:
            fail("the coordinator did not listen within 60 s")
        time.sleep(0.2)
    return process, "http://127.0.0.1:%s" % port_file.read_text().strip()


def worker_arguments(work, name):
    """A worker's options for CPU slots that share the test's compile cache."""
    work = pathlib.Path(work)
    return ["--device", "cpu", "--slots-per-device", "1", "--build-workers", "1", "--capacity", "2",
            "--cache-dir", str(work / "cache"), "--work-dir", str(work / name)]


def start_worker(binary, base, work, name, log):
    """A `cuda-agent worker` process named `name`, with the worker token and CPU slots."""
    return subprocess.Popen(
        [binary, "worker", "--coordinator", base, "--token-file", str(pathlib.Path(work) / "worker.token"), "--name",
         name, *worker_arguments(work, name)],
        stdout=log, stderr=subprocess.STDOUT)


def workers(base):
    code, answer = call(base, "GET", "/v1/workers")
    if code != 200:
        fail("GET /v1/workers answered %s: %s" % (code, answer))
    return {entry["registration"]["name"]: entry for entry in answer["workers"]}


def metric(base, name):
    """The value of the sample `name` (with its labels, as /metrics writes them)."""
    code, metrics = call(base, "GET", "/metrics")
    if code != 200:
        fail("GET /metrics answered %s: %s" % (code, metrics))
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    fail("/metrics has no %s" % name)


def expect_rewards(base, ids, names):
    """Waits for each evaluation and checks it was evaluated with its candidate's reward (1
    for a correct ReLU, -1 for a wrong one); returns their statuses."""
    statuses = []
    for identifier, name in zip(ids, names):
        code, status = call(base, "GET", "/v1/evaluations/%s?wait=600" % identifier)
        if code != 200 or status["stage"] != "finished" or status["outcome"] != "evaluated":
            fail("%s (%s): %s" % (identifier, name, json.dumps(status)[:800]))
        expected = 1 if name == "correct_relu" else -1
        if status["reward"]["value"] != expected:
            fail("%s (%s): reward %s, expected %s: %s" % (identifier, name, status["reward"]["value"], expected,
                                                          json.dumps(status.get("rejection"))[:600]))
        statuses.append(status)
    return statuses


def expect_one_result_each(work, ids):
    """Checks that the coordinator's journal holds exactly one result for each evaluation."""
    journal = [json.loads(line) for line in (pathlib.Path(work) / "state" / "journal.jsonl").read_text().splitlines()
               if line]
    for identifier in ids:
        results = [record for record in journal if record["type"] == "finished" and record["id"] == identifier]
        if len(results) != 1:
            fail("%s has %d results in the journal" % (identifier, len(results)))


def batch_losing_a_worker(base, root, work, kill, size=8):
    """Submits `size` candidates (correct and wrong ReLUs), calls `kill()` once some worker
    holds requests (it returns the name of the worker it killed), and checks that every
    request finished once, with the right reward, that the coordinator re-queued what the
    killed worker held and forgot it, and that the journal has one result per request."""
    names = ["correct_relu", "missing_last_element"] * (size // 2)
    code, answer = call(base, "POST", "/v1/evaluations", {"requests": [
        candidate(root, name, "batch-%d" % i) for i, name in enumerate(names)]})
    if code != 202:
        fail("the batch answered %s: %s" % (code, answer))
    ids = [status["id"] for status in answer["evaluations"]]
    holding = {}
    wait_until("a worker holds requests",
               lambda: holding.update({name: entry for name, entry in workers(base).items() if entry.get("holds", 0)})
               or holding, 300)
    killed = kill(holding)
    print("killed the worker %r while it held requests" % killed)
    expect_rewards(base, ids, names)
    requeued = metric(base, "cuda_agent_evaluations_requeued_total")
    finished = metric(base, 'cuda_agent_evaluations_finished_total{outcome="evaluated"}')
    if requeued < 1:
        fail("nothing was re-queued after the kill: %s" % requeued)
    if finished != len(names):
        fail("the coordinator counted %s results for %d requests" % (finished, len(names)))
    expect_one_result_each(work, ids)
    print("batch: %d requests, each with exactly one result; cuda_agent_evaluations_requeued_total %g"
          % (len(names), requeued))
    return killed


def tail(path, lines=25):
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def process_workspace(prefix):
    """A work directory for a test's processes, the log they share and the list of them, as
    (work, log, processes); on leaving, whatever still runs is killed, the log's tail
    printed and the directory removed."""
    work = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    work.chmod(0o755)
    log_path = work / "processes.log"
    log = open(log_path, "a")
    processes = []
    try:
        yield work, log, processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        log.close()
        print("--- coordinator and worker log (tail) ---")
        print(tail(log_path))
        shutil.rmtree(work, ignore_errors=True)
