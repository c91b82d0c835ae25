// SPDX-License-Identifier: Apache-2.0
// cuda-agent: the command-line program. `cuda-agent <subcommand> --help` explains each.
#include <cuda_agent/version.hpp>

#include <exception>  // exception
#include <iostream>   // cout, cerr
#include <string>     // string

#include "command_line.hpp"
#include "commands.hpp"

namespace {

/// "cuda-agent" or "cuda-agent eval": whose message it is.
std::string speaker(const CLI::App& program) {
  const auto chosen = program.get_subcommands();
  return chosen.empty() ? program.get_name() : program.get_name() + " " + chosen.front()->get_name();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App program(
      "cuda-agent puts a language model in a CUDA development environment that rewrites PyTorch models\n"
      "into verified, faster custom kernels.",
      "cuda-agent");
  program.set_version_flag("--version", std::string("cuda-agent ") + CUDA_AGENT_VERSION_STRING);
  program.require_subcommand(1);
  program.footer("'cuda-agent <subcommand> --help' describes a subcommand. Version " +
                 std::string(CUDA_AGENT_VERSION_STRING) + ".");
  int exit_status = 0;
  cuda_agent::cli::add_eval_command(program, exit_status);
  cuda_agent::cli::add_optimize_command(program, exit_status);
  cuda_agent::cli::add_demo_command(program, exit_status);
  cuda_agent::cli::add_bench_command(program, exit_status);
#ifdef CUDA_AGENT_CLI_WITH_SERVER
  cuda_agent::cli::add_serve_command(program, exit_status);
  cuda_agent::cli::add_worker_command(program, exit_status);
#endif
  try {
    program.parse(argc, argv);
    return exit_status;
  } catch (const CLI::Success& asked) {  // --help, --version
    return program.exit(asked);
  } catch (const CLI::ParseError& error) {
    const std::string who = speaker(program);
    const bool unknown_subcommand = who == program.get_name() && argc > 1 && argv[1][0] != '-';
    std::cerr << who << ": "
              << (unknown_subcommand ? "unknown subcommand '" + std::string(argv[1]) + "'" : std::string(error.what()))
              << "\n\n";
    if (who == program.get_name())
      std::cerr << program.help();
    else
      std::cerr << "(see " << who << " --help)\n";
    return 2;
  } catch (const cuda_agent::cli::UsageError& error) {
    const std::string who = speaker(program);
    std::cerr << who << ": " << error.what() << "\n\n(see " << who << " --help)\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << speaker(program) << ": " << error.what() << "\n";
    return 3;
  }
}
