// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#include <cuda_agent/tasks/workspace.hpp>

#include <algorithm>   // find
#include <filesystem>  // path, status, perms
#include <string>      // string

#include <sys/stat.h>  // stat
#include <unistd.h>    // geteuid

#include "../compile/compile_test_support.hpp"
#include "kernelbench_tasks.hpp"

namespace ca = cuda_agent;
using ca::testing::kernelbench;
using Catch::Matchers::Contains;

namespace {

bool writable_by_anyone(const std::filesystem::path& path) {
  using std::filesystem::perms;
  return (std::filesystem::status(path).permissions() &
          (perms::owner_write | perms::group_write | perms::others_write)) != perms::none;
}

std::string workspace_error(const std::function<void()>& create) {
  try {
    create();
  } catch (const ca::WorkspaceError& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a workspace is laid out as the candidate contract says", "[tasks]") {
  ca::testing::ScratchDirectory scratch("workspace");
  const ca::Task task = ca::load_kernelbench_task(kernelbench / "level3" / "1_MLP.py");
  ca::WorkspaceOptions options;
  options.read_only_files = {{"harness/verify.py", "print('trusted')\n"}};
  options.hand_over = [](const ca::Workspace&, const auto&) {};  // ownership is tested below
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", options);

  CHECK(workspace.root == scratch / "ws");
  const std::vector<std::filesystem::path> protected_paths = {"SKILL.md", "model.py", "harness/verify.py"};
  CHECK(workspace.protected_paths == protected_paths);
  CHECK(workspace.writable_paths == std::vector<std::filesystem::path>{"kernels", "model_new.py"});
  for (const auto& path : workspace.absolute_protected_paths()) {
    INFO(path);
    REQUIRE(std::filesystem::is_regular_file(path));
    CHECK_FALSE(writable_by_anyone(path));
  }
  CHECK(ca::detail::read_file(workspace.root / "model.py") == task.reference_source);
  CHECK(ca::detail::read_file(workspace.root / "harness/verify.py") == "print('trusted')\n");
  CHECK(std::filesystem::exists(workspace.root / "kernels" / "example_kernel.cu"));
  CHECK(std::filesystem::exists(workspace.root / "kernels" / "binding.cpp"));

  const std::string model_new = ca::detail::read_file(workspace.root / "model_new.py");
  CHECK_THAT(model_new, Contains("def __init__(self, input_size, layer_sizes, output_size):"));
  CHECK_THAT(model_new, Contains("def forward(self, x):"));
  CHECK_THAT(model_new, Contains("import cuda_extension"));
  CHECK_THAT(model_new, !Contains("{{"));

  const std::string skill = ca::detail::read_file(workspace.root / "SKILL.md");
  CHECK_THAT(skill, Contains("level3/1_MLP"));
  CHECK_THAT(skill, Contains("cuBLAS (for GEMM) and cuDNN (for convolutions)"));
  CHECK_THAT(skill, Contains("**more than 5% faster than `torch.compile`** with confidence"));
  CHECK_THAT(skill, Contains("**Compile**"));
  CHECK_THAT(skill, Contains("**Verify**"));
  CHECK_THAT(skill, Contains("**Profile**"));
  CHECK_THAT(skill, Contains("Keep torch headers out of `.cu` files"));
  CHECK_THAT(skill, !Contains("{{"));

  const ca::ToolContext context = workspace.tool_context();
  CHECK(context.workspace() == workspace.root);
  CHECK(context.protected_paths() == protected_paths);
}

TEST_CASE("the CPU workspace and a tightened policy change the starter and SKILL.md", "[tasks]") {
  ca::testing::ScratchDirectory scratch("workspace-cpu");
  const ca::Task task = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  ca::WorkspaceOptions options;
  options.device = "cpu";
  options.libraries.cublas = false;
  options.libraries.cudnn = false;
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", options);
  CHECK(std::filesystem::exists(workspace.root / "kernels" / "example_kernel.cpp"));
  CHECK_FALSE(std::filesystem::exists(workspace.root / "kernels" / "example_kernel.cu"));
  const std::string skill = ca::detail::read_file(workspace.root / "SKILL.md");
  CHECK_THAT(skill, Contains("you may use no external libraries"));
  CHECK_THAT(skill, Contains("g++ -std=c++17 -O3"));
  CHECK_THAT(skill, !Contains("cublas_v2.h"));
  CHECK_THAT(skill, !Contains("Keep torch headers out of `.cu` files"));
  CHECK_THAT(ca::detail::read_file(workspace.root / "model_new.py"), Contains("def __init__(self):"));
}

TEST_CASE("a host can replace SKILL.md and add read-only files, but not over the contract", "[tasks]") {
  ca::testing::ScratchDirectory scratch("workspace-host");
  const ca::Task task = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  ca::WorkspaceOptions options;
  options.skill = "# {{task_name}} on {{device}}\n{{#cuda}}GPU only{{/cuda}}{{#cpu}}CPU only{{/cpu}} {{unknown}}\n";
  options.device = "cpu";
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", options);
  CHECK(ca::detail::read_file(workspace.root / "SKILL.md") == "# level1/19_ReLU on cpu\nCPU only {{unknown}}\n");

  CHECK_THAT(workspace_error([&] { (void)ca::materialize_workspace(task, scratch / "ws", options); }),
             Contains("not empty"));
  options.read_only_files = {{"../outside.py", ""}};
  CHECK_THAT(workspace_error([&] { (void)ca::materialize_workspace(task, scratch / "ws2", options); }),
             Contains("outside the workspace"));
  options.read_only_files = {{"kernels/fixed.h", ""}};
  CHECK_THAT(workspace_error([&] { (void)ca::materialize_workspace(task, scratch / "ws3", options); }),
             Contains("workspace contract"));
  options.read_only_files = {};
  options.device = "tpu";
  CHECK_THAT(workspace_error([&] { (void)ca::materialize_workspace(task, scratch / "ws4", options); }),
             Contains("unknown device"));
}

TEST_CASE("a task that brings candidate files gets them instead of the starter", "[tasks]") {
  ca::testing::ScratchDirectory scratch("workspace-candidate");
  ca::Task task = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  task.candidate_files = {{"model_new.py", "# mine\n"}, {"kernels/relu.cu", "// mine\n"}, {"../escape.cu", "x"}};
  ca::WorkspaceOptions options;
  options.hand_over = [](const ca::Workspace&, const auto&) {};
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", options);
  CHECK(ca::detail::read_file(workspace.root / "model_new.py") == "# mine\n");
  CHECK(ca::detail::read_file(workspace.root / "kernels/relu.cu") == "// mine\n");
  CHECK_FALSE(std::filesystem::exists(workspace.root / "kernels/example_kernel.cu"));
  CHECK_FALSE(std::filesystem::exists(scratch / "escape.cu"));
}

TEST_CASE("the writable part of a workspace is handed to the sandbox user, the protected files are not", "[tasks]") {
  if (::geteuid() != 0) CUDA_AGENT_SKIP("needs root to change owners");
  ca::testing::ScratchDirectory scratch("workspace-owner");
  const ca::Task task = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws");  // default: nobody
  auto owner = [](const std::filesystem::path& path) {
    struct stat status {};
    REQUIRE(::lstat(path.c_str(), &status) == 0);
    return status.st_uid;
  };
  CHECK(owner(workspace.root) == 65534);
  CHECK(owner(workspace.root / "kernels") == 65534);
  CHECK(owner(workspace.root / "kernels" / "binding.cpp") == 65534);
  CHECK(owner(workspace.root / "model_new.py") == 65534);
  CHECK(owner(workspace.root / "model.py") == 0);
  CHECK(owner(workspace.root / "SKILL.md") == 0);

  // The step is replaceable (the sandbox component's hand_over_to_sandbox plugs in here).
  std::optional<ca::UserIdentity> seen;
  ca::WorkspaceOptions options;
  options.sandbox_user = ca::UserIdentity{1234, 5678};
  options.hand_over = [&](const ca::Workspace&, const std::optional<ca::UserIdentity>& user) { seen = user; };
  (void)ca::materialize_workspace(task, scratch / "ws2", options);
  REQUIRE(seen.has_value());
  CHECK(*seen == ca::UserIdentity{1234, 5678});
  CHECK(owner(scratch / "ws2" / "kernels") == 0);
}

TEST_CASE("the starter model_new.py copies Model's constructor for every KernelBench task", "[python]") {
  // Parses every rendered model_new.py with Python's own parser and compares the
  // parameters of ModelNew.__init__ and forward with Model's.
  ca::testing::ScratchDirectory scratch("starter-signatures");
  std::string listing;
  for (const ca::Task& task : ca::load_kernelbench_tasks(kernelbench)) {
    const std::filesystem::path directory = scratch / ca::make_task_name(task.name);
    ca::WorkspaceOptions options;
    options.hand_over = [](const ca::Workspace&, const auto&) {};
    (void)ca::materialize_workspace(task, directory, options);
    listing += directory.string() + "\n";
  }
  ca::testing::write_files(scratch.path(), {{"workspaces.txt", listing}});
  const ca::ProcessResult ran = ca::testing::run_python(scratch.path(), R"(
import ast
def method(path, cls, name):
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return ast.dump(item.args)
    return None
bad = []
directories = [line for line in open(sys.path[0] + '/workspaces.txt').read().split('\n') if line]
for d in directories:
    for name in ('__init__', 'forward'):
        if method(d + '/model.py', 'Model', name) != method(d + '/model_new.py', 'ModelNew', name):
            bad.append(d + ' ' + name)
print('checked', len(directories), 'mismatched', len(bad), bad[:5])
)");
  INFO(ran.standard_output.text);
  CHECK(ran.succeeded());
  CHECK_THAT(ran.standard_output.text, Contains("mismatched 0 []"));
}

TEST_CASE("the CPU starter builds and runs as generated", "[python]") {
  ca::testing::ScratchDirectory scratch("starter-cpu");
  const ca::Task task = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  ca::WorkspaceOptions options;
  options.device = "cpu";
  options.hand_over = [](const ca::Workspace&, const auto&) {};
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", options);
  ca::CompileDriver driver(ca::testing::RecordingSandbox{}, ca::testing::cpu_options());
  const ca::CompileResult result = driver.build(workspace.root, scratch / "build");
  INFO(result.log);
  REQUIRE(result.succeeded);
  const ca::ProcessResult ran = ca::testing::run_python(
      scratch / "build", "import torch, cuda_extension\nprint(cuda_extension.scale(torch.arange(3.0), 2.0).tolist())");
  INFO(ran.standard_output.text);
  CHECK_THAT(ran.standard_output.text, Contains("[0.0, 2.0, 4.0]"));
}
