# SPDX-License-Identifier: Apache-2.0
"""The worker's prepared child: the child of the next verification request is forked and
prepared ahead of it, serves exactly one request of a handler that asks for it, waits
through the others, and never outlives the worker. A child that has reported its result is
ended without waiting for its exit, and what it left running is still found and counted."""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HARNESS = os.environ.get("CUDA_AGENT_HARNESS_DIR",
                         os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness"))


def children_of(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found += [int(each) for each in listing.read().split()]
    except OSError:
        pass
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Worker:
    def __init__(self, *extra: str):
        self.directory = tempfile.mkdtemp(prefix="worker-test-")
        requests = os.path.join(self.directory, "requests")
        replies = os.path.join(self.directory, "replies")
        os.mkfifo(requests)
        os.mkfifo(replies)
        bootstrap = (f"import sys; sys.path.insert(0, {HARNESS!r}); "
                     "from cuda_agent_harness.worker.startup import main; sys.exit(main(sys.argv[1:]))")
        self.process = subprocess.Popen([sys.executable, "-I", "-B", "-c", bootstrap, "--role", "reference",
                                         "--device", "cpu", "--requests", requests, "--replies", replies, *extra])
        # Neither open waits for the worker, which may fail before it opens its ends.
        self.requests = os.open(requests, os.O_RDWR)
        self.replies = os.open(replies, os.O_RDONLY | os.O_NONBLOCK)
        self.buffer = b""
        self.counter = 0
        ready = self.receive(120)
        assert ready["event"] == "ready", ready

    def receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "the worker did not answer in time"
            ready, _, _ = select.select([self.replies], [], [], left)
            if ready:
                chunk = os.read(self.replies, 1 << 16)
                if not chunk:  # no writer yet, or the worker is gone
                    assert self.process.poll() is None, f"the worker exited with {self.process.returncode}"
                    time.sleep(0.05)
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def call(self, handler: str, args: dict, timeout_ms: int = 60_000) -> dict:
        self.counter += 1
        request_id = f"r{self.counter}"
        os.write(self.requests, (json.dumps({"id": request_id, "handler": handler, "args": args,
                                             "timeout_ms": timeout_ms}) + "\n").encode())
        while True:
            message = self.receive(timeout_ms / 1000 + 30)
            if message.get("id") == request_id and message.get("done"):
                return message

    def idle_children(self, count: int = 1, settle: float = 10.0) -> list[int]:
        """The worker's live children once there are ``count`` of them (a prepared child
        appears during or right after a request; ended children take a moment to go)."""
        deadline = time.monotonic() + settle
        while True:
            found = [pid for pid in children_of(self.process.pid) if alive(pid)]
            if len(found) == count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    def settle(self) -> dict:
        self.counter += 1
        request_id = f"s{self.counter}"
        os.write(self.requests, (json.dumps({"id": request_id, "settle": True}) + "\n").encode())
        while True:
            message = self.receive(60)
            if message.get("id") == request_id and message.get("done"):
                return message

    def close(self) -> None:
        if self.requests is None:
            return
        try:
            os.write(self.requests, b'{"shutdown": true}\n')
        except OSError:
            pass
        try:
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            os.close(self.requests)
            os.close(self.replies)
            self.requests = self.replies = None


@pytest.fixture
def worker():
    started = Worker()
    yield started
    started.close()


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not alive(pid)


def test_each_request_runs_in_the_child_prepared_before_it(worker):
    spare = worker.idle_children()
    assert len(spare) == 1, "one child waits, prepared, for the next request"
    reply = worker.call("ping", {"echo": 1})
    assert reply["result"]["pid"] == spare[0]
    assert reply["result"]["echo"] == 1
    assert reply["result"]["cuda_initialized_before_fork"] is False
    assert 0 < reply["reported_ms"] <= reply["duration_ms"], "when the result came, and when the reply went"
    assert reply["ended_after_report"] is True and reply["stragglers"] == 0
    assert reply["exit_code"] is None and reply["signal"] is None, "the worker ended it; it did not crash"
    assert wait_gone(spare[0]), "a child serves one request only"
    following = worker.idle_children()
    assert len(following) == 1 and following[0] != spare[0]


def test_the_next_prepared_child_is_forked_while_a_request_runs(worker):
    spare = worker.idle_children()
    worker.counter += 1
    os.write(worker.requests, (json.dumps({"id": "long", "handler": "diagnose_prepared",
                                           "args": {"action": "sleep", "seconds": 1.5}}) + "\n").encode())
    during = worker.idle_children(count=2)
    assert spare[0] in during and len(during) == 2, "the request's child and the next prepared one"
    while not (message := worker.receive(30)).get("done"):
        pass
    assert message["id"] == "long"
    after = worker.idle_children()
    assert after == [pid for pid in during if pid != spare[0]]


def test_a_report_ends_the_child_without_waiting_for_its_exit(worker):
    worker.idle_children()
    # The child reports, then would take long to exit (a CUDA process letting go of the
    # device takes 0.1 to 0.3 s): the reply does not wait for that.
    reply = worker.call("diagnose_prepared", {"action": "report_then_sleep", "seconds": 30})
    assert reply["result"] == {"action": "report_then_sleep", "done": True}
    assert reply["ended_after_report"] is True
    assert reply["duration_ms"] < 5000
    assert reply["stragglers"] == 0
    settled = worker.settle()
    assert settled["done"] and settled["result"]["exiting"] == 0


def test_processes_left_by_a_child_that_reported_are_counted_and_killed(worker):
    spare = worker.idle_children()
    reply = worker.call("diagnose_prepared", {"action": "leave_process"})
    assert reply["ended_after_report"] is True
    assert reply["stragglers"] == 2
    worker.settle()
    left = [pid for pid in worker.idle_children() if pid != spare[0]]
    assert len(left) == 1, "only the next prepared child is left"


def test_a_prepared_child_that_died_is_replaced_on_the_spot(worker):
    spare = worker.idle_children()
    os.kill(spare[0], signal.SIGKILL)
    time.sleep(0.2)
    reply = worker.call("ping", {"echo": "still served"})
    assert reply["result"]["echo"] == "still served"
    assert reply["result"]["pid"] != spare[0]


def test_the_deadline_counts_from_the_request_in_a_prepared_child(worker):
    worker.idle_children()
    started = time.monotonic()
    reply = worker.call("diagnose", {"action": "sleep", "seconds": 600}, timeout_ms=1500)
    assert reply["timed_out"] is True
    assert reply["signal"] == signal.SIGKILL
    assert time.monotonic() - started < 20


def test_other_handlers_run_in_a_child_of_their_own_and_the_prepared_one_waits(worker):
    spare = worker.idle_children()
    assert len(spare) == 1
    # diagnose is not a prepared handler; what its child leaves behind is killed, not the
    # prepared child, and only the leftovers are counted.
    reply = worker.call("diagnose", {"action": "leave_process"})
    assert reply["stragglers"] == 2
    assert alive(spare[0])
    assert worker.idle_children() == spare
    assert worker.call("ping", {})["result"]["pid"] == spare[0]


def test_a_child_that_exits_without_reporting_is_waited_for(worker):
    worker.idle_children()
    reply = worker.call("diagnose", {"action": "exit", "code": 7})
    assert reply["ended_after_report"] is False
    assert reply["exit_code"] == 7 and reply["result"] is None


def test_no_child_outlives_the_worker(worker):
    spare = worker.idle_children()
    worker.close()
    deadline = time.monotonic() + 10
    while alive(spare[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(spare[0])


def test_without_prepared_children_nothing_waits():
    plain = Worker("--no-prepared-child")
    try:
        assert plain.idle_children(count=0, settle=1.0) == []
        reply = plain.call("ping", {"echo": 2})
        assert reply["result"]["echo"] == 2
        assert plain.idle_children(count=0) == []
    finally:
        plain.close()


def test_a_worker_still_hears_its_host_after_more_than_64_mib_of_requests(worker):
    # A warm worker lives for thousands of requests; its channel to the host has no cap over
    # its life (a child's report does). Blank lines are requests the worker skips.
    padding = (b" " * ((1 << 16) - 1) + b"\n") * 16  # 1 MiB
    for _ in range(66):
        os.write(worker.requests, padding)
    reply = worker.call("ping", {"echo": "still here"})
    assert reply["result"]["echo"] == "still here"


def test_a_child_that_prints_more_than_the_output_cap_is_reported_with_its_middle_elided(worker):
    reply = worker.call("diagnose", {"action": "output", "bytes": 200_000})
    assert reply["result"]["done"] is True
    assert reply["output_bytes"] > 200_000
    assert "bytes elided ..." in reply["output"] and len(reply["output"]) < 80_000
