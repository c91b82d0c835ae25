// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the service benchmarks share: an evaluator that answers at once, standing in for
// the trusted one so that only the service's own cost is timed, a percentile, and room for
// the descriptors of many connections.

#include <cuda_agent/evaluate/staged_evaluator.hpp>

#include <algorithm>   // sort
#include <cstddef>     // size_t
#include <filesystem>  // path
#include <vector>      // vector

#include <sys/resource.h>  // getrlimit, setrlimit

namespace cuda_agent::benchmarks {

/// Answers at once: correct, timed, nothing else.
struct InstantEvaluator {
  PreparedCandidate prepare(const Task& task, const std::filesystem::path&) {
    PreparedCandidate prepared{task, {}, {}, nullptr, {}};
    prepared.evaluation.compile.succeeded = true;
    return prepared;
  }
  void verify(PreparedCandidate& prepared) {
    VerificationResult result;
    result.correct = true;
    prepared.evaluation.verification = result;
  }
  void profile(PreparedCandidate& prepared) { prepared.evaluation.profile = ProfileResult{}; }
  Evaluation evaluate(const Task& task, const std::filesystem::path& directory) {
    PreparedCandidate prepared = prepare(task, directory);
    verify(prepared);
    profile(prepared);
    return prepared.evaluation;
  }
};

/// The value below which `fraction` of `values` lie (nearest rank); 0 for none.
inline double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(fraction * static_cast<double>(values.size() - 1))];
}

/// Raises the soft limit on open files to the hard one: both ends of every connection live
/// in the benchmark's process.
inline void raise_open_file_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

}  // namespace cuda_agent::benchmarks
