// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reads what a 64-bit little-endian ELF shared object asks of the dynamic loader: the
// symbols it leaves undefined (with their binding, type and required version), the
// symbols it defines, and the libraries it names in DT_NEEDED. The link policy judges a
// candidate's extension by this, so the reader follows what the loader follows, the
// PT_DYNAMIC segment; the section headers (which a loader ignores) only help to size the
// symbol table and must agree with it. Every offset and count comes from a file the
// candidate produced: each is bounds-checked, and whatever does not add up is an
// `ElfFormatError`, never a read outside the image.

#include <algorithm>    // min, max
#include <cstddef>      // size_t
#include <cstdint>      // uint8_t, uint16_t, uint32_t, uint64_t
#include <cstring>      // memcpy
#include <map>          // map
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

namespace cuda_agent::detail::elf {

/// The file is not a well-formed ELF64 little-endian shared object.
class ElfFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class SymbolBinding { local, global, weak, unique, other };
enum class SymbolType { none, object, function, section, file, common, tls, indirect_function, other };

/// One entry of the dynamic symbol table.
struct DynamicSymbol {
  std::string name;
  SymbolBinding binding = SymbolBinding::global;
  SymbolType type = SymbolType::none;
  /// The version the symbol is bound to ("GLIBC_2.2.5"), empty when unversioned.
  std::string version;
  /// The library that version belongs to ("libc.so.6"), for undefined symbols.
  std::string version_library;
};

struct DynamicTable {
  /// What the object needs from other libraries (st_shndx == SHN_UNDEF).
  std::vector<DynamicSymbol> undefined;
  /// What it defines and exports (global, weak or unique bindings).
  std::vector<DynamicSymbol> defined;
  /// Its DT_NEEDED entries, in order.
  std::vector<std::string> needed;
};

[[nodiscard]] inline std::string_view to_string(SymbolBinding binding) noexcept {
  switch (binding) {
    case SymbolBinding::local:
      return "local";
    case SymbolBinding::global:
      return "global";
    case SymbolBinding::weak:
      return "weak";
    case SymbolBinding::unique:
      return "unique";
    case SymbolBinding::other:
      break;
  }
  return "other";
}

[[nodiscard]] inline std::string_view to_string(SymbolType type) noexcept {
  switch (type) {
    case SymbolType::none:
      return "none";
    case SymbolType::object:
      return "object";
    case SymbolType::function:
      return "function";
    case SymbolType::section:
      return "section";
    case SymbolType::file:
      return "file";
    case SymbolType::common:
      return "common";
    case SymbolType::tls:
      return "tls";
    case SymbolType::indirect_function:
      return "indirect_function";
    case SymbolType::other:
      break;
  }
  return "other";
}

namespace layout {
// ELF64 constants and field offsets (System V gABI), named where they are used.
inline constexpr std::uint16_t type_shared_object = 3;  // ET_DYN
inline constexpr std::uint32_t segment_load = 1;        // PT_LOAD
inline constexpr std::uint32_t segment_dynamic = 2;     // PT_DYNAMIC
inline constexpr std::uint32_t section_dynsym = 11;     // SHT_DYNSYM
inline constexpr std::uint64_t program_header_size = 56;
inline constexpr std::uint64_t section_header_size = 64;
inline constexpr std::uint64_t symbol_size = 24;
inline constexpr std::uint64_t dynamic_entry_size = 16;
inline constexpr std::int64_t tag_null = 0, tag_needed = 1, tag_hash = 4, tag_strtab = 5, tag_symtab = 6,
                              tag_strsz = 10, tag_syment = 11, tag_gnu_hash = 0x6ffffef5, tag_versym = 0x6ffffff0,
                              tag_verneed = 0x6ffffffe, tag_verneednum = 0x6fffffff;
/// More symbols than any extension has; a count beyond it is a corrupt table.
inline constexpr std::uint64_t symbol_limit = 1u << 22;
inline constexpr std::uint64_t list_limit = 1u << 16;
}  // namespace layout

/// Bounds-checked little-endian reads of an image.
class Image {
 public:
  explicit Image(std::string_view bytes) noexcept : bytes_(bytes) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return bytes_.size(); }

  [[nodiscard]] bool contains(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= bytes_.size() && bytes_.size() - offset >= length;
  }

  template <class T>
  [[nodiscard]] T read(std::uint64_t offset, const char* what) const {
    if (!contains(offset, sizeof(T))) throw ElfFormatError(std::string(what) + " lies outside the file");
    T value;
    std::memcpy(&value, bytes_.data() + offset, sizeof(T));
    return value;
  }

  /// The NUL-terminated string at `offset` inside [table, table + table_size).
  [[nodiscard]] std::string string_at(std::uint64_t table, std::uint64_t table_size, std::uint64_t offset,
                                      const char* what) const {
    if (!contains(table, table_size) || offset >= table_size)
      throw ElfFormatError(std::string(what) + " points outside its string table");
    const std::string_view rest = bytes_.substr(table + offset, table_size - offset);
    const std::size_t end = rest.find('\0');
    if (end == std::string_view::npos) throw ElfFormatError(std::string(what) + " is not terminated");
    return std::string(rest.substr(0, end));
  }

 private:
  std::string_view bytes_;
};

namespace parse {

struct Segment {
  std::uint64_t offset, virtual_address, file_size;
};

/// The file offset of `address` in a loaded segment, for `length` bytes.
[[nodiscard]] inline std::uint64_t file_offset(const std::vector<Segment>& loads, const Image& image,
                                               std::uint64_t address, std::uint64_t length, const char* what) {
  for (const Segment& load : loads) {
    if (address < load.virtual_address) continue;
    const std::uint64_t delta = address - load.virtual_address;
    if (delta > load.file_size || load.file_size - delta < length) continue;
    const std::uint64_t offset = load.offset + delta;
    if (offset < load.offset || !image.contains(offset, length)) break;
    return offset;
  }
  throw ElfFormatError(std::string(what) + " is not inside a loaded segment of the file");
}

/// How many symbols DT_GNU_HASH covers: one past the highest symbol index its chains reach.
[[nodiscard]] inline std::uint64_t gnu_hash_symbol_count(const Image& image, std::uint64_t table) {
  const auto buckets = image.read<std::uint32_t>(table, "the GNU hash table");
  const auto first_symbol = image.read<std::uint32_t>(table + 4, "the GNU hash table");
  const auto bloom_words = image.read<std::uint32_t>(table + 8, "the GNU hash table");
  if (buckets > layout::symbol_limit || bloom_words > layout::symbol_limit)
    throw ElfFormatError("the GNU hash table is implausibly large");
  const std::uint64_t bucket_base = table + 16 + std::uint64_t{bloom_words} * 8;
  const std::uint64_t chain_base = bucket_base + std::uint64_t{buckets} * 4;
  std::uint64_t last = 0;
  for (std::uint64_t bucket = 0; bucket < buckets; ++bucket)
    last = std::max<std::uint64_t>(last, image.read<std::uint32_t>(bucket_base + bucket * 4, "a GNU hash bucket"));
  if (last < first_symbol) return first_symbol;
  for (std::uint64_t steps = 0;; ++steps) {
    if (steps > layout::symbol_limit) throw ElfFormatError("a GNU hash chain does not end");
    const auto hash = image.read<std::uint32_t>(chain_base + (last - first_symbol) * 4, "a GNU hash chain");
    if (hash & 1u) return last + 1;
    ++last;
  }
}

}  // namespace parse

/// Parses `bytes` (a whole file). Throws ElfFormatError when it is not a well-formed
/// ELF64 little-endian shared object with a dynamic symbol table.
[[nodiscard]] inline DynamicTable read_dynamic_table(std::string_view bytes) {
  const Image image(bytes);
  if (image.size() < 64 || bytes.substr(0, 4) != std::string_view("\x7f"
                                                                  "ELF",
                                                                  4))
    throw ElfFormatError("not an ELF file");
  if (bytes[4] != 2) throw ElfFormatError("not a 64-bit ELF file");
  if (bytes[5] != 1) throw ElfFormatError("not a little-endian ELF file");
  if (image.read<std::uint16_t>(16, "the file type") != layout::type_shared_object)
    throw ElfFormatError("not a shared object");

  // Program headers: the loaded segments (to map addresses) and PT_DYNAMIC.
  const auto program_offset = image.read<std::uint64_t>(0x20, "the program header offset");
  const auto program_entry = image.read<std::uint16_t>(0x36, "the program header size");
  const auto program_count = image.read<std::uint16_t>(0x38, "the program header count");
  if (program_count == 0) throw ElfFormatError("the file has no program headers");
  if (program_entry < layout::program_header_size) throw ElfFormatError("program headers are too small");
  std::vector<parse::Segment> loads;
  std::optional<parse::Segment> dynamic;
  for (std::uint64_t index = 0; index < program_count; ++index) {
    const std::uint64_t base = program_offset + index * program_entry;
    if (!image.contains(base, layout::program_header_size))
      throw ElfFormatError("a program header lies outside the file");
    const auto type = image.read<std::uint32_t>(base, "a program header");
    const parse::Segment segment{image.read<std::uint64_t>(base + 0x08, "a program header"),
                                 image.read<std::uint64_t>(base + 0x10, "a program header"),
                                 image.read<std::uint64_t>(base + 0x20, "a program header")};
    if (type == layout::segment_load) loads.push_back(segment);
    if (type == layout::segment_dynamic) {
      if (dynamic) throw ElfFormatError("the file has two PT_DYNAMIC segments");
      dynamic = segment;
    }
  }
  if (!dynamic) throw ElfFormatError("the file has no PT_DYNAMIC segment (it is not dynamically linked)");
  if (!image.contains(dynamic->offset, dynamic->file_size)) throw ElfFormatError("PT_DYNAMIC lies outside the file");

  // The dynamic section.
  std::map<std::int64_t, std::uint64_t> tags;
  std::vector<std::uint64_t> needed_offsets;
  for (std::uint64_t at = 0; at + layout::dynamic_entry_size <= dynamic->file_size; at += layout::dynamic_entry_size) {
    const auto tag = image.read<std::int64_t>(dynamic->offset + at, "a dynamic entry");
    const auto value = image.read<std::uint64_t>(dynamic->offset + at + 8, "a dynamic entry");
    if (tag == layout::tag_null) break;
    if (tag == layout::tag_needed) {
      if (needed_offsets.size() >= layout::list_limit) throw ElfFormatError("too many DT_NEEDED entries");
      needed_offsets.push_back(value);
    } else {
      tags.emplace(tag, value);
    }
  }
  auto tag = [&](std::int64_t which) -> std::optional<std::uint64_t> {
    const auto found = tags.find(which);
    return found == tags.end() ? std::nullopt : std::optional<std::uint64_t>(found->second);
  };
  const auto strtab = tag(layout::tag_strtab);
  const auto strsz = tag(layout::tag_strsz);
  const auto symtab = tag(layout::tag_symtab);
  if (!strtab || !strsz || !symtab) throw ElfFormatError("the dynamic section names no symbol or string table");
  if (tag(layout::tag_syment).value_or(layout::symbol_size) != layout::symbol_size)
    throw ElfFormatError("dynamic symbols are not 24 bytes each");
  const std::uint64_t strings = parse::file_offset(loads, image, *strtab, *strsz, "the dynamic string table");
  const std::uint64_t symbols =
      parse::file_offset(loads, image, *symtab, layout::symbol_size, "the dynamic symbol table");

  // How many symbols: .dynsym's size where section headers exist (they must describe the
  // same table), else the hash tables the loader looks symbols up with.
  std::optional<std::uint64_t> count;
  const auto section_offset = image.read<std::uint64_t>(0x28, "the section header offset");
  const auto section_entry = image.read<std::uint16_t>(0x3A, "the section header size");
  std::uint64_t section_count = image.read<std::uint16_t>(0x3C, "the section header count");
  if (section_offset != 0) {
    if (section_entry < layout::section_header_size) throw ElfFormatError("section headers are too small");
    if (section_count == 0)  // more than 0xff00 sections: the count is in section 0
      section_count = image.read<std::uint64_t>(section_offset + 0x20, "section header 0");
    if (section_count > layout::list_limit) throw ElfFormatError("implausibly many section headers");
    for (std::uint64_t index = 0; index < section_count; ++index) {
      const std::uint64_t base = section_offset + index * section_entry;
      if (!image.contains(base, layout::section_header_size))
        throw ElfFormatError("a section header lies outside the file");
      if (image.read<std::uint32_t>(base + 0x04, "a section header") != layout::section_dynsym) continue;
      const auto offset = image.read<std::uint64_t>(base + 0x18, "a section header");
      const auto size = image.read<std::uint64_t>(base + 0x20, "a section header");
      if (offset != symbols)
        throw ElfFormatError("the .dynsym section and the dynamic segment describe different symbol tables");
      if (!image.contains(offset, size) || size % layout::symbol_size != 0)
        throw ElfFormatError("the .dynsym section lies outside the file or is not a whole number of symbols");
      count = size / layout::symbol_size;
    }
  }
  if (const auto hash = tag(layout::tag_hash)) {
    const std::uint64_t table = parse::file_offset(loads, image, *hash, 8, "the hash table");
    const std::uint64_t chains = image.read<std::uint32_t>(table + 4, "the hash table");
    if (count && *count != chains) throw ElfFormatError("the hash table and .dynsym disagree on the number of symbols");
    count = chains;
  }
  if (!count) {
    const auto gnu_hash = tag(layout::tag_gnu_hash);
    if (!gnu_hash) throw ElfFormatError("the size of the dynamic symbol table cannot be determined");
    count = parse::gnu_hash_symbol_count(image, parse::file_offset(loads, image, *gnu_hash, 16, "the GNU hash table"));
  }
  if (*count > layout::symbol_limit || !image.contains(symbols, *count * layout::symbol_size))
    throw ElfFormatError("the dynamic symbol table lies outside the file");

  // Symbol versions: DT_VERNEED maps a version index to a name and a library.
  std::map<std::uint16_t, std::pair<std::string, std::string>> required_versions;
  if (const auto verneed = tag(layout::tag_verneed)) {
    const std::uint64_t records = tag(layout::tag_verneednum).value_or(0);
    if (records > layout::list_limit) throw ElfFormatError("implausibly many version requirements");
    std::uint64_t entry = parse::file_offset(loads, image, *verneed, 16, "the version requirements");
    for (std::uint64_t record = 0; record < records; ++record) {
      const auto auxiliary_count = image.read<std::uint16_t>(entry + 2, "a version requirement");
      const auto file = image.read<std::uint32_t>(entry + 4, "a version requirement");
      const auto auxiliary = image.read<std::uint32_t>(entry + 8, "a version requirement");
      const auto next = image.read<std::uint32_t>(entry + 12, "a version requirement");
      const std::string library = image.string_at(strings, *strsz, file, "a version requirement's library");
      std::uint64_t item = entry + auxiliary;
      for (std::uint16_t i = 0; i < auxiliary_count; ++i) {
        const auto other = image.read<std::uint16_t>(item + 6, "a required version");
        const auto name = image.read<std::uint32_t>(item + 8, "a required version");
        const auto item_next = image.read<std::uint32_t>(item + 12, "a required version");
        required_versions[other] = {image.string_at(strings, *strsz, name, "a required version's name"), library};
        if (item_next == 0) break;
        item += item_next;
      }
      if (next == 0) break;
      entry += next;
    }
  }
  std::optional<std::uint64_t> versions;
  if (const auto versym = tag(layout::tag_versym))
    versions = parse::file_offset(loads, image, *versym, *count * 2, "the symbol version table");

  DynamicTable table;
  for (const std::uint64_t offset : needed_offsets)
    table.needed.push_back(image.string_at(strings, *strsz, offset, "a DT_NEEDED entry"));
  for (std::uint64_t index = 1; index < *count; ++index) {
    const std::uint64_t entry = symbols + index * layout::symbol_size;
    const auto name_offset = image.read<std::uint32_t>(entry, "a symbol");
    const auto info = image.read<std::uint8_t>(entry + 4, "a symbol");
    const auto section_index = image.read<std::uint16_t>(entry + 6, "a symbol");
    DynamicSymbol symbol;
    symbol.name = image.string_at(strings, *strsz, name_offset, "a symbol's name");
    if (symbol.name.empty()) continue;
    switch (info >> 4) {
      case 0:
        symbol.binding = SymbolBinding::local;
        break;
      case 1:
        symbol.binding = SymbolBinding::global;
        break;
      case 2:
        symbol.binding = SymbolBinding::weak;
        break;
      case 10:
        symbol.binding = SymbolBinding::unique;
        break;
      default:
        symbol.binding = SymbolBinding::other;
        break;
    }
    switch (info & 0xf) {
      case 0:
        symbol.type = SymbolType::none;
        break;
      case 1:
        symbol.type = SymbolType::object;
        break;
      case 2:
        symbol.type = SymbolType::function;
        break;
      case 3:
        symbol.type = SymbolType::section;
        break;
      case 4:
        symbol.type = SymbolType::file;
        break;
      case 5:
        symbol.type = SymbolType::common;
        break;
      case 6:
        symbol.type = SymbolType::tls;
        break;
      case 10:
        symbol.type = SymbolType::indirect_function;
        break;
      default:
        symbol.type = SymbolType::other;
        break;
    }
    if (versions) {
      const std::uint16_t version = image.read<std::uint16_t>(*versions + index * 2, "a symbol version") & 0x7fff;
      if (const auto found = required_versions.find(version); found != required_versions.end()) {
        symbol.version = found->second.first;
        symbol.version_library = found->second.second;
      }
    }
    if (section_index == 0 /* SHN_UNDEF */)
      table.undefined.push_back(std::move(symbol));
    else if (symbol.binding != SymbolBinding::local)
      table.defined.push_back(std::move(symbol));
  }
  return table;
}

}  // namespace cuda_agent::detail::elf
