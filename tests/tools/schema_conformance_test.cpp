// SPDX-License-Identifier: Apache-2.0
// Checks the tool specs with an independent implementation (Python's jsonschema): each
// parameters schema is a valid draft 2020-12 schema, a chat request carrying all of them
// in `tools` is accepted by OpenAI's CreateChatCompletionRequest schema, the Anthropic
// constraints hold, and the built-in argument validator agrees with jsonschema on a set
// of valid and invalid arguments.
#include "catch.hpp"

#include <cuda_agent/process.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <filesystem>
#include <string>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using nlohmann::json;

namespace {

constexpr const char* checker = R"PY(
import json, re, sys
from jsonschema import Draft202012Validator

data = json.load(open(sys.argv[1]))
definitions = json.load(open(sys.argv[2]))
problems = []

for tool in data["tools"]:
    try:
        Draft202012Validator.check_schema(tool["parameters"])
    except Exception as error:
        problems.append(f"{tool['name']}: not a draft 2020-12 schema: {error}")
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"]):
        problems.append(f"{tool['name']}: invalid name for OpenAI/Anthropic")
    if tool["parameters"].get("type") != "object":
        problems.append(f"{tool['name']}: Anthropic input_schema must have type object")

request = {
    "model": "gpt-4.1",
    "messages": [{"role": "user", "content": "Make the kernel faster."}],
    "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                "parameters": t["parameters"]}} for t in data["tools"]],
    "tool_choice": "auto",
}
schema = dict(definitions)
schema["$ref"] = "#/$defs/CreateChatCompletionRequest"
for error in Draft202012Validator(schema).iter_errors(request):
    problems.append(f"CreateChatCompletionRequest rejects the request: {error.message} at {list(error.path)}")

by_name = {t["name"]: t["parameters"] for t in data["tools"]}
for sample in data["samples"]:
    valid = Draft202012Validator(by_name[sample["tool"]]).is_valid(sample["arguments"])
    if valid != sample["valid"]:
        problems.append(f"validators disagree on {sample['tool']} {json.dumps(sample['arguments'])}: "
                        f"jsonschema says {valid}, cuda_agent says {sample['valid']}")

print(f"checked {len(data['tools'])} tools and {len(data['samples'])} samples")
for problem in problems:
    print("PROBLEM:", problem)
sys.exit(1 if problems else 0)
)PY";

std::filesystem::path python_with_jsonschema() {
  for (const std::filesystem::path& candidate :
       {std::filesystem::path(CUDA_AGENT_PYTHON), std::filesystem::path("/usr/bin/python3")}) {
    if (candidate.empty() || !std::filesystem::exists(candidate)) continue;
    ca::ProcessSpec probe;
    probe.argv = {candidate.string(), "-c", "import jsonschema"};
    probe.timeout = std::chrono::seconds(60);
    if (ca::run_process(probe).succeeded()) return candidate;
  }
  return {};
}

}  // namespace

TEST_CASE("tool schemas pass draft 2020-12 and OpenAI's request schema, and validators agree", "[tools][python]") {
  const std::filesystem::path python = python_with_jsonschema();
  if (python.empty())
    CUDA_AGENT_SKIP("no Python with jsonschema (set CUDA_AGENT_PYTHON or install python3-jsonschema)");

  ca::testing::RecordingSandbox sandbox;
  const ca::ToolRegistry registry = ca::standard_tools(sandbox);
  json data = {{"tools", json::array()}, {"samples", json::array()}};
  for (const ca::ToolSpec& spec : registry.specs())
    data["tools"].push_back({{"name", spec.name}, {"description", spec.description}, {"parameters", spec.parameters}});

  const json samples = json::parse(R"([
    ["Bash", {"command": "ls"}], ["Bash", {"command": "ls", "timeout": 600000, "description": "List"}],
    ["Bash", {"command": "ls", "timeout": 600001}], ["Bash", {"command": "ls", "timeout": 0}],
    ["Bash", {"command": "ls", "timeout": 1.5}], ["Bash", {"command": "ls", "timeout": 2.0}],
    ["Bash", {"command": ""}], ["Bash", {}], ["Bash", {"command": "ls", "extra": 1}], ["Bash", {"command": ["ls"]}],
    ["Read", {"file_path": "a", "offset": 0, "limit": 1}], ["Read", {"file_path": "a", "limit": 0}],
    ["Read", {"file_path": "a", "offset": -1}], ["Read", {"file_path": "a", "offset": "3"}],
    ["Write", {"file_path": "a", "content": ""}], ["Write", {"file_path": "a"}],
    ["Edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": true}],
    ["Edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": "true"}],
    ["MultiEdit", {"file_path": "a", "edits": [{"old_string": "x", "new_string": "y"}]}],
    ["MultiEdit", {"file_path": "a", "edits": []}],
    ["MultiEdit", {"file_path": "a", "edits": [{"old_string": "x"}]}],
    ["MultiEdit", {"file_path": "a", "edits": [{"old_string": "x", "new_string": "y", "extra": 1}]}],
    ["Grep", {"pattern": "x", "output_mode": "content", "-A": 2, "-B": 0, "-C": 1, "-n": false, "-i": true,
              "head_limit": 0, "offset": 3, "multiline": true, "glob": "*.cu", "type": "cuda", "path": "k"}],
    ["Grep", {"pattern": "x", "output_mode": "lines"}], ["Grep", {"pattern": "x", "-A": -1}],
    ["Grep", {"pattern": ""}], ["Glob", {"pattern": "**/*.cu", "path": "kernels"}], ["Glob", {"path": "k"}]
  ])");
  for (const json& sample : samples) {
    const ca::ToolSpec* spec = nullptr;
    const std::vector<ca::ToolSpec> specs = registry.specs();
    for (const ca::ToolSpec& each : specs)
      if (each.name == sample[0].get<std::string>()) spec = &each;
    REQUIRE(spec != nullptr);
    const bool valid = ca::detail::describe_argument_errors(spec->name, spec->parameters, sample[1]).empty();
    data["samples"].push_back({{"tool", sample[0]}, {"arguments", sample[1]}, {"valid", valid}});
  }

  ca::testing::TempTree tree;
  const std::filesystem::path data_file = tree.base() / "tools.json";
  const std::filesystem::path script = tree.base() / "check_tools.py";
  ca::testing::TempTree::write_file(data_file, data.dump(2));
  ca::testing::TempTree::write_file(script, checker);

  ca::ProcessSpec run;
  run.argv = {python.string(), script.string(), data_file.string(),
              std::string(CUDA_AGENT_TEST_DATA_DIR) + "/openai_schemas/openai_chat_completions.schema.json"};
  run.timeout = std::chrono::seconds(120);
  run.merge_stderr = true;
  const ca::ProcessResult result = ca::run_process(run);
  INFO(result.standard_output.text);
  CHECK(result.succeeded());
  CHECK_THAT(result.standard_output.text, Catch::Matchers::Contains("checked 7 tools and 28 samples"));
}
