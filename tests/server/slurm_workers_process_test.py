#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A coordinator (cuda-agent serve --workers-only --slurm) that starts its two workers as a
job array of a real single-node Slurm cluster (Debian's slurmctld and slurmd), on CPU slots,
with the real harness:

1. serve submits one job array of two tasks; both workers register;
2. a batch of correct and wrong candidates is spread over them; one worker process is
   killed (SIGKILL) while it holds requests; the coordinator gives what it held to the
   other, Slurm reports that task ended, serve submits a job in its place, and every request
   gets exactly one result, with the right reward;
3. SIGTERM drains serve, which cancels its jobs: Slurm reports each of them ended.

Skipped where Slurm is not installed or the test does not run as root.

    slurm_workers_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
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
from slurm_cluster import SlurmCluster, missing

ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def health(base):
    code, answer = call(base, "GET", "/healthz", token=None)
    return answer if isinstance(answer, dict) else {}


def main():
    why_not = missing()
    if why_not:
        print("[cuda-agent-test-skipped] " + why_not)
        return
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    work = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-slurm-test-"))
    work.chmod(0o755)
    log_path = work / "processes.log"
    log = open(log_path, "a")
    started = time.time()
    cluster = SlurmCluster(work / "slurm", cpus=max(2, os.cpu_count() or 2))
    serve = None
    try:
        cluster.start()
        print("slurm: controller and node up in %.1f s" % (time.time() - started))
        os.environ["SLURM_CONF"] = cluster.environment()["SLURM_CONF"]  # serve's sbatch finds the cluster
        (work / "jobs").mkdir()
        worker_arguments = ("--device cpu --slots-per-device 1 --build-workers 1 --capacity 2 --python %s "
                            "--cache-dir %s" % (sys.executable, work / "cache"))
        serve, base = start_coordinator(binary, work, log, [
            "--slurm", "--slurm-partition", "test", "--slurm-log-dir", str(work / "jobs"), "--worker-jobs", "2",
            "--gpus-per-worker", "0", "--cpus-per-worker", "1", "--worker-arguments", worker_arguments])

        # 1. One job array, two workers.
        wait_until("both Slurm workers register", lambda: len(workers(base)) == 2, 180)
        launched = health(base).get("launched_workers") or {}
        jobs = [job["job"] for job in launched.get("jobs", [])]
        if len(jobs) != 2 or len({job.split("_")[0] for job in jobs}) != 1 or not all("_" in job for job in jobs):
            fail("the two workers are not the tasks of one job array: %s" % launched)
        states = cluster.jobs()
        if any(states.get(job) != "RUNNING" for job in jobs):
            fail("Slurm reports the workers' tasks %s as %s" % (jobs, states))
        print("slurm: serve started the job array %s, both workers registered (%.1f s)"
              % (jobs, time.time() - started))

        # 2. A batch; one worker process killed while it holds requests.
        def kill(held):
            name = sorted(held)[0]
            os.kill(held[name]["registration"]["description"]["pid"], signal.SIGKILL)
            return name

        batch_losing_a_worker(base, root, work, kill, size=6)
        wait_until("Slurm reports a task ended and serve replaced it",
                   lambda: (health(base).get("launched_workers") or {}).get("replacements") == 1, 120, every=0.5)
        ended = [job for job in jobs if cluster.jobs().get(job) in ENDED]
        if len(ended) != 1:
            fail("after the kill, Slurm reports %s" % cluster.jobs())
        wait_until("the replacement worker registers", lambda: len(workers(base)) == 2, 180)
        launched = health(base)["launched_workers"]
        if launched["running"] != 2:
            fail("after the replacement, serve reports %s" % launched)
        print("slurm: the killed worker's task %s %s; serve submitted job %s in its place (%.1f s)"
              % (ended[0], cluster.jobs()[ended[0]], [job["job"] for job in launched["jobs"] if job["job"] not in jobs],
                 time.time() - started))

        # 3. SIGTERM: serve drains, then cancels its jobs.
        serve.send_signal(signal.SIGTERM)
        if serve.wait(timeout=180) != 0:
            fail("serve exited with %s after SIGTERM" % serve.returncode)
        states = cluster.jobs()
        live = {job: state for job, state in states.items() if state not in ENDED}
        if live or list(states.values()).count("CANCELLED") < 2:
            fail("after serve's SIGTERM, Slurm reports its jobs as %s" % states)
        print("SIGTERM: the Slurm worker jobs ended (%s); %.1f s in all" % (states, time.time() - started))
    finally:
        if serve is not None and serve.poll() is None:
            serve.kill()
            serve.wait()
        cluster.stop()
        log.close()
        print("--- coordinator and worker log (tail) ---")
        print(tail(log_path, 30))
        for job_log in sorted((work / "jobs").glob("*.log")) if (work / "jobs").exists() else []:
            print("--- %s ---\n%s" % (job_log.name, tail(job_log, 8)))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
