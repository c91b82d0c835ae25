// SPDX-License-Identifier: Apache-2.0
#pragma once

// The content-addressed object cache under the cache's `objects/` and `manifests/`
// folders, shared by workspaces, episodes and processes. An object is found in two steps
// because which candidate headers a unit reads is known only after compiling it: the
// base key (source, flags, toolchain) names a manifest folder, each manifest lists the
// headers one compile read, and the full key adds their content.

#include <exception>     // exception
#include <filesystem>    // path, exists, is_directory, directory_iterator
#include <map>           // map
#include <optional>      // optional, nullopt
#include <set>           // set
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <utility>       // move
#include <vector>        // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/compile/detail/build_graph.hpp"
#include "cuda_agent/compile/detail/build_support.hpp"
#include "cuda_agent/compile/detail/compile_flags.hpp"
#include "cuda_agent/compile/toolchain.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/sha256.hpp"

namespace cuda_agent::detail::compile {

/// The object cache rooted at one directory (`CompileOptions::cache_directory`). Cache
/// writes are atomic, so concurrent builds never see a torn object.
class ObjectCache {
 public:
  explicit ObjectCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

  std::string unit_base_key(const Toolchain& tools, const std::string& unit, const std::string& content,
                            const std::vector<std::string>& key_flags) const {
    detail::Sha256 hash;
    hash.update("cuda-agent object v2\n").update(header_content_key(tools)).update("\n");
    for (const auto& flag : key_flags) hash.update(flag).update(std::string_view("\0", 1));
    hash.update("\n").update(unit).update("\n").update(detail::sha256_hex(content));
    return hash.hex_digest();
  }

  static std::string unit_full_key(const std::string& base, const std::vector<std::string>& headers,
                                   const std::map<std::string, std::string>& files) {
    detail::Sha256 hash;
    hash.update(base);
    for (const std::string& header : headers) {
      const auto file = files.find(header);
      hash.update("\n").update(header).update("=").update(file == files.end() ? "missing"
                                                                              : detail::sha256_hex(file->second));
    }
    return hash.hex_digest();
  }

  std::filesystem::path object_in_cache(const std::string& key) const {
    return directory_ / "objects" / key.substr(0, 2) / (key + ".o");
  }
  std::filesystem::path manifest_directory(const std::string& base) const {
    return directory_ / "manifests" / base.substr(0, 2) / base;
  }

  /// A cached object for `base` whose recorded headers match the snapshot, if any.
  std::optional<std::string> find_cached(const std::string& base,
                                         const std::map<std::string, std::string>& files) const {
    std::error_code error;
    const std::filesystem::path directory = manifest_directory(base);
    if (!std::filesystem::is_directory(directory, error)) return std::nullopt;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (entry.path().extension() != ".json") continue;
      try {
        const nlohmann::json manifest = nlohmann::json::parse(detail::read_file(entry.path()));
        const auto headers = manifest.at("headers").get<std::vector<std::string>>();
        const std::string key = unit_full_key(base, headers, files);
        if (std::filesystem::exists(object_in_cache(key), error)) return key;
      } catch (const std::exception&) {
        // A damaged manifest is only a missed hit.
      }
    }
    return std::nullopt;
  }

  /// Records the object under its full key: the source, the candidate headers the
  /// depfile names (with their content), and everything in `base`. A unit that reads
  /// files from outside the candidate and outside the toolchain is not cached, since
  /// its key could not cover them.
  void store_in_cache(const std::string& base, const std::string& unit, const std::map<std::string, std::string>& files,
                      const std::filesystem::path& source_root, const Toolchain& tools,
                      const std::filesystem::path& depfile, UnitOutcome& outcome) const {
    std::error_code error;
    if (!std::filesystem::exists(depfile, error)) {
      outcome.cacheable = false;
      outcome.uncacheable_reason = "the compiler wrote no dependency file";
      return;
    }
    std::set<std::string> headers;
    for (const std::string& prerequisite : parse_depfile(detail::read_file(depfile))) {
      std::filesystem::path path(prerequisite);
      if (path.is_relative()) path = source_root / path;
      path = path.lexically_normal();
      if (is_under(path, source_root)) {
        const std::string relative = path.lexically_relative(source_root).generic_string();
        if (relative != unit) headers.insert(relative);
        continue;
      }
      const bool toolchain_file = is_under(path, "/usr") || is_under(path, tools.cuda_home) ||
                                  is_under(path, tools.torch_directory) ||
                                  is_under(path, tools.python_include_directory) ||
                                  is_under(path, tools.cudnn_include_directory) || is_under(path, directory_);
      if (!toolchain_file) {
        outcome.cacheable = false;
        outcome.uncacheable_reason = "includes " + path.string() + ", outside the candidate and the toolchain";
        return;
      }
    }
    const std::vector<std::string> header_list(headers.begin(), headers.end());
    for (const std::string& header : header_list) {
      if (!files.count(header)) {
        outcome.cacheable = false;
        outcome.uncacheable_reason = "includes " + header + ", which is not a candidate source file";
        return;
      }
    }
    const std::string key = unit_full_key(base, header_list, files);
    outcome.key = key;
    detail::copy_file_atomically(outcome.object, object_in_cache(key));
    detail::write_file_atomically(std::filesystem::path(object_in_cache(key)).replace_extension(".log"),
                                  outcome.output);
    const std::string variant = detail::sha256_hex(join(header_list, "\n"));
    detail::write_file_atomically(manifest_directory(base) / (variant + ".json"),
                                  nlohmann::json{{"unit", unit}, {"headers", header_list}}.dump());
  }

 private:
  std::filesystem::path directory_;
};

}  // namespace cuda_agent::detail::compile
