// SPDX-License-Identifier: Apache-2.0
#pragma once

// The subcommands of the cuda-agent program. Each lives in its own file, adds itself to
// the program's CLI11 parser in main.cpp, and runs from its callback once the whole command
// line has parsed, leaving the program's exit status in `exit_status`.

namespace CLI {
class App;
}

namespace cuda_agent::cli {

/// `cuda-agent eval <task> <candidate-dir> [options]`: the trusted evaluation of one
/// candidate (eval_command.cpp).
void add_eval_command(CLI::App& program, int& exit_status);

/// `cuda-agent optimize <task> --llm <spec> [options]`: one agent episode
/// (optimize_command.cpp).
void add_optimize_command(CLI::App& program, int& exit_status);

/// `cuda-agent demo [options]`: the bundled episode, replayed for real (demo_command.cpp).
void add_demo_command(CLI::App& program, int& exit_status);

/// `cuda-agent bench --generations <dir> [options]`: a folder of KernelBench generations
/// scored through the evaluation pool, with Table 1 (bench_command.cpp).
void add_bench_command(CLI::App& program, int& exit_status);

#ifdef CUDA_AGENT_CLI_WITH_SERVER
/// `cuda-agent serve [options]`: the evaluation service over HTTP (serve_command.cpp).
void add_serve_command(CLI::App& program, int& exit_status);

/// `cuda-agent worker --coordinator URL [options]`: this machine's GPUs serving a
/// coordinator's pool (worker_command.cpp).
void add_worker_command(CLI::App& program, int& exit_status);
#endif

}  // namespace cuda_agent::cli
