// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reads the dynamic symbol table of a 64-bit little-endian ELF shared object: which
// symbols it needs from other libraries and which it defines. The compile driver uses
// it to enforce the library policy on what the extension actually links against, and to
// check that the module defines its Python entry point, without running any tool on a
// file the candidate produced.

#include <cstddef>      // size_t
#include <cstdint>      // uint16_t, uint32_t, uint64_t
#include <cstring>      // memcpy
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

namespace cuda_agent::detail {

struct DynamicSymbols {
  /// Symbols the object needs from elsewhere (undefined in its .dynsym).
  std::vector<std::string> undefined;
  /// Global or weak symbols it defines and exports.
  std::vector<std::string> defined;
};

namespace elf {

template <class T>
[[nodiscard]] inline std::optional<T> read_at(std::string_view image, std::uint64_t offset) noexcept {
  if (offset > image.size() || image.size() - offset < sizeof(T)) return std::nullopt;
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace elf

/// Parses `image` (the bytes of an ELF64 little-endian file). nullopt when it is not
/// one, or when its section or symbol tables point outside the file.
[[nodiscard]] inline std::optional<DynamicSymbols> read_dynamic_symbols(std::string_view image) {
  using elf::read_at;
  if (image.size() < 64 || image.substr(0, 4) != std::string_view("\x7f"
                                                                  "ELF",
                                                                  4))
    return std::nullopt;
  if (image[4] != 2 /* ELFCLASS64 */ || image[5] != 1 /* ELFDATA2LSB */) return std::nullopt;

  const auto section_offset = read_at<std::uint64_t>(image, 0x28);
  const auto section_entry_size = read_at<std::uint16_t>(image, 0x3A);
  const auto section_count = read_at<std::uint16_t>(image, 0x3C);
  if (!section_offset || !section_entry_size || !section_count || *section_entry_size < 64) return std::nullopt;

  struct Section {
    std::uint32_t type;
    std::uint64_t offset;
    std::uint64_t size;
    std::uint32_t link;
    std::uint64_t entry_size;
  };
  auto section = [&](std::uint32_t index) -> std::optional<Section> {
    const std::uint64_t base = *section_offset + std::uint64_t{index} * *section_entry_size;
    const auto type = read_at<std::uint32_t>(image, base + 0x04);
    const auto offset = read_at<std::uint64_t>(image, base + 0x18);
    const auto size = read_at<std::uint64_t>(image, base + 0x20);
    const auto link = read_at<std::uint32_t>(image, base + 0x28);
    const auto entry_size = read_at<std::uint64_t>(image, base + 0x38);
    if (!type || !offset || !size || !link || !entry_size) return std::nullopt;
    return Section{*type, *offset, *size, *link, *entry_size};
  };
  auto inside = [&](const Section& each) {
    return each.offset <= image.size() && image.size() - each.offset >= each.size;
  };

  DynamicSymbols symbols;
  for (std::uint32_t index = 0; index < *section_count; ++index) {
    const auto table = section(index);
    if (!table) return std::nullopt;
    if (table->type != 11 /* SHT_DYNSYM */) continue;
    const auto strings = section(table->link);
    if (!strings || !inside(*table) || !inside(*strings) || table->entry_size < 24) return std::nullopt;
    const std::string_view names = image.substr(strings->offset, strings->size);
    for (std::uint64_t at = table->entry_size; at + 24 <= table->size; at += table->entry_size) {
      const std::uint64_t entry = table->offset + at;
      const auto name_offset = read_at<std::uint32_t>(image, entry);
      const auto info = read_at<std::uint8_t>(image, entry + 4);
      const auto section_index = read_at<std::uint16_t>(image, entry + 6);
      if (!name_offset || !info || !section_index || *name_offset >= names.size()) return std::nullopt;
      const std::string_view rest = names.substr(*name_offset);
      const std::string name(rest.substr(0, rest.find('\0')));
      if (name.empty()) continue;
      const unsigned binding = *info >> 4;
      if (*section_index == 0 /* SHN_UNDEF */)
        symbols.undefined.push_back(name);
      else if (binding == 1 /* GLOBAL */ || binding == 2 /* WEAK */ || binding == 10 /* GNU_UNIQUE */)
        symbols.defined.push_back(name);
    }
  }
  return symbols;
}

}  // namespace cuda_agent::detail
