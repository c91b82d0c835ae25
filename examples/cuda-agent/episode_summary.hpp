// SPDX-License-Identifier: Apache-2.0
#pragma once

// What `optimize` and `demo` print when an episode ends, and where they find Python.

#include <cuda_agent/agent/optimize.hpp>
#include <cuda_agent/detail/text_format.hpp>

#include <filesystem>  // path
#include <optional>    // optional
#include <ostream>     // ostream
#include <stdexcept>   // runtime_error
#include <string>      // string

#include "command_line.hpp"

namespace cuda_agent::cli {

inline std::string describe_speedup(const std::optional<SpeedupEstimate>& estimate) {
  if (!estimate) return "not measured";
  using detail::format;
  return format("%.2fx", estimate->speedup) + " [" + format("%.2f", estimate->interval_low) + ", " +
         format("%.2f", estimate->interval_high) + "] " + std::string(to_string(estimate->verdict));
}

/// The end of an episode: why it stopped, the best trusted result, where the outputs are.
inline void print_episode_summary(const OptimizeResult& result, std::ostream& out) {
  const EpisodeResult& episode = result.episode;
  out << "\nepisode    " << to_string(episode.reason) << " after " << episode.turns << " turns, "
      << detail::format("%.1f", episode.elapsed.count()) << " s: " << episode.message << "\n";
  out << "evaluated  " << episode.evaluations.size() << " candidate(s) the trusted way\n";
  if (episode.best) {
    const ScoredCandidate& best = *episode.best;
    out << "best       reward " << best.reward.value << " (" << best.reward.label << "), scored after turn "
        << best.turn << "\n";
    if (best.evaluation.profile) {
      out << "speedup    vs eager " << describe_speedup(best.evaluation.profile->versus_eager) << "\n"
          << "           vs torch.compile " << describe_speedup(best.evaluation.profile->versus_compile) << "\n";
    } else if (best.evaluation.correct() && !result.timed) {
      out << "speedup    not measured: timing against eager PyTorch and torch.compile needs a GPU "
             "(device \"cuda\"); on the CPU a correct candidate earns reward 1, rewards 2 and 3 need a GPU\n";
    }
    out << "candidate  " << episode.best_directory.string() << "\n";
  } else {
    out << "best       no candidate was scored\n";
  }
  out << "report     " << (episode.output_directory / "report.md").string() << " (and report.json)\n"
      << "trajectory " << episode.trajectory.string() << "\n";
}

/// The options `optimize` and `demo` share: where the episode runs and what it builds with.
inline void add_episode_environment_options(CLI::App& command, OptimizeOptions& run) {
  command
      .add_option("--device", run.device,
                  "auto, cuda or cpu (default auto: cuda when an NVIDIA GPU is present; cpu evaluates C++ CPU "
                  "extensions and cannot time, so the reward is at most 1)")
      ->check(one_of({"auto", "cuda", "cpu"}))
      ->type_name("auto|cuda|cpu");
  command.add_option("--gpu", run.gpu, "the GPU to use (device minor, default 0)")
      ->check(whole_number(0, 255))
      ->type_name("N");
  command.add_option("--python", run.python, "Python with torch (default $CUDA_AGENT_PYTHON or python3)")
      ->type_name("PATH");
  command.add_option("--cache-dir", run.compile_cache_directory, "the compile driver's object cache")->type_name("DIR");
  command.add_flag("--unconfined", run.unconfined,
                   "run the model's commands WITHOUT bubblewrap; for trusted models only");
}

}  // namespace cuda_agent::cli
