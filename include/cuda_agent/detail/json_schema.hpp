// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Validation against the subset of JSON Schema (draft 2020-12) that the library's own
/// schemas use (tool parameters, the service's requests), with messages written for whoever
/// sent the value: a model's tool call, a client's request.
///
/// Supported keywords: type (a name or a list of names), properties, required,
/// additionalProperties (boolean or schema), items, minItems, maxItems, enum, const,
/// minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength.
/// Annotations (description, default, title, examples, $schema, $comment) are ignored.
/// `unsupported_schema_keywords` lists anything else, so that a schema which relies on a
/// keyword this validator would silently skip is caught by a test, not by a model.

#include <cmath>        // floor, isfinite
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <set>          // set
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent::detail {

/// One reason the arguments do not fit the schema.
struct SchemaViolation {
  /// Where, as the model would name it: `timeout`, `edits[1].old_string`; empty for the
  /// arguments object itself.
  std::string location;
  std::string message;
};

namespace json_schema {

/// "an integer", "a string", ... as the model's mistake is described.
inline std::string describe_type(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

inline std::string article_for(std::string_view type_name) {
  if (type_name == "integer" || type_name == "array" || type_name == "object") return "an " + std::string(type_name);
  if (type_name == "null") return "null";
  return "a " + std::string(type_name);
}

/// A short rendering of a value for a message; long strings are shortened.
inline std::string preview(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

/// Integers are numbers without a fractional part, so 3.0 is an integer (as the draft says).
inline bool is_integer(const nlohmann::json& value) {
  if (value.is_number_integer()) return true;
  if (!value.is_number_float()) return false;
  const double number = value.get<double>();
  return std::isfinite(number) && std::floor(number) == number;
}

inline bool has_type(const nlohmann::json& value, std::string_view type_name) {
  if (type_name == "string") return value.is_string();
  if (type_name == "integer") return is_integer(value);
  if (type_name == "number") return value.is_number();
  if (type_name == "boolean") return value.is_boolean();
  if (type_name == "object") return value.is_object();
  if (type_name == "array") return value.is_array();
  if (type_name == "null") return value.is_null();
  return false;
}

inline std::string format_number(const nlohmann::json& number) { return number.dump(); }

inline std::string backticked(std::string_view location) { return "`" + std::string(location) + "`"; }

inline std::string subject(std::string_view location) {
  return location.empty() ? std::string("The arguments") : "The parameter " + backticked(location);
}

inline std::string child_location(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

inline void validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                     std::vector<SchemaViolation>& violations);

inline bool check_type(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                       std::vector<SchemaViolation>& violations) {
  const auto type = schema.find("type");
  if (type == schema.end()) return true;
  std::vector<std::string> allowed;
  if (type->is_string())
    allowed.push_back(type->get<std::string>());
  else if (type->is_array())
    for (const auto& each : *type) allowed.push_back(each.get<std::string>());
  for (const std::string& each : allowed)
    if (has_type(value, each)) return true;
  std::string expected;
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    if (i != 0) expected += i + 1 == allowed.size() ? " or " : ", ";
    expected += article_for(allowed[i]);
  }
  std::string message = subject(location) + " must be " + expected + ", but " + describe_type(value) + " was provided";
  if (value.is_string() && !allowed.empty() && allowed.front() != "string")
    message += " (" + preview(value) + "); send it as a JSON " + allowed.front() + ", without quotes";
  else if (!value.is_null() && !value.is_object() && !value.is_array())
    message += " (" + preview(value) + ")";
  violations.push_back({location, message + "."});
  return false;
}

inline void check_number(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                         std::vector<SchemaViolation>& violations) {
  const double number = value.get<double>();
  auto bound = [&](const char* keyword, auto violated, const char* relation) {
    const auto limit = schema.find(keyword);
    if (limit == schema.end() || !violated(number, limit->template get<double>())) return;
    violations.push_back({location, subject(location) + " must be " + relation + " " + format_number(*limit) +
                                        ", but " + format_number(value) + " was provided."});
  };
  bound(
      "minimum", [](double v, double l) { return v < l; }, "at least");
  bound(
      "maximum", [](double v, double l) { return v > l; }, "at most");
  bound(
      "exclusiveMinimum", [](double v, double l) { return v <= l; }, "greater than");
  bound(
      "exclusiveMaximum", [](double v, double l) { return v >= l; }, "less than");
}

inline std::size_t code_points(std::string_view text) {
  std::size_t count = 0;
  for (const char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++count;
  return count;
}

inline void check_string(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                         std::vector<SchemaViolation>& violations) {
  const std::size_t length = code_points(value.get_ref<const std::string&>());
  if (const auto minimum = schema.find("minLength"); minimum != schema.end() && length < minimum->get<std::size_t>()) {
    violations.push_back({location, minimum->get<std::size_t>() == 1
                                        ? subject(location) + " must not be empty."
                                        : subject(location) + " must be at least " + minimum->dump() +
                                              " characters long, but it has " + std::to_string(length) + "."});
  }
  if (const auto maximum = schema.find("maxLength"); maximum != schema.end() && length > maximum->get<std::size_t>())
    violations.push_back({location, subject(location) + " must be at most " + maximum->dump() +
                                        " characters long, but it has " + std::to_string(length) + "."});
}

inline void check_array(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                        std::vector<SchemaViolation>& violations) {
  const std::size_t size = value.size();
  if (const auto minimum = schema.find("minItems"); minimum != schema.end() && size < minimum->get<std::size_t>())
    violations.push_back({location, subject(location) + " must contain at least " + minimum->dump() +
                                        (minimum->get<std::size_t>() == 1 ? " item" : " items") + ", but it has " +
                                        std::to_string(size) + "."});
  if (const auto maximum = schema.find("maxItems"); maximum != schema.end() && size > maximum->get<std::size_t>())
    violations.push_back({location, subject(location) + " must contain at most " + maximum->dump() +
                                        (maximum->get<std::size_t>() == 1 ? " item" : " items") + ", but it has " +
                                        std::to_string(size) + "."});
  if (const auto items = schema.find("items"); items != schema.end() && items->is_object())
    for (std::size_t i = 0; i < size; ++i)
      validate(*items, value[i], std::string(location) + "[" + std::to_string(i) + "]", violations);
}

inline void check_object(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                         std::vector<SchemaViolation>& violations) {
  static const nlohmann::json no_properties = nlohmann::json::object();
  const auto properties_entry = schema.find("properties");
  const nlohmann::json& properties = properties_entry == schema.end() ? no_properties : *properties_entry;
  std::set<std::string> required;
  if (const auto listed = schema.find("required"); listed != schema.end())
    for (const auto& name : *listed) required.insert(name.get<std::string>());

  for (const std::string& name : required) {
    const auto given = value.find(name);
    if (given == value.end() || given->is_null())
      violations.push_back({child_location(location, name),
                            "The required parameter " + backticked(child_location(location, name)) + " is missing."});
  }

  const auto additional = schema.find("additionalProperties");
  for (const auto& [name, member] : value.items()) {
    const auto property = properties.find(name);
    if (property != properties.end()) {
      // A null for an optional parameter means "not given": models that fill in every
      // field of a schema send it, and it carries no value to validate.
      // A required one that is null was reported as missing above.
      if (member.is_null()) continue;
      validate(*property, member, child_location(location, name), violations);
      continue;
    }
    if (additional != schema.end() && additional->is_object()) {
      validate(*additional, member, child_location(location, name), violations);
      continue;
    }
    if (additional != schema.end() && additional->is_boolean() && !additional->get<bool>()) {
      std::string known;
      for (const auto& [known_name, ignored] : properties.items()) known += (known.empty() ? "" : ", ") + known_name;
      violations.push_back({child_location(location, name),
                            "An unexpected parameter " + backticked(child_location(location, name)) +
                                " was provided. Valid parameters" +
                                (location.empty() ? "" : " of " + backticked(location)) + ": " + known + "."});
    }
  }
}

inline void validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& location,
                     std::vector<SchemaViolation>& violations) {
  if (!schema.is_object()) return;
  if (!check_type(schema, value, location, violations)) return;

  if (const auto allowed = schema.find("enum"); allowed != schema.end()) {
    bool found = false;
    for (const auto& each : *allowed) found = found || each == value;
    if (!found) {
      std::string listed;
      for (const auto& each : *allowed) listed += (listed.empty() ? "" : ", ") + each.dump();
      violations.push_back(
          {location, subject(location) + " must be one of " + listed + ", but " + preview(value) + " was provided."});
      return;
    }
  }
  if (const auto constant = schema.find("const"); constant != schema.end() && *constant != value)
    violations.push_back(
        {location, subject(location) + " must be " + constant->dump() + ", but " + preview(value) + " was provided."});

  if (value.is_number())
    check_number(schema, value, location, violations);
  else if (value.is_string())
    check_string(schema, value, location, violations);
  else if (value.is_array())
    check_array(schema, value, location, violations);
  else if (value.is_object())
    check_object(schema, value, location, violations);
}

inline void collect_unsupported(const nlohmann::json& schema, const std::string& where, std::vector<std::string>& out) {
  static const std::set<std::string, std::less<>> supported = {"type",
                                                               "properties",
                                                               "required",
                                                               "additionalProperties",
                                                               "items",
                                                               "minItems",
                                                               "maxItems",
                                                               "enum",
                                                               "const",
                                                               "minimum",
                                                               "maximum",
                                                               "exclusiveMinimum",
                                                               "exclusiveMaximum",
                                                               "minLength",
                                                               "maxLength",
                                                               "description",
                                                               "default",
                                                               "title",
                                                               "examples",
                                                               "$schema",
                                                               "$comment"};
  if (!schema.is_object()) {
    if (!schema.is_boolean()) out.push_back(where + " (not a schema)");
    return;
  }
  for (const auto& [keyword, value] : schema.items()) {
    if (!supported.contains(keyword)) out.push_back(where + "/" + keyword);
    if (keyword == "properties" && value.is_object())
      for (const auto& [name, property] : value.items())
        collect_unsupported(property, where + "/properties/" + name, out);
    if ((keyword == "items" || keyword == "additionalProperties") && value.is_object())
      collect_unsupported(value, where + "/" + keyword, out);
  }
}

}  // namespace json_schema

/// Everything in `value` that does not fit `schema`; empty when it fits.
[[nodiscard]] inline std::vector<SchemaViolation> schema_violations(const nlohmann::json& schema,
                                                                    const nlohmann::json& value) {
  std::vector<SchemaViolation> violations;
  json_schema::validate(schema, value, "", violations);
  return violations;
}

/// JSON-pointer-like locations of keywords in `schema` that the validator does not
/// implement; empty for every schema this library ships.
[[nodiscard]] inline std::vector<std::string> unsupported_schema_keywords(const nlohmann::json& schema) {
  std::vector<std::string> found;
  json_schema::collect_unsupported(schema, "", found);
  return found;
}

/// The model-facing error for arguments that do not fit a tool's schema, or an empty
/// string when they fit.
[[nodiscard]] inline std::string describe_argument_errors(std::string_view tool_name, const nlohmann::json& schema,
                                                          const nlohmann::json& arguments) {
  if (!arguments.is_object())
    return "Error: the arguments for " + std::string(tool_name) + " must be a JSON object, but " +
           json_schema::describe_type(arguments) + " was provided.";
  const std::vector<SchemaViolation> violations = schema_violations(schema, arguments);
  if (violations.empty()) return {};
  std::string text = "Error: invalid arguments for " + std::string(tool_name) + ":";
  for (const SchemaViolation& violation : violations) text += "\n- " + violation.message;
  return text;
}

}  // namespace cuda_agent::detail
