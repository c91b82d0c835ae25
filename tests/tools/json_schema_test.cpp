// SPDX-License-Identifier: Apache-2.0
// The argument validator: every keyword it supports, and messages a model can act on.
#include "catch.hpp"

#include <cuda_agent/detail/json_schema.hpp>

#include <algorithm>
#include <string>

namespace detail = cuda_agent::detail;
using nlohmann::json;

namespace {

const json schema = json::parse(R"({
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 600000},
    "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "mode": {"type": "string", "enum": ["content", "count"]},
    "flag": {"type": "boolean"},
    "name": {"type": "string", "maxLength": 3},
    "kind": {"const": "fixed"},
    "either": {"type": ["string", "integer"]},
    "edits": {"type": "array", "minItems": 1, "maxItems": 2,
              "items": {"type": "object",
                        "properties": {"old_string": {"type": "string"}},
                        "required": ["old_string"],
                        "additionalProperties": false}}
  },
  "required": ["command"],
  "additionalProperties": false
})");

std::string errors(const json& arguments) { return detail::describe_argument_errors("Bash", schema, arguments); }

}  // namespace

TEST_CASE("valid arguments produce no message", "[tools][schema]") {
  CHECK(errors(json{{"command", "ls"}}).empty());
  CHECK(errors(json{{"command", "ls"}, {"timeout", 1000}, {"mode", "count"}, {"flag", true}}).empty());
  CHECK(errors(json{{"command", "ls"}, {"timeout", 1000.0}}).empty());  // 1000.0 is an integer in JSON Schema
  CHECK(errors(json{{"command", "ls"}, {"either", 3}}).empty());
  CHECK(errors(json{{"command", "ls"}, {"either", "x"}}).empty());
  CHECK(errors(json{{"command", "ls"}, {"kind", "fixed"}}).empty());
  CHECK(errors(json{{"command", "ls"}, {"edits", {{{"old_string", "a"}}}}}).empty());
}

TEST_CASE("null for an optional parameter means it was not given", "[tools][schema]") {
  CHECK(errors(json{{"command", "ls"}, {"timeout", nullptr}, {"mode", nullptr}}).empty());
  CHECK_THAT(errors(json{{"command", nullptr}}),
             Catch::Matchers::Contains("The required parameter `command` is missing."));
}

TEST_CASE("each violation is described for the model", "[tools][schema]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(errors(json::object()), Contains("Error: invalid arguments for Bash:") &&
                                         Contains("The required parameter `command` is missing."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"colour", 1}}),
             Contains("An unexpected parameter `colour` was provided. Valid parameters: ") && Contains("command") &&
                 Contains("timeout"));
  CHECK_THAT(errors(json{{"command", 5}}),
             Contains("The parameter `command` must be a string, but an integer was provided (5)."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"timeout", "100"}}),
             Contains("The parameter `timeout` must be an integer, but a string was provided (\"100\"); send it as a "
                      "JSON integer, without quotes."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"timeout", 1.5}}),
             Contains("The parameter `timeout` must be an integer, but a number was provided (1.5)."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"timeout", 900000}}),
             Contains("The parameter `timeout` must be at most 600000, but 900000 was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"timeout", 0}}),
             Contains("The parameter `timeout` must be at least 1, but 0 was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"ratio", 0}}),
             Contains("The parameter `ratio` must be greater than 0, but 0 was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"ratio", 1}}),
             Contains("The parameter `ratio` must be less than 1, but 1 was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"mode", "lines"}}),
             Contains("The parameter `mode` must be one of \"content\", \"count\", but \"lines\" was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"flag", "true"}}),
             Contains("The parameter `flag` must be a boolean, but a string was provided (\"true\")"));
  CHECK_THAT(errors(json{{"command", ""}}), Contains("The parameter `command` must not be empty."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"name", "abcd"}}),
             Contains("The parameter `name` must be at most 3 characters long, but it has 4."));
  CHECK(errors(json{{"command", "ls"}, {"name", "\xC3\xA9\xC3\xA9\xC3\xA9"}}).empty());  // characters, not bytes
  CHECK_THAT(errors(json{{"command", "ls"}, {"kind", "other"}}),
             Contains("The parameter `kind` must be \"fixed\", but \"other\" was provided."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"either", true}}),
             Contains("The parameter `either` must be a string or an integer, but a boolean was provided"));
}

TEST_CASE("nested arrays and objects name the failing element", "[tools][schema]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(errors(json{{"command", "ls"}, {"edits", json::array()}}),
             Contains("The parameter `edits` must contain at least 1 item, but it has 0."));
  CHECK_THAT(
      errors(json{{"command", "ls"}, {"edits", {{{"old_string", "a"}}, {{"old_string", "b"}}, {{"old_string", "c"}}}}}),
      Contains("The parameter `edits` must contain at most 2 items, but it has 3."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"edits", {{{"old_string", "a"}}, {{"new", "b"}}}}}),
             Contains("The required parameter `edits[1].old_string` is missing.") &&
                 Contains("An unexpected parameter `edits[1].new` was provided. Valid parameters of `edits[1]`: "
                          "old_string."));
  CHECK_THAT(errors(json{{"command", "ls"}, {"edits", {"text"}}}),
             Contains("The parameter `edits[0]` must be an object, but a string was provided"));
}

TEST_CASE("several problems are all reported, one per line", "[tools][schema]") {
  const std::string text = errors(json{{"timeout", "x"}, {"bogus", 1}});
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
}

TEST_CASE("arguments that are not an object are refused", "[tools][schema]") {
  CHECK(errors(json::array()) == "Error: the arguments for Bash must be a JSON object, but an array was provided.");
  CHECK(errors(json("ls")) == "Error: the arguments for Bash must be a JSON object, but a string was provided.");
}

TEST_CASE("keywords the validator does not implement are listed", "[tools][schema]") {
  CHECK(detail::unsupported_schema_keywords(schema).empty());
  const json with_pattern = {
      {"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"pattern", "^x"}}}}}, {"anyOf", json::array()}};
  const auto found = detail::unsupported_schema_keywords(with_pattern);
  REQUIRE(found.size() == 2);
  CHECK(found[0] == "/anyOf");
  CHECK(found[1] == "/properties/a/pattern");
}
