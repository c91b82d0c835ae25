// SPDX-License-Identifier: Apache-2.0
// Runs a command the way every part of cuda-agent does: argv only, an explicit
// environment, a deadline that takes down the whole process group, and output capture
// that keeps the head and tail of a flood.
#include <cuda_agent/process.hpp>

#include <chrono>
#include <iostream>

int main() {
  using namespace std::chrono_literals;

  cuda_agent::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo compiling; seq 1 200000; echo 'error: done' >&2; sleep 30"};
  spec.environment = cuda_agent::Environment::from_current({"PATH", "LANG"});
  spec.timeout = 1s;        // the sleep never finishes
  spec.kill_grace = 200ms;  // SIGTERM, then SIGKILL after this
  spec.output_limit = 256;  // keep 128 bytes from each end
  spec.merge_stderr = true;

  const cuda_agent::ProcessResult result = cuda_agent::run_process(spec);
  std::cout << "ended: " << cuda_agent::describe_exit(result) << "\n"
            << "output: " << result.standard_output.total_bytes << " bytes, " << result.standard_output.elided_bytes
            << " elided\n"
            << result.standard_output.text << "\n";
  return result.timed_out ? 0 : 1;
}
