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

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from coordinator_check import batch_losing_a_worker, call, fail, start_coordinator, tail, wait_until, workers

DASHBOARD = "http://127.0.0.1:8265"
INSIDE = "CUDA_AGENT_RAY_TEST_NETNS"


def skip(message):
    print("[cuda-agent-test-skipped] " + message)
    sys.exit(0)


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

        worker_arguments = ("--device cpu --slots-per-device 1 --build-workers 1 --capacity 2 --python %s "
                            "--cache-dir %s" % (sys.executable, work / "cache"))
        serve, base = start_coordinator(binary, work, log, [
            "--ray-address", DASHBOARD, "--worker-jobs", "2", "--gpus-per-worker", "0", "--cpus-per-worker", "1",
            "--worker-arguments", worker_arguments])

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
        holding = {}

        def kill(held):
            holding["name"] = sorted(held)[0]
            holding["pid"] = held[holding["name"]]["registration"]["description"]["pid"]
            os.kill(holding["pid"], signal.SIGKILL)
            return holding["name"]

        batch_losing_a_worker(base, root, work, kill, size=6)

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
        print("\n".join(line for line in tail(log_path, 40).splitlines() if "VINFO" not in line))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
