#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A coordinator (cuda-agent serve --workers-only) that starts its two workers as jobs of a
real single-node Ray cluster, on CPU slots, with the real harness:

1. serve submits two worker jobs through Ray's Jobs REST API; both register;
2. a batch of correct and wrong candidates is spread over them; one worker process is
   killed (SIGKILL) while it holds requests; the coordinator gives what it held to the
   other, serve submits a replacement job, and every request gets exactly one result, with
   the right reward;
3. SIGTERM drains serve, which stops its jobs: Ray reports each of them ended, none running.

Ray binds its services to the machine's external address and probes an outside one to
find it, so the test runs in a network namespace of its own with loopback only: as root it
runs itself again under `unshare -n` and brings `lo` up. Skipped where Ray (ray[default])
is not installed or a network namespace cannot be made.

    ray_workers_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
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
DASHBOARD = "http://127.0.0.1:8265"
INSIDE = "CUDA_AGENT_RAY_TEST_NETNS"


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def skip(message):
    print("[cuda-agent-test-skipped] " + message)
    sys.exit(0)


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


def candidate(root, name, marker):
    adversarial = root / "tests" / "adversarial"
    model = (adversarial / "candidates" / name / "model_new.py").read_text()
    kernel = (adversarial / "kernels" / "cpu" / "toolbox.cpp").read_text()
    task = (adversarial / "tasks" / "cpu" / "relu.py").read_text()
    return {"task": {"name": "relu", "source": task},
            "candidate": {"files": {"model_new.py": model + "\n# %s\n" % marker, "kernels/toolbox.cpp": kernel}},
            "metadata": {"candidate": name}}


def wait_until(what, predicate, seconds):
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            fail("%s: not within %d s" % (what, seconds))
        time.sleep(0.2)


def workers(base):
    code, answer = call(base, "GET", "/v1/workers")
    if code != 200:
        fail("GET /v1/workers answered %s: %s" % (code, answer))
    return {entry["registration"]["name"]: entry for entry in answer["workers"]}


def ray_jobs():
    """Our worker jobs as Ray lists them: submission id -> status."""
    code, answer = call(DASHBOARD, "GET", "/api/jobs/", token=None, timeout=30)
    if code != 200:
        fail("Ray's GET /api/jobs/ answered %s: %s" % (code, answer))
    return {job["submission_id"]: job["status"] for job in answer
            if (job.get("submission_id") or "").startswith("cuda-agent-worker-")}


def health(base):
    code, answer = call(base, "GET", "/healthz", token=None)
    return answer if isinstance(answer, dict) else {}


def enter_network_namespace():
    """Runs this test again in a namespace with loopback only (exits with its status)."""
    ray = pathlib.Path(sys.executable).parent / "ray"
    probe = subprocess.run([sys.executable, "-c", "import ray.dashboard.modules.job.sdk, aiohttp"],
                           capture_output=True)
    if not ray.exists() or probe.returncode != 0:
        skip("Ray with its dashboard is not installed for %s (pip install 'ray[default]'; scripts/setup.sh does)"
             % sys.executable)
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        skip("unshare or ip is missing (util-linux, iproute2)")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        skip("this user may not make a network namespace (unshare -n needs root)")
    environment = dict(os.environ, **{INSIDE: "1"})
    sys.stdout.flush()
    os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + sys.argv[1:], environment)


def main():
    if os.environ.get(INSIDE) != "1":
        enter_network_namespace()
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    ray = str(pathlib.Path(sys.executable).parent / "ray")
    work = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-ray-test-"))
    os.chmod(work, 0o755)
    log_path = work / "processes.log"
    log = open(log_path, "a")
    started = time.time()
    serve = None
    try:
        environment = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        # Ray's own folder stays short: its socket paths must fit in 107 bytes.
        head = subprocess.run(
            [ray, "start", "--head", "--num-cpus", "3", "--num-gpus", "0", "--include-dashboard=true",
             "--dashboard-host", "127.0.0.1", "--dashboard-port", "8265", "--node-ip-address", "127.0.0.1",
             "--port", "6379", "--disable-usage-stats"],
            stdout=log, stderr=subprocess.STDOUT, env=environment, timeout=180)
        if head.returncode != 0:
            fail("ray start exited with %d" % head.returncode)
        wait_until("Ray's dashboard answers", lambda: call(DASHBOARD, "GET", "/api/version", token=None,
                                                           timeout=5)[0] == 200, 120)
        print("ray: a head node in %.1f s" % (time.time() - started))

        (work / "tokens").write_text(CLIENT_TOKEN + " trainer\n")
        port_file = work / "port"
        worker_arguments = ("--device cpu --slots-per-device 1 --build-workers 1 --capacity 2 --python %s "
                            "--cache-dir %s" % (sys.executable, work / "cache"))
        serve = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--state-dir",
             str(work / "state"), "--device", "cpu", "--no-profile", "--workers-only", "--tokens",
             str(work / "tokens"), "--worker-timeout-s", "3", "--no-episodes", "--ray-address", DASHBOARD,
             "--ray-workers", "2", "--ray-gpus-per-worker", "0", "--ray-cpus-per-worker", "1",
             "--ray-worker-arguments", worker_arguments],
            stdout=log, stderr=subprocess.STDOUT)
        wait_until("the coordinator listens", port_file.exists, 60)
        base = "http://127.0.0.1:%s" % port_file.read_text().strip()

        # 1. Two jobs, two workers.
        wait_until("both Ray workers register", lambda: len(workers(base)) == 2, 180)
        first = set(workers(base))
        if first != set(ray_jobs()):
            fail("the workers %s are not the Ray jobs %s" % (sorted(first), ray_jobs()))
        launched = health(base).get("launched_workers") or {}
        if launched.get("workers") != 2 or not launched.get("engine", "").startswith("Ray at "):
            fail("/healthz shows no launched workers: %s" % launched)
        print("ray: serve started 2 worker jobs, both registered (%.1f s)" % (time.time() - started))

        # 2. A batch; one worker process killed while it holds requests.
        names = ["correct_relu", "missing_last_element"] * 3
        code, answer = call(base, "POST", "/v1/evaluations", {"requests": [
            candidate(root, name, "ray-batch-%d" % i) for i, name in enumerate(names)]})
        if code != 202:
            fail("the batch answered %s: %s" % (code, answer))
        ids = [status["id"] for status in answer["evaluations"]]
        holding = {}

        def a_worker_holds():
            for name, entry in workers(base).items():
                if entry.get("holds", 0) > 0:
                    holding["name"], holding["pid"] = name, entry["registration"]["description"]["pid"]
                    return True
            return False

        wait_until("a worker holds requests", a_worker_holds, 300)
        os.kill(holding["pid"], signal.SIGKILL)
        print("killed the worker of job %s (pid %d) while it held requests" % (holding["name"], holding["pid"]))
        for identifier, name in zip(ids, names):
            code, status = call(base, "GET", "/v1/evaluations/%s?wait=600" % identifier)
            if code != 200 or status["stage"] != "finished" or status["outcome"] != "evaluated":
                fail("%s (%s): %s" % (identifier, name, json.dumps(status)[:800]))
            expected = 1 if name == "correct_relu" else -1
            if status["reward"]["value"] != expected:
                fail("%s (%s): reward %s, expected %s" % (identifier, name, status["reward"]["value"], expected))
        code, metrics = call(base, "GET", "/metrics")
        requeued = [line for line in metrics.splitlines() if line.startswith("cuda_agent_evaluations_requeued_total ")]
        finished = [line for line in metrics.splitlines()
                    if line.startswith('cuda_agent_evaluations_finished_total{outcome="evaluated"}')]
        if not requeued or float(requeued[0].split()[1]) < 1:
            fail("nothing was re-queued after the kill: %s" % requeued)
        if not finished or float(finished[0].split()[1]) != len(names):
            fail("the coordinator counted %s results for %d requests" % (finished, len(names)))
        journal = [json.loads(line) for line in (work / "state" / "journal.jsonl").read_text().splitlines() if line]
        for identifier in ids:
            results = [record for record in journal if record["type"] == "finished" and record["id"] == identifier]
            if len(results) != 1:
                fail("%s has %d results in the journal" % (identifier, len(results)))
        print("batch: %d requests, each with exactly one result; %s" % (len(names), requeued[0]))

        # The killed worker's job ended; serve replaced it with a job of its own.
        wait_until("Ray reports the killed worker's job ended",
                   lambda: ray_jobs().get(holding["name"]) in ("FAILED", "STOPPED", "SUCCEEDED"), 60)
        wait_until("a replacement worker registers",
                   lambda: len(workers(base)) == 2 and holding["name"] not in workers(base), 180)
        launched = health(base)["launched_workers"]
        if launched["replacements"] != 1 or launched["running"] != 2:
            fail("after the kill, serve reports %s" % launched)
        print("ray: the killed worker's job %s; serve submitted a replacement, which registered (%.1f s)"
              % (ray_jobs()[holding["name"]], time.time() - started))

        # 3. SIGTERM: serve drains, then stops its jobs.
        serve.send_signal(signal.SIGTERM)
        if serve.wait(timeout=180) != 0:
            fail("serve exited with %s after SIGTERM" % serve.returncode)
        jobs = ray_jobs()
        if len(jobs) != 3 or any(status in ("PENDING", "RUNNING") for status in jobs.values()) \
                or list(jobs.values()).count("STOPPED") != 2:
            fail("after serve's SIGTERM, Ray reports its jobs as %s" % jobs)
        print("SIGTERM: the Ray worker jobs stopped (%s); %.1f s in all" % (jobs, time.time() - started))
    finally:
        if serve is not None and serve.poll() is None:
            serve.kill()
            serve.wait()
        subprocess.run([ray, "stop", "--force"], stdout=log, stderr=subprocess.STDOUT, timeout=120)
        log.close()
        print("--- ray, coordinator and worker log (tail) ---")
        print("\n".join(line for line in log_path.read_text().splitlines()[-40:] if "VINFO" not in line))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
