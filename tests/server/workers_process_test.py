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
import pathlib
import signal
import sys

from coordinator_check import (WORKER_TOKEN, batch_losing_a_worker, call, candidate, fail, process_workspace,
                               start_coordinator, start_worker, wait_until, workers)


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    with process_workspace("cuda-agent-workers-test-") as (work, log, processes):
        coordinator, base = start_coordinator(binary, work, log)
        processes.append(coordinator)

        # 1. Tokens.
        code, answer = call(base, "POST", "/v1/workers", {"name": "intruder", "capacity": 1})
        if code != 403 or answer["error"]["code"] != "not_a_worker":
            fail("a client's token registered a worker: %s %s" % (code, answer))
        code, answer = call(base, "POST", "/v1/evaluations", candidate(root, "correct_relu", "x"),
                            token=WORKER_TOKEN)
        if code != 401:
            fail("a worker's token submitted an evaluation: %s %s" % (code, answer))
        print("tokens: a client cannot act as a worker, nor a worker as a client")

        started = {name: start_worker(binary, base, work, name, log) for name in ("one", "two")}
        processes += started.values()
        wait_until("both workers register", lambda: len(workers(base)) == 2, 120)

        # 2. A batch; one worker killed while it holds requests.
        def kill(holding):
            name = sorted(holding)[0]
            started[name].kill()
            started[name].wait()
            return name

        doomed = batch_losing_a_worker(base, root, work, kill)
        if doomed in workers(base):
            fail("the killed worker is still registered")

        # 3. Back again, then SIGTERM.
        again = start_worker(binary, base, work, doomed, log)
        processes.append(again)
        wait_until("the restarted worker registers", lambda: doomed in workers(base), 120)
        code, status = call(base, "POST", "/v1/evaluations?wait=600", candidate(root, "correct_relu", "after"))
        if code != 200 or status["evaluations"][0]["reward"]["value"] != 1:
            fail("after the restart: %s %s" % (code, json.dumps(status)[:600]))
        again.send_signal(signal.SIGTERM)
        if again.wait(timeout=120) != 0:
            fail("the worker exited with %s after SIGTERM" % again.returncode)
        wait_until("the stopped worker deregisters", lambda: doomed not in workers(base), 10)
        print("restart: registered again and evaluated; SIGTERM: deregistered, exit 0")


if __name__ == "__main__":
    main()
