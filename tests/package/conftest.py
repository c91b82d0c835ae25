# SPDX-License-Identifier: Apache-2.0
"""A `cuda-agent serve` on CPU slots for the package's tests (one per session), and the
adversarial suite's ReLU task and candidates to send it."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

SOURCE = pathlib.Path(os.environ.get("CUDA_AGENT_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SOURCE / "python" / "src"))

import cuda_agent  # noqa: E402  (the package of this source tree, not an installed one)

ADVERSARIAL = SOURCE / "tests" / "adversarial"


@pytest.fixture(scope="session")
def server_url():
    binary = os.environ.get("CUDA_AGENT_BINARY")
    if not binary:
        pytest.skip("CUDA_AGENT_BINARY (the cuda-agent program) is not set")
    work = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-package-test-"))
    os.chmod(work, 0o755)
    port_file = work / "port"
    log = open(work / "serve.log", "w")
    process = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--state-dir",
         str(work / "state"), "--device", "cpu", "--slots-per-device", "2", "--build-workers", "1", "--no-profile",
         "--quiet"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while not port_file.exists():
            if process.poll() is not None or time.time() > deadline:
                pytest.fail("cuda-agent serve did not start: " + (work / "serve.log").read_text()[-2000:])
            time.sleep(0.1)
        yield "http://127.0.0.1:%s" % port_file.read_text().strip()
    finally:
        process.terminate()
        process.wait(timeout=600)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def relu_task():
    return cuda_agent.task_from_file(ADVERSARIAL / "tasks" / "cpu" / "relu.py", name="relu")


def candidate_files(name, marker=""):
    """A candidate of the adversarial suite with the shared CPU toolbox as its kernels;
    `marker` makes its files new, so that the server evaluates them instead of answering
    from its cache."""
    model = (ADVERSARIAL / "candidates" / name / "model_new.py").read_text()
    kernel = (ADVERSARIAL / "kernels" / "cpu" / "toolbox.cpp").read_text()
    return {"model_new.py": model + ("\n# %s\n" % marker if marker else ""), "kernels/toolbox.cpp": kernel}
