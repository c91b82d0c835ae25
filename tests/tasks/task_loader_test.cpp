// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/tasks/task_loader.hpp>

#include <filesystem>  // path, recursive_directory_iterator
#include <fstream>     // ofstream
#include <set>         // set
#include <string>      // string

#include "../compile/compile_test_support.hpp"
#include "kernelbench_tasks.hpp"

namespace ca = cuda_agent;
using ca::testing::kernelbench;
using Catch::Matchers::Contains;

namespace {

std::string load_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const ca::TaskLoadError& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every KernelBench problem file loads, with a stable name and its level", "[tasks]") {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kernelbench))
    files += entry.path().extension() == ".py";
  const std::vector<ca::Task> tasks = ca::load_kernelbench_tasks(kernelbench);
  REQUIRE(tasks.size() == files);
  REQUIRE(files >= 200);

  std::set<std::string> names;
  int previous_level = 0;
  for (const ca::Task& task : tasks) {
    INFO(task.name);
    CHECK(task.origin == ca::TaskOrigin::kernelbench_file);
    const int level = task.metadata.at("level").get<int>();
    CHECK(task.name.rfind("level" + std::to_string(level) + "/", 0) == 0);
    CHECK(level >= previous_level);  // ordered by level, then problem number
    previous_level = level;
    CHECK(task.metadata.contains("problem_id"));
    CHECK(task.name == ca::make_task_name(task.name));  // already filesystem-safe
    CHECK(names.insert(task.name).second);
    CHECK(task.metadata.at("constant_expressions").size() >= 1);
  }
  // Loading again gives the same names and hashes.
  const std::vector<ca::Task> again = ca::load_kernelbench_tasks(kernelbench);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    CHECK(again[i].name == tasks[i].name);
    CHECK(again[i].content_hash() == tasks[i].content_hash());
  }
}

TEST_CASE("module-level size constants and Model's signature are read without running Python", "[tasks]") {
  const ca::Task relu = ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py");
  CHECK(relu.name == "level1/19_ReLU");
  CHECK(relu.metadata["problem_id"] == 19);
  CHECK(relu.metadata["constants"] == nlohmann::json{{"batch_size", 4096}, {"dim", 393216}});
  CHECK(relu.metadata["constructor_signature"] == "");
  CHECK(relu.metadata["forward_signature"] == "x: torch.Tensor");

  const ca::Task mlp = ca::load_kernelbench_task(kernelbench / "level3" / "1_MLP.py");
  CHECK(mlp.metadata["constructor_signature"] == "input_size, layer_sizes, output_size");
  CHECK(mlp.metadata["constants"]["layer_sizes"] == nlohmann::json::array({16384, 16384}));
  REQUIRE(mlp.metadata["constructor_parameters"].size() == 3);
  CHECK(mlp.metadata["constructor_parameters"][1]["name"] == "layer_sizes");

  // Arithmetic, tuples, chained and ';'-separated assignments.
  const ca::Task transposed = ca::load_kernelbench_task(kernelbench / "level1" / "16_Matmul_with_transposed_A.py");
  CHECK(transposed.metadata["constants"]["N"] == 4096);
  CHECK(transposed.metadata["constant_expressions"]["N"] == "2048 * 2");
  const ca::Task fused =
      ca::load_kernelbench_task(kernelbench / "level2" / "13_ConvTranspose3d_Mean_Add_Softmax_Tanh_Scaling.py");
  CHECK(fused.metadata["constants"]["depth"] == 32);
  CHECK(fused.metadata["constants"]["height"] == 128);
  CHECK(fused.metadata["constants"]["width"] == 128);
  const ca::Task grouped = ca::load_kernelbench_task(
      kernelbench / "level1" / "72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py");
  CHECK(grouped.metadata["constants"]["kernel_size"] == nlohmann::json::array({3, 5, 7}));
  const auto& pool = ca::load_kernelbench_task(kernelbench / "level1" / "41_Max_Pooling_1D.py").metadata;
  CHECK(pool["constructor_parameters"][1]["default"] == "None");
  CHECK(pool["constructor_parameters"][1]["annotation"] == "int");
}

TEST_CASE("the source analysis is not fooled by strings, comments and nesting", "[tasks]") {
  const ca::ReferenceModule module = ca::analyze_reference_source(
      "import torch\n"
      "\"\"\"\n"
      "def get_inputs():  (inside a docstring)\n"
      "\"\"\"\n"
      "# def get_init_inputs():\n"
      "size = (1 << 4) if False else 3\n"
      "scale = -2.5e-1 ** 2\n"
      "shape = (2,\n"
      "         3)  # continued\n"
      "total = 7 // 2 + 7 % 3 - \\\n"
      "    1\n"
      "name = 'model'\n"
      "class Model(torch.nn.Module):\n"
      "    def helper(self):\n"
      "        def get_inputs(): pass\n"
      "    def __init__(self, a: int = 2, *args, b=(1, 2), **kwargs):\n"
      "        super().__init__()\n"
      "    def forward(self, x, y=None):\n"
      "        return x\n");
  CHECK_FALSE(module.defines_get_inputs);
  CHECK_FALSE(module.defines_get_init_inputs);
  CHECK(module.defines_model);
  CHECK(module.constants["scale"].get<double>() == -0.0625);
  CHECK(module.constants["shape"] == nlohmann::json::array({2, 3}));
  CHECK(module.constants["total"] == 3);
  CHECK(module.constants["name"] == "model");
  CHECK_FALSE(module.constants.contains("size"));  // not a literal expression
  CHECK(module.constant_expressions["size"] == "(1 << 4) if False else 3");
  CHECK(module.constructor_signature == "a: int = 2, *args, b=(1, 2), **kwargs");
  REQUIRE(module.constructor_parameters.size() == 4);
  CHECK(module.constructor_parameters[1].kind == "var_positional");
  CHECK(module.constructor_parameters[1].name == "args");
  CHECK(*module.constructor_parameters[2].default_value == "(1, 2)");
  CHECK(module.constructor_parameters[3].kind == "var_keyword");
  CHECK(module.forward_signature == "x, y=None");
  CHECK(module.missing() == std::vector<std::string>{"def get_inputs()", "def get_init_inputs()"});
}

TEST_CASE("a task file that breaks the contract is refused, naming the file and what is missing", "[tasks]") {
  ca::testing::ScratchDirectory scratch("bad-task");
  ca::testing::write_files(
      scratch.path(),
      {{"level9/3_Broken.py", "import torch\nclass Model:\n    pass\ndef get_inputs():\n    return []\n"}});
  const std::string message = load_error([&] { (void)ca::load_kernelbench_task(scratch / "level9/3_Broken.py"); });
  CHECK_THAT(message, Contains("level9/3_Broken.py"));
  CHECK_THAT(message, Contains(": no def get_init_inputs() at module level"));
  CHECK_THAT(load_error([&] { (void)ca::load_kernelbench_task(scratch / "missing.py"); }),
             Contains("missing.py: no such file"));
  CHECK_THAT(load_error([&] { (void)ca::load_task(scratch / "rows.jsonl"); }), Contains("load_ops6k_tasks"));
}

TEST_CASE("a CUDA-Agent style workspace directory loads with its candidate files", "[tasks]") {
  ca::testing::ScratchDirectory scratch("workspace-task");
  const std::filesystem::path directory = scratch / "relu workspace";
  ca::testing::write_files(directory, {
                                          {"model.py", ca::detail::read_file(kernelbench / "level1" / "19_ReLU.py")},
                                          {"model_new.py", "import cuda_extension\nclass ModelNew: pass\n"},
                                          {"kernels/relu.cu", "__global__ void relu() {}\n"},
                                          {"kernels/binding.cpp", "// binding\n"},
                                          {"kernels/notes.txt", "not a source\n"},
                                          {"utils/verification.py", "# harness, not candidate\n"},
                                      });
  std::filesystem::create_symlink("/etc/passwd", directory / "kernels" / "passwd.h");

  const ca::Task task = ca::load_task(directory);
  CHECK(task.origin == ca::TaskOrigin::workspace);
  CHECK(task.name == "relu_workspace");
  CHECK(task.metadata["constants"]["dim"] == 393216);
  std::set<std::string> files;
  for (const auto& [path, content] : task.candidate_files) files.insert(path);
  CHECK(files == std::set<std::string>{"kernels/binding.cpp", "kernels/relu.cu", "model_new.py"});
  CHECK(task.content_hash() == ca::load_kernelbench_task(kernelbench / "level1" / "19_ReLU.py").content_hash());
  CHECK(ca::load_workspace_task(directory, "level1/19_ReLU").name == "level1/19_ReLU");

  std::filesystem::remove(directory / "model.py");
  CHECK_THAT(load_error([&] { (void)ca::load_task(directory); }), Contains("no model.py"));
}

TEST_CASE("CUDA-Agent-Ops-6K rows load, whatever form their op list takes", "[tasks]") {
  ca::testing::ScratchDirectory scratch("ops6k");
  const std::string code = ca::detail::read_file(kernelbench / "level1" / "19_ReLU.py");
  const std::filesystem::path file = scratch / "ops.jsonl";
  {
    std::ofstream out(file);
    out << nlohmann::json{{"ops", nlohmann::json::array({"torch.nn.Conv2d", "torch.relu"})},
                          {"data_source", "torch#2"},
                          {"code", code}}
               .dump()
        << "\n";
    out << "\n";
    out << nlohmann::json{{"ops", "['torch.nn.functional.gelu', 'torch.sum']"},
                          {"data_source", "transformers#2"},
                          {"code", code}}
               .dump()
        << "\n";
    out << nlohmann::json{{"ops", "matmul, softmax"}, {"data_source", "torch"}, {"code", code}}.dump() << "\n";
  }
  const std::vector<ca::Task> tasks = ca::load_ops6k_tasks(file);
  REQUIRE(tasks.size() == 3);
  CHECK(tasks[0].name == "ops6k/00000_Conv2d_relu");
  CHECK(tasks[0].origin == ca::TaskOrigin::ops6k_row);
  CHECK(tasks[0].metadata["ops"] == nlohmann::json::array({"torch.nn.Conv2d", "torch.relu"}));
  CHECK(tasks[0].metadata["op_count"] == 2);
  CHECK(tasks[0].metadata["data_source"] == "torch#2");
  CHECK(tasks[0].metadata["constants"]["batch_size"] == 4096);
  CHECK(tasks[1].name == "ops6k/00001_gelu_sum");
  CHECK(tasks[1].metadata["ops"] == nlohmann::json::array({"torch.nn.functional.gelu", "torch.sum"}));
  CHECK(tasks[2].metadata["ops"] == nlohmann::json::array({"matmul", "softmax"}));
  CHECK_FALSE(tasks[2].metadata.contains("op_count"));
  CHECK(tasks[0].content_hash() == tasks[1].content_hash());  // same code, same identity

  const ca::Task single =
      ca::load_ops6k_row(nlohmann::json{{"ops", "[]"}, {"data_source", "torch#1"}, {"code", code}}, "row");
  CHECK(single.name == "ops6k/ops_" + single.content_hash().substr(0, 8));

  {
    std::ofstream out(file, std::ios::app);
    out << nlohmann::json{{"ops", "[]"}, {"data_source", "torch#1"}}.dump() << "\n";
  }
  CHECK_THAT(load_error([&] { (void)ca::load_ops6k_tasks(file); }),
             Contains("ops.jsonl:5: the row has no \"code\" field"));
  {
    std::ofstream out(file, std::ios::trunc);
    out << "{not json\n";
  }
  CHECK_THAT(load_error([&] { (void)ca::load_ops6k_tasks(file); }), Contains("ops.jsonl:1: not valid JSON"));
  CHECK_THAT(load_error([&] {
               (void)ca::load_ops6k_row(nlohmann::json{{"ops", "[]"}, {"data_source", "x"}, {"code", "x = 1\n"}},
                                        "rows.jsonl:3");
             }),
             Contains("rows.jsonl:3 (field \"code\"): no class Model, def get_inputs(), def get_init_inputs()"));
}

TEST_CASE("task names are safe relative paths", "[tasks]") {
  CHECK(ca::make_task_name("level1/19_ReLU") == "level1/19_ReLU");
  CHECK(ca::make_task_name("../../etc/passwd") == "__/__/etc/passwd");
  CHECK(ca::make_task_name("/abs//path/") == "abs/path");
  CHECK(ca::make_task_name("a b:c*d") == "a_b_c_d");
  CHECK(ca::make_task_name(".hidden") == "_hidden");
  CHECK(ca::make_task_name("") == "task");
}
