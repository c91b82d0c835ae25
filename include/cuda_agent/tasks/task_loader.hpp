// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Tasks from the formats the field uses: a KernelBench problem file, a CUDA-Agent
/// style workspace directory (`model.py`, `model_new.py`, `kernels/`), and rows of a
/// CUDA-Agent-Ops-6K style JSONL file (`ops`, `data_source`, `code`).
///
/// The reference module is read, never run: the loader checks that it defines `Model`,
/// `get_inputs` and `get_init_inputs`, and records what can be seen statically in the
/// task's metadata:
///
/// | key                      | meaning                                                        |
/// | ------------------------ | -------------------------------------------------------------- |
/// | `level`, `problem_id`    | KernelBench level and problem number (from `levelN/ID_Name.py`) |
/// | `constants`              | module-level constants whose value is a literal expression     |
/// | `constant_expressions`   | every module-level constant, as written                        |
/// | `constructor_parameters` | `Model.__init__`'s parameters after `self`: name, default, ... |
/// | `constructor_signature`  | the same, as one line of source                                |
/// | `forward_signature`      | `Model.forward`'s parameters after `self`, as one line          |
/// | `ops`, `data_source`     | Ops-6K fields (`op_count` from a `torch#N` data source)        |
/// | `source`                 | where the task was read from                                   |

#include <algorithm>    // sort, all_of
#include <cctype>       // isdigit, isalnum
#include <cstddef>      // size_t
#include <filesystem>   // path, directory_iterator
#include <fstream>      // ifstream
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string, getline
#include <string_view>  // string_view
#include <utility>      // move, pair
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tasks/detail/python_source.hpp"

namespace cuda_agent {

/// A task could not be loaded. The message names the file (and line, for JSONL) and
/// what was missing or malformed.
class TaskLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One parameter of `Model.__init__`.
struct ConstructorParameter {
  std::string name;
  /// The default value as written, if any.
  std::optional<std::string> default_value;
  /// The annotation as written, if any.
  std::optional<std::string> annotation;
  /// "*args" or "**kwargs" style, or a bare "*" / "/" marker.
  std::string kind = "positional_or_keyword";
};

/// What the loader sees in a reference module without running it.
struct ReferenceModule {
  bool defines_model = false;
  bool defines_get_inputs = false;
  bool defines_get_init_inputs = false;
  /// Parameters of `Model.__init__` after `self` (empty when it takes none or is absent).
  std::vector<ConstructorParameter> constructor_parameters;
  /// The parameter list after `self`, as one line ("input_size, layer_sizes, output_size").
  std::string constructor_signature;
  /// `Model.forward`'s parameter list after `self`, as one line ("x: torch.Tensor").
  std::string forward_signature;
  /// Module-level constants with a literal value (`batch_size = 16 * 2` gives 32).
  nlohmann::json constants = nlohmann::json::object();
  /// Every module-level constant's expression, as written.
  nlohmann::json constant_expressions = nlohmann::json::object();

  /// The parts of the task contract that are missing, e.g. {"def get_inputs()"}.
  [[nodiscard]] std::vector<std::string> missing() const {
    std::vector<std::string> absent;
    if (!defines_model) absent.emplace_back("class Model");
    if (!defines_get_inputs) absent.emplace_back("def get_inputs()");
    if (!defines_get_init_inputs) absent.emplace_back("def get_init_inputs()");
    return absent;
  }
};

namespace detail {

inline bool starts_with_keyword(std::string_view code, std::string_view keyword) {
  return code.substr(0, keyword.size()) == keyword &&
         (code.size() == keyword.size() || !python::is_identifier_char(code[keyword.size()]));
}

/// The name defined by "class X..." or "def X..." (empty if `code` is neither).
inline std::string defined_name(std::string_view code, std::string_view keyword) {
  if (!starts_with_keyword(code, keyword)) return {};
  std::size_t at = keyword.size();
  while (at < code.size() && code[at] == ' ') ++at;
  const std::size_t start = at;
  while (at < code.size() && python::is_identifier_char(code[at])) ++at;
  return std::string(code.substr(start, at - start));
}

inline std::vector<ConstructorParameter> parse_parameters(std::string_view list) {
  std::vector<ConstructorParameter> parameters;
  for (const std::string& raw : python::split_top_level(list, ',')) {
    std::string text = python::trim(raw);
    if (text.empty()) continue;
    ConstructorParameter parameter;
    const std::vector<std::string> with_default = python::split_top_level(text, '=');
    if (with_default.size() >= 2) {
      std::string value;
      for (std::size_t i = 1; i < with_default.size(); ++i) value += (i > 1 ? "=" : "") + with_default[i];
      parameter.default_value = python::trim(value);
    }
    std::string head = python::trim(with_default[0]);
    const std::vector<std::string> with_annotation = python::split_top_level(head, ':');
    if (with_annotation.size() >= 2) {
      parameter.annotation = python::trim(head.substr(with_annotation[0].size() + 1));
      head = python::trim(with_annotation[0]);
    }
    if (head.rfind("**", 0) == 0) {
      parameter.kind = "var_keyword";
      head = head.substr(2);
    } else if (head.rfind('*', 0) == 0) {
      parameter.kind = head == "*" ? "keyword_only_marker" : "var_positional";
      head = head == "*" ? head : head.substr(1);
    } else if (head == "/") {
      parameter.kind = "positional_only_marker";
    }
    parameter.name = head;
    parameters.push_back(std::move(parameter));
  }
  return parameters;
}

/// The parameters of a method definition ("def f(self, a, b=2):") after `self`, parsed
/// and as one line of source.
inline std::pair<std::vector<ConstructorParameter>, std::string> method_parameters(const std::string& definition) {
  const auto open = definition.find('(');
  if (open == std::string::npos) return {};
  const std::string inside = python::bracketed(definition, open);
  std::vector<ConstructorParameter> parameters = parse_parameters(inside);
  if (!parameters.empty() && parameters.front().name == "self") parameters.erase(parameters.begin());
  std::string signature;
  const std::vector<std::string> pieces = python::split_top_level(inside, ',');
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const std::string piece = python::trim(pieces[k]);
    if ((k == 0 && piece == "self") || piece.empty()) continue;
    signature += (signature.empty() ? "" : ", ") + piece;
  }
  return {std::move(parameters), std::move(signature)};
}

inline void to_json(nlohmann::json& out, const ConstructorParameter& parameter) {
  out = {{"name", parameter.name}, {"kind", parameter.kind}};
  if (parameter.default_value) out["default"] = *parameter.default_value;
  if (parameter.annotation) out["annotation"] = *parameter.annotation;
}

/// Records `NAME = expression` statements (also `a = b = expression`, `x: int = 3` and
/// several statements joined by ';') of one top-level logical line.
inline void record_constants(const std::string& code, ReferenceModule& module) {
  for (const std::string& statement_text : python::split_top_level(code, ';')) {
    const std::string statement = python::trim(statement_text);
    std::vector<std::string> parts = python::split_top_level(statement, '=');
    if (parts.size() < 2) continue;
    // Comparisons and keyword arguments are not assignments: "==", "<=", ">=", "!=".
    bool plain_assignment = true;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string& left = parts[i];
      const std::string& right = parts[i + 1];
      if (right.empty() || right[0] == '=' || left.empty() ||
          std::string_view("<>!+-*/%&|^@:").find(left.back()) != std::string_view::npos)
        plain_assignment = false;
    }
    if (!plain_assignment) continue;
    const std::string expression = python::trim(parts.back());
    parts.pop_back();
    for (std::string& target_text : parts) {
      std::string target = python::trim(target_text);
      if (const auto colon = target.find(':'); colon != std::string::npos)
        target = python::trim(target.substr(0, colon));
      if (!python::is_identifier(target)) continue;
      module.constant_expressions[target] = expression;
      python::ConstantEvaluator evaluator(module.constants);
      if (auto value = evaluator.evaluate(expression))
        module.constants[target] = std::move(*value);
      else
        module.constants.erase(target);
    }
  }
}

}  // namespace detail

/// Reads the shape of a reference module: which of `Model`, `get_inputs` and
/// `get_init_inputs` it defines at module level, `Model.__init__`'s parameters, and its
/// module-level constants.
[[nodiscard]] inline ReferenceModule analyze_reference_source(std::string_view source) {
  ReferenceModule module;
  const std::vector<detail::python::LogicalLine> lines = detail::python::logical_lines(source);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const detail::python::LogicalLine& line = lines[i];
    if (line.indentation != 0) continue;
    const std::string& code = line.code;
    if (detail::defined_name(code, "class") == "Model") {
      module.defines_model = true;
      // The class body: the following lines indented deeper; methods at the body's level.
      int body_indentation = -1;
      for (std::size_t j = i + 1; j < lines.size() && lines[j].indentation > 0; ++j) {
        if (body_indentation < 0) body_indentation = lines[j].indentation;
        if (lines[j].indentation != body_indentation) continue;
        const std::string method = detail::defined_name(lines[j].code, "def");
        if (method == "__init__") {
          auto [parameters, signature] = detail::method_parameters(lines[j].code);
          module.constructor_parameters = std::move(parameters);
          module.constructor_signature = std::move(signature);
        } else if (method == "forward") {
          module.forward_signature = detail::method_parameters(lines[j].code).second;
        }
      }
      continue;
    }
    const std::string function = detail::defined_name(code, "def");
    if (function == "get_inputs") module.defines_get_inputs = true;
    if (function == "get_init_inputs") module.defines_get_init_inputs = true;
    if (!function.empty() || detail::starts_with_keyword(code, "class") ||
        detail::starts_with_keyword(code, "import") || detail::starts_with_keyword(code, "from") || code[0] == '@')
      continue;
    detail::record_constants(code, module);
  }
  return module;
}

/// A name usable as a relative path: components of [A-Za-z0-9._-] separated by '/',
/// other characters replaced by '_', no empty, "." or ".." components, no leading dot.
[[nodiscard]] inline std::string make_task_name(std::string_view text) {
  std::string name;
  std::string component;
  auto flush = [&] {
    for (char& c : component) {
      if (c != '.') break;
      c = '_';
    }
    if (!component.empty()) name += (name.empty() ? "" : "/") + component;
    component.clear();
  };
  for (const char c : text) {
    if (c == '/' || c == '\\') {
      flush();
      continue;
    }
    const bool safe = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
    component += safe ? c : '_';
  }
  flush();
  return name.empty() ? "task" : name;
}

namespace detail {

inline void require_task_module(const ReferenceModule& module, const std::string& where) {
  const std::vector<std::string> missing = module.missing();
  if (missing.empty()) return;
  std::string list;
  for (const std::string& each : missing) list += (list.empty() ? "" : ", ") + each;
  throw TaskLoadError(where + ": no " + list +
                      " at module level; a task module must define class Model, def get_inputs() and "
                      "def get_init_inputs()");
}

inline void add_module_metadata(const ReferenceModule& module, nlohmann::json& metadata) {
  metadata["constants"] = module.constants;
  metadata["constant_expressions"] = module.constant_expressions;
  metadata["constructor_parameters"] = nlohmann::json::array();
  for (const ConstructorParameter& parameter : module.constructor_parameters) {
    nlohmann::json entry;
    to_json(entry, parameter);
    metadata["constructor_parameters"].push_back(std::move(entry));
  }
  metadata["constructor_signature"] = module.constructor_signature;
  metadata["forward_signature"] = module.forward_signature;
}

/// "19_ReLU" -> 19; nullopt without a numeric prefix.
inline std::optional<int> problem_number(std::string_view stem) {
  std::size_t digits = 0;
  while (digits < stem.size() && std::isdigit(static_cast<unsigned char>(stem[digits])) != 0) ++digits;
  if (digits == 0 || digits > 9 || (digits < stem.size() && stem[digits] != '_')) return std::nullopt;
  return std::stoi(std::string(stem.substr(0, digits)));
}

/// "level2" -> 2.
inline std::optional<int> level_number(std::string_view directory) {
  if (directory.substr(0, 5) != "level" || directory.size() == 5 || directory.size() > 8) return std::nullopt;
  for (const char c : directory.substr(5))
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return std::nullopt;
  return std::stoi(std::string(directory.substr(5)));
}

inline std::string read_task_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    throw TaskLoadError(path.string() +
                        ": no such file (expected a Python module defining Model, get_inputs and "
                        "get_init_inputs)");
  try {
    return read_file(path);
  } catch (const std::exception& failure) {
    throw TaskLoadError(failure.what());
  }
}

}  // namespace detail

/// Loads a KernelBench problem file. The name is `levelN/<file stem>` when the file sits
/// in a `levelN` folder (as in the KernelBench repository), else the file stem.
[[nodiscard]] inline Task load_kernelbench_task(const std::filesystem::path& file) {
  Task task;
  task.reference_source = detail::read_task_file(file);
  task.origin = TaskOrigin::kernelbench_file;
  const ReferenceModule module = analyze_reference_source(task.reference_source);
  detail::require_task_module(module, file.string());

  const std::string stem = file.stem().string();
  const std::string folder = file.parent_path().filename().string();
  const std::optional<int> level = detail::level_number(folder);
  task.name = make_task_name(level ? folder + "/" + stem : stem);
  if (level) task.metadata["level"] = *level;
  if (const auto number = detail::problem_number(stem)) task.metadata["problem_id"] = *number;
  task.metadata["problem_name"] = stem;
  task.metadata["source"] = file.string();
  detail::add_module_metadata(module, task.metadata);
  return task;
}

/// Loads every `*.py` problem below `directory` (e.g. a KernelBench checkout's
/// `KernelBench/` folder), ordered by level and then problem number.
[[nodiscard]] inline std::vector<Task> load_kernelbench_tasks(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error))
    throw TaskLoadError(directory.string() + ": not a directory of KernelBench problem files");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory))
    if (entry.is_regular_file() && entry.path().extension() == ".py" && entry.path().filename() != "__init__.py")
      files.push_back(entry.path());
  std::vector<Task> tasks;
  tasks.reserve(files.size());
  for (const auto& file : files) tasks.push_back(load_kernelbench_task(file));
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    const auto key = [](const Task& task) {
      return std::tuple(task.metadata.value("level", 0), task.metadata.value("problem_id", 0), task.name);
    };
    return key(a) < key(b);
  });
  return tasks;
}

/// Loads a CUDA-Agent style workspace: `model.py` is the reference; `model_new.py` and
/// the sources under `kernels/`, when present, become the task's candidate files. The
/// name is `name` if given, else the directory's name.
[[nodiscard]] inline Task load_workspace_task(const std::filesystem::path& directory, std::string_view name = {}) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error))
    throw TaskLoadError(directory.string() +
                        ": not a directory (a workspace holds model.py, model_new.py and "
                        "kernels/)");
  const std::filesystem::path reference = directory / "model.py";
  if (!std::filesystem::exists(reference, error))
    throw TaskLoadError(directory.string() + ": no model.py (the reference Model, get_inputs and get_init_inputs)");
  Task task;
  task.reference_source = detail::read_task_file(reference);
  task.origin = TaskOrigin::workspace;
  const ReferenceModule module = analyze_reference_source(task.reference_source);
  detail::require_task_module(module, reference.string());
  try {
    task.candidate_files = read_candidate_sources(directory).files;
  } catch (const std::exception& failure) {
    throw TaskLoadError(directory.string() + ": cannot read the candidate files: " + failure.what());
  }
  const std::string directory_name = std::filesystem::absolute(directory).lexically_normal().filename().string();
  task.name = make_task_name(name.empty() ? (directory_name.empty() ? "workspace" : directory_name) : name);
  task.metadata["source"] = directory.string();
  detail::add_module_metadata(module, task.metadata);
  return task;
}

/// Loads one CUDA-Agent-Ops-6K row: an object with `code` (the reference module),
/// `ops` (a list of operator names, as a JSON array or as the string form the dataset
/// uses) and `data_source` (e.g. "torch#2"). `where` names the row in error messages
/// ("ops.jsonl:17"); `row` (0-based), when given, is part of the name.
[[nodiscard]] inline Task load_ops6k_row(const nlohmann::json& row, std::string_view where,
                                         std::optional<std::size_t> row_index = std::nullopt) {
  const std::string location(where);
  if (!row.is_object()) throw TaskLoadError(location + ": a row must be a JSON object with ops, data_source and code");
  for (const char* field : {"code", "ops", "data_source"})
    if (!row.contains(field)) throw TaskLoadError(location + ": the row has no \"" + field + "\" field");
  if (!row["code"].is_string()) throw TaskLoadError(location + ": \"code\" must be a string (the reference module)");
  if (!row["data_source"].is_string()) throw TaskLoadError(location + ": \"data_source\" must be a string");

  nlohmann::json ops = nlohmann::json::array();
  const nlohmann::json& raw_ops = row["ops"];
  if (raw_ops.is_array()) {
    ops = raw_ops;
  } else if (raw_ops.is_string()) {
    const std::string text = detail::python::trim(raw_ops.get<std::string>());
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    if (parsed.is_discarded()) {
      const nlohmann::json nothing = nlohmann::json::object();
      detail::python::ConstantEvaluator evaluator(nothing);
      parsed = evaluator.evaluate(text).value_or(nlohmann::json());
    }
    if (parsed.is_array()) {
      ops = parsed;
    } else {
      for (const std::string& piece : detail::python::split_top_level(text, ','))
        if (const std::string op = detail::python::trim(piece); !op.empty()) ops.push_back(op);
    }
  } else {
    throw TaskLoadError(location + ": \"ops\" must be a list of operator names or a string");
  }
  for (const auto& op : ops)
    if (!op.is_string()) throw TaskLoadError(location + ": \"ops\" must hold operator names (strings)");

  Task task;
  task.reference_source = row["code"].get<std::string>();
  task.origin = TaskOrigin::ops6k_row;
  const ReferenceModule module = analyze_reference_source(task.reference_source);
  detail::require_task_module(module, location + " (field \"code\")");

  std::string slug;
  for (const auto& op : ops) {
    std::string name = op.get<std::string>();
    if (const auto dot = name.find_last_of('.'); dot != std::string::npos) name = name.substr(dot + 1);
    slug += (slug.empty() ? "" : "_") + name;
  }
  if (slug.size() > 80) slug.resize(80);
  if (slug.empty()) slug = "ops";
  const std::string hash = task.content_hash().substr(0, 8);
  if (row_index) {
    std::string number = std::to_string(*row_index);
    if (number.size() < 5) number.insert(0, 5 - number.size(), '0');
    task.name = make_task_name("ops6k/" + number + "_" + slug);
    task.metadata["row"] = *row_index;
  } else {
    task.name = make_task_name("ops6k/" + slug + "_" + hash);
  }

  const std::string data_source = row["data_source"].get<std::string>();
  task.metadata["ops"] = ops;
  task.metadata["data_source"] = data_source;
  if (const auto hash_sign = data_source.rfind('#'); hash_sign != std::string::npos) {
    const std::string count = data_source.substr(hash_sign + 1);
    if (!count.empty() && count.size() < 4 && std::all_of(count.begin(), count.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        }))
      task.metadata["op_count"] = std::stoi(count);
  }
  task.metadata["source"] = location;
  detail::add_module_metadata(module, task.metadata);
  return task;
}

/// Loads every row of a CUDA-Agent-Ops-6K style JSONL file (one object per line; blank
/// lines are skipped). Errors name the file and line.
[[nodiscard]] inline std::vector<Task> load_ops6k_tasks(const std::filesystem::path& file) {
  std::ifstream stream(file);
  if (!stream) throw TaskLoadError(file.string() + ": cannot open (expected a JSONL file of Ops-6K rows)");
  std::vector<Task> tasks;
  std::string line;
  std::size_t line_number = 0;
  std::size_t row = 0;
  while (std::getline(stream, line)) {
    ++line_number;
    if (detail::python::trim(line).empty()) continue;
    const std::string where = file.string() + ":" + std::to_string(line_number);
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    if (parsed.is_discarded()) throw TaskLoadError(where + ": not valid JSON");
    tasks.push_back(load_ops6k_row(parsed, where, row++));
  }
  return tasks;
}

/// Loads a task from `path`: a directory is a workspace, a `.py` file a KernelBench
/// problem. (A JSONL file holds many tasks: use load_ops6k_tasks.)
[[nodiscard]] inline Task load_task(const std::filesystem::path& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return load_workspace_task(path);
  if (path.extension() == ".py") return load_kernelbench_task(path);
  if (path.extension() == ".jsonl")
    throw TaskLoadError(path.string() + ": a JSONL file holds many tasks; load it with load_ops6k_tasks");
  throw TaskLoadError(path.string() + ": not a task (expected a KernelBench .py file or a workspace directory)");
}

}  // namespace cuda_agent
