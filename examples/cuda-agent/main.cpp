// SPDX-License-Identifier: Apache-2.0
// cuda-agent: the command-line program. `cuda-agent <subcommand> --help` explains each.
#include <cuda_agent/version.hpp>

#include <exception>    // exception
#include <functional>   // function
#include <iostream>     // cout, cerr
#include <span>         // span
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include "commands.hpp"

namespace {

struct Subcommand {
  std::string_view name;
  std::string_view summary;
  std::function<int(std::span<const std::string>)> run;
};

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {"eval", "evaluate a candidate the trusted way: static checks, build, verification, timing, reward",
       cuda_agent::cli::eval_command},
      {"optimize", "let a model optimize a task: an agent episode with trusted scoring, reports and trajectory",
       cuda_agent::cli::optimize_command},
      {"demo", "replay a bundled episode through the real sandbox, compiler, verifier and profiler",
       cuda_agent::cli::demo_command},
  };
  return table;
}

void usage(std::ostream& out) {
  out << "usage: cuda-agent <subcommand> [arguments]\n\n"
         "cuda-agent puts a language model in a CUDA development environment that rewrites PyTorch models\n"
         "into verified, faster custom kernels.\n\nsubcommands:\n";
  for (const Subcommand& each : subcommands())
    out << "  " << each.name << std::string(10 - each.name.size(), ' ') << each.summary << "\n";
  out << "\n'cuda-agent <subcommand> --help' describes a subcommand. Version " << CUDA_AGENT_VERSION_STRING << ".\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> arguments(argv + 1, argv + argc);
  if (arguments.empty()) {
    usage(std::cerr);
    return 2;
  }
  const std::string& name = arguments.front();
  if (name == "-h" || name == "--help" || name == "help") {
    usage(std::cout);
    return 0;
  }
  if (name == "--version") {
    std::cout << "cuda-agent " << CUDA_AGENT_VERSION_STRING << "\n";
    return 0;
  }
  for (const Subcommand& each : subcommands()) {
    if (each.name != name) continue;
    try {
      return each.run(std::span<const std::string>(arguments).subspan(1));
    } catch (const std::exception& error) {
      std::cerr << "cuda-agent " << name << ": " << error.what() << "\n";
      return 3;
    }
  }
  std::cerr << "cuda-agent: unknown subcommand '" << name << "'\n\n";
  usage(std::cerr);
  return 2;
}
