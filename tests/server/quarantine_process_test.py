#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A coordinator (cuda-agent serve --workers-only --quarantine-after 2) with a worker whose
GPU is broken, played by this script over the worker protocol (it fails every request it
takes with an infrastructure error), and one cuda-agent worker process on CPU slots, with
the real harness:

1. a worker of the protocol from before workers said their environment is refused (400
   unsupported_protocol);
2. the broken worker takes a whole batch and fails two of its requests: the coordinator
   quarantines it (/healthz, /metrics, /v1/workers), tells it to stop the third, drops what
   it sends for that one and gives it nothing more; the cuda-agent worker evaluates every
   request, each once, with the right reward, and no infrastructure error reaches a client;
3. the cuda-agent worker said its environment, and a repeated request is answered from the
   cache.

    quarantine_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
"""

import json
import pathlib
import sys

from coordinator_check import (WORKER_TOKEN, call, candidate, expect_one_result_each, expect_rewards, fail, metric,
                               process_workspace, start_coordinator, start_worker, wait_until, workers)


def as_worker(base, method, path, body=None):
    code, answer = call(base, method, path, body, token=WORKER_TOKEN)
    if code != 200:
        fail("%s %s answered %s: %s" % (method, path, code, answer))
    return answer


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    with process_workspace("cuda-agent-quarantine-test-") as (work, log, processes):
        coordinator, base = start_coordinator(binary, work, log, extra=("--quarantine-after", "2"))
        processes.append(coordinator)

        # 1. A worker from before the environment was part of the protocol.
        code, answer = call(base, "POST", "/v1/workers", {"name": "old", "capacity": 1}, token=WORKER_TOKEN)
        if code != 400 or answer["error"]["code"] != "unsupported_protocol":
            fail("a worker without protocol and environment registered: %s %s" % (code, answer))
        print("protocol: an old worker is refused: %s" % answer["error"]["message"])

        # 2. The broken worker takes the whole batch before the real one registers.
        broken = as_worker(base, "POST", "/v1/workers", {"protocol": 2, "name": "broken", "capacity": 3,
                                                          "description": {}, "environment": "a broken GPU"})["worker"]
        names = ["correct_relu", "missing_last_element", "correct_relu"]
        code, answer = call(base, "POST", "/v1/evaluations", {"requests": [
            candidate(root, name, "quarantine-%d" % i) for i, name in enumerate(names)]})
        if code != 202:
            fail("the batch answered %s: %s" % (code, answer))
        ids = [status["id"] for status in answer["evaluations"]]
        leases = as_worker(base, "POST", "/v1/workers/%s/lease?wait=10" % broken, {"max": 3})["leases"]
        if len(leases) != 3:
            fail("the broken worker took %d of 3 requests" % len(leases))

        # Heard from meanwhile: the coordinator loses a worker silent for --worker-timeout-s (3 s).
        processes.append(start_worker(binary, base, work, "real", log))
        wait_until("the real worker registers",
                   lambda: as_worker(base, "POST", "/v1/workers/%s/heartbeat" % broken, {}) and "real" in workers(base),
                   120)
        failure = {"outcome": "infrastructure_error",
                   "message": "the verification stage failed (not the candidate's fault): CUDA error: an illegal "
                              "memory access was encountered"}
        for lease in leases[:2]:
            if not as_worker(base, "POST", "/v1/workers/%s/results" % broken,
                             {"lease": lease["lease"], "result": failure})["counted"]:
                fail("an infrastructure error of the broken worker was not counted")

        code, health = call(base, "GET", "/healthz", token=None)
        quarantined = health.get("quarantined_workers") or []
        if len(quarantined) != 1 or quarantined[0]["name"] != "broken" or \
                "2 infrastructure errors in a row" not in quarantined[0]["why"]:
            fail("/healthz does not show the broken worker quarantined: %s" % json.dumps(health)[:800])
        if workers(base)["broken"]["quarantined"] is None:
            fail("/v1/workers does not show the broken worker quarantined")
        cancelled = as_worker(base, "POST", "/v1/workers/%s/heartbeat" % broken, {})["cancelled"]
        if cancelled != [leases[2]["lease"]]:
            fail("the quarantined worker was told to stop %s, not its last lease" % cancelled)
        if as_worker(base, "POST", "/v1/workers/%s/results" % broken,
                     {"lease": leases[2]["lease"], "result": failure})["counted"]:
            fail("a result of a lease taken back from the quarantined worker counted")
        if as_worker(base, "POST", "/v1/workers/%s/lease?wait=1" % broken, {"max": 3})["leases"]:
            fail("the quarantined worker took work")
        if metric(base, "cuda_agent_remote_workers_quarantined") != 1 or \
                metric(base, "cuda_agent_remote_workers_quarantined_total") != 1:
            fail("/metrics does not count the quarantined worker")
        print("quarantine: after 2 infrastructure errors in a row: %s" % quarantined[0]["why"][:120])

        statuses = expect_rewards(base, ids, names)
        for status in statuses:
            if not status["device"].startswith("real/"):
                fail("%s was evaluated on %s" % (status["id"], status["device"]))
        expect_one_result_each(work, ids)
        if metric(base, 'cuda_agent_evaluations_finished_total{outcome="infrastructure_error"}') != 0:
            fail("an infrastructure error reached a client")
        if metric(base, 'cuda_agent_evaluations_finished_total{outcome="evaluated"}') != len(names):
            fail("the coordinator did not count one result per request")
        print("requeue: the real worker evaluated all %d requests, each once" % len(names))

        # 3. The real worker's environment, and the cache under it.
        environment = workers(base)["real"]["registration"].get("environment", "")
        if "cuda-agent" not in environment or "torch" not in environment:
            fail("the real worker registered the environment %r" % environment)
        code, repeated = call(base, "POST", "/v1/evaluations?wait=600", candidate(root, "correct_relu", "quarantine-0"))
        status = repeated["evaluations"][0]
        if code != 200 or not status["cached"] or status["reward"]["value"] != 1:
            fail("a repeated request: %s %s" % (code, json.dumps(status)[:600]))
        print("cache: a repeated request answered from the results of the environment %r" % environment[:80])
        print("the broken worker was quarantined and its requests evaluated elsewhere")


if __name__ == "__main__":
    main()
