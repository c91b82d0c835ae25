// SPDX-License-Identifier: Apache-2.0
#pragma once

// An episode toolbox for the tests of the episode service: the standard file tools and
// Bash, unconfined (the tests trust themselves), plus whatever the test adds.

#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/service/episode_service.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <functional>  // function
#include <memory>      // make_unique
#include <utility>     // move

namespace cuda_agent::testing {

/// The factory; `more` adds tools to each episode's registry.
inline EpisodeToolboxFactory trusting_toolbox(std::function<void(ToolRegistry&)> more = {}) {
  return [more = std::move(more)](const EpisodeSetup& setup) {
    EpisodeToolbox toolbox;
    SandboxOptions sandbox;
    sandbox.workspace = setup.workspace.root;
    toolbox.sandbox = std::make_unique<AnySandbox>(ProcessSandbox(sandbox));
    toolbox.tools = standard_tools(*toolbox.sandbox);
    if (more) more(toolbox.tools);
    return toolbox;
  };
}

}  // namespace cuda_agent::testing
