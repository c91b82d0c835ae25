// SPDX-License-Identifier: Apache-2.0
// Judges timing sessions with the library's statistics, for the Python-driven timing
// benchmarks (timing_honesty, timing_fidelity): reads JSON lines, one request per line,
//   {"session": <timing/session.py reference result>, "repetition": <index or null>,
//    "threshold": 0.05}
// and writes one ProfileResult (JSON) per line. With "repetition", that repetition's
// rounds stand in for the session's first ones.
#include <cuda_agent/profile/harness_profiler.hpp>

#include <iostream>
#include <string>

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json output;
    try {
      const nlohmann::json request = nlohmann::json::parse(line);
      nlohmann::json session = request.at("session");
      if (const auto repetition = request.find("repetition"); repetition != request.end() && !repetition->is_null())
        session["rounds"] = session.at("repetitions").at(repetition->get<std::size_t>()).at("rounds");
      cuda_agent::SpeedupOptions options;
      options.threshold = request.value("threshold", options.threshold);
      output = cuda_agent::profile_result_from_session(session, options);
    } catch (const std::exception& error) {
      output = {{"error", error.what()}};
    }
    std::cout << output.dump() << '\n' << std::flush;
  }
  return 0;
}
