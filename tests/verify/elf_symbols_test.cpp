// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <algorithm>   // any_of, find_if
#include <cstdint>     // uint64_t
#include <cstring>     // memcpy
#include <filesystem>  // exists
#include <fstream>     // ifstream
#include <iterator>    // istreambuf_iterator
#include <random>      // mt19937
#include <string>      // string

#include "cuda_agent/verify/detail/elf_symbols.hpp"

namespace elf = cuda_agent::detail::elf;

namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

/// A shared object every Linux machine with a C++ toolchain has.
std::filesystem::path system_library() {
  for (const char* candidate : {"/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
                                "/lib/aarch64-linux-gnu/libstdc++.so.6", "/usr/lib64/libstdc++.so.6"})
    if (std::filesystem::exists(candidate)) return candidate;
  return {};
}

template <class T>
void put(std::string& image, std::uint64_t offset, T value) {
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

template <class T>
T get(const std::string& image, std::uint64_t offset) {
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace

TEST_CASE("the ELF reader lists a shared object's undefined symbols, versions and needed libraries", "[verify][elf]") {
  const std::filesystem::path library = system_library();
  if (library.empty()) CUDA_AGENT_SKIP("no libstdc++.so.6 found");
  const std::string image = read_bytes(library);
  const elf::DynamicTable table = elf::read_dynamic_table(image);

  // libstdc++ needs libc and libm, and takes memcpy from libc with a version.
  CHECK(std::find(table.needed.begin(), table.needed.end(), "libc.so.6") != table.needed.end());
  CHECK(std::find(table.needed.begin(), table.needed.end(), "libm.so.6") != table.needed.end());
  const auto memcpy_symbol = std::find_if(table.undefined.begin(), table.undefined.end(),
                                          [](const elf::DynamicSymbol& s) { return s.name == "memcpy"; });
  REQUIRE(memcpy_symbol != table.undefined.end());
  CHECK(memcpy_symbol->version.rfind("GLIBC_", 0) == 0);
  CHECK(memcpy_symbol->version_library == "libc.so.6");
  CHECK(memcpy_symbol->type == elf::SymbolType::function);
  // Weak undefined references are read with their binding.
  CHECK(std::any_of(table.undefined.begin(), table.undefined.end(),
                    [](const elf::DynamicSymbol& s) { return s.binding == elf::SymbolBinding::weak; }));
  // What it defines is not among what it needs.
  CHECK(std::any_of(table.defined.begin(), table.defined.end(),
                    [](const elf::DynamicSymbol& s) { return s.name == "_ZSt9terminatev"; }));
  CHECK_FALSE(std::any_of(table.undefined.begin(), table.undefined.end(),
                          [](const elf::DynamicSymbol& s) { return s.name == "_ZSt9terminatev"; }));
}

TEST_CASE("the ELF reader refuses what is not a well-formed 64-bit shared object", "[verify][elf]") {
  CHECK_THROWS_AS(elf::read_dynamic_table(""), elf::ElfFormatError);
  CHECK_THROWS_AS(elf::read_dynamic_table("not an ELF file, but long enough to look like one at first sight......"),
                  elf::ElfFormatError);
  std::string garbage(4096, '\0');
  std::mt19937 random(7);
  for (char& byte : garbage) byte = static_cast<char>(random());
  garbage.replace(0, 4,
                  "\x7f"
                  "ELF");
  CHECK_THROWS_AS(elf::read_dynamic_table(garbage), elf::ElfFormatError);

  const std::filesystem::path library = system_library();
  if (library.empty()) CUDA_AGENT_SKIP("no libstdc++.so.6 found");
  const std::string image = read_bytes(library);
  REQUIRE_NOTHROW(elf::read_dynamic_table(image));

  SECTION("32-bit, big-endian and non-shared files") {
    std::string changed = image;
    changed[4] = 1;  // ELFCLASS32
    CHECK_THROWS_WITH(elf::read_dynamic_table(changed), Catch::Matchers::Contains("64-bit"));
    changed = image;
    changed[5] = 2;  // ELFDATA2MSB
    CHECK_THROWS_WITH(elf::read_dynamic_table(changed), Catch::Matchers::Contains("little-endian"));
    changed = image;
    put<std::uint16_t>(changed, 16, 2);  // ET_EXEC
    CHECK_THROWS_WITH(elf::read_dynamic_table(changed), Catch::Matchers::Contains("shared object"));
  }
  SECTION("truncated files: every cut is an error, never a read past the end") {
    int refused = 0;
    for (std::size_t size = 0; size < image.size(); size += 4093) {
      CHECK_THROWS_AS(elf::read_dynamic_table(std::string_view(image).substr(0, size)), elf::ElfFormatError);
      ++refused;
    }
    CHECK(refused > 10);
  }
  SECTION("tables pointing outside the file") {
    std::string changed = image;
    put<std::uint64_t>(changed, 0x20, std::uint64_t{1} << 62);  // program headers far away
    CHECK_THROWS_AS(elf::read_dynamic_table(changed), elf::ElfFormatError);
    changed = image;
    put<std::uint64_t>(changed, 0x28, image.size() - 10);  // section headers at the very end
    CHECK_THROWS_AS(elf::read_dynamic_table(changed), elf::ElfFormatError);
    changed = image;
    put<std::uint16_t>(changed, 0x38, 0);  // no program headers
    CHECK_THROWS_WITH(elf::read_dynamic_table(changed), Catch::Matchers::Contains("program headers"));
  }
  SECTION("a .dynsym section that describes another table than PT_DYNAMIC") {
    // What the loader reads (PT_DYNAMIC) and what a section-based reader would read must
    // agree, or a module could show one table and load another.
    std::string changed = image;
    const auto section_offset = get<std::uint64_t>(image, 0x28);
    const auto section_entry = get<std::uint16_t>(image, 0x3A);
    const auto section_count = get<std::uint16_t>(image, 0x3C);
    bool moved = false;
    for (std::uint64_t index = 0; index < section_count; ++index) {
      const std::uint64_t base = section_offset + index * section_entry;
      if (get<std::uint32_t>(image, base + 4) != 11) continue;  // SHT_DYNSYM
      put<std::uint64_t>(changed, base + 0x18, get<std::uint64_t>(image, base + 0x18) + 24);
      moved = true;
    }
    REQUIRE(moved);
    CHECK_THROWS_WITH(elf::read_dynamic_table(changed), Catch::Matchers::Contains("different symbol tables"));
  }
  SECTION("random corruption of the headers and tables never crashes the reader") {
    std::mt19937 flips(2024);
    int accepted = 0, refused = 0;
    for (int round = 0; round < 300; ++round) {
      std::string changed = image;
      for (int flip = 0; flip < 8; ++flip) {
        // Mostly the ELF header and program headers, sometimes anywhere.
        const std::uint64_t where = flip % 2 ? flips() % 512 : flips() % changed.size();
        changed[where] = static_cast<char>(flips());
      }
      try {
        (void)elf::read_dynamic_table(changed);
        ++accepted;
      } catch (const elf::ElfFormatError&) {
        ++refused;
      }
    }
    CHECK(accepted + refused == 300);
    CHECK(refused > 0);
  }
}
