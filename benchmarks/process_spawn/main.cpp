// SPDX-License-Identifier: Apache-2.0
// Cost of starting and supervising one child with run_process, which every sandboxed
// command and every evaluation pays. Prints the median and quartiles over N runs.
#include <cuda_agent/process.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 500;
  cuda_agent::ProcessSpec spec;
  spec.argv = {"/bin/true"};
  std::vector<double> micros;
  micros.reserve(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto result = cuda_agent::run_process(spec);
    const auto stop = std::chrono::steady_clock::now();
    if (!result.succeeded()) return 1;
    micros.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<std::size_t>(q * static_cast<double>(micros.size() - 1))]; };
  std::cout << "run_process(/bin/true) x" << runs << ": median " << at(0.5) << " us, q1 " << at(0.25) << " us, q3 "
            << at(0.75) << " us\n";
  return 0;
}
