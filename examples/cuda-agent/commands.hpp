// SPDX-License-Identifier: Apache-2.0
#pragma once

// The subcommands of the cuda-agent program. Each lives in its own file and is listed
// once in main.cpp's dispatch table.

#include <span>    // span
#include <string>  // string

namespace cuda_agent::cli {

/// `cuda-agent eval <task> <candidate-dir> [options]`: the trusted evaluation of one
/// candidate (eval_command.cpp).
int eval_command(std::span<const std::string> arguments);

/// `cuda-agent optimize <task> --llm <spec> [options]`: one agent episode
/// (optimize_command.cpp).
int optimize_command(std::span<const std::string> arguments);

/// `cuda-agent demo [options]`: the bundled episode, replayed for real (demo_command.cpp).
int demo_command(std::span<const std::string> arguments);

}  // namespace cuda_agent::cli
