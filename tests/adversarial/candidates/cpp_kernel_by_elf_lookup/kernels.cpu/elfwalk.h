// SPDX-License-Identifier: Apache-2.0
// Finds functions of loaded libraries by walking ELF structures in memory (red-team).
#pragma once
#include <elf.h>
#include <cstdint>
#include <cstring>

extern "C" const Elf64_Ehdr __ehdr_start __attribute__((visibility("hidden")));
extern "C" Elf64_Dyn _DYNAMIC[] __attribute__((visibility("hidden")));

namespace walk {

inline std::uintptr_t fix(std::uintptr_t value, std::uintptr_t bias) { return value < bias ? value + bias : value; }

// The resolved address behind one of this module's own relocations, by symbol-name prefix.
inline void* own_import(const char* prefix) {
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(&__ehdr_start);
  const Elf64_Sym* symbols = nullptr;
  const char* strings = nullptr;
  const Elf64_Rela* tables[2] = {nullptr, nullptr};
  std::size_t sizes[2] = {0, 0};
  for (const Elf64_Dyn* d = _DYNAMIC; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symbols = reinterpret_cast<const Elf64_Sym*>(fix(d->d_un.d_ptr, base));
    if (d->d_tag == DT_STRTAB) strings = reinterpret_cast<const char*>(fix(d->d_un.d_ptr, base));
    if (d->d_tag == DT_JMPREL) tables[0] = reinterpret_cast<const Elf64_Rela*>(fix(d->d_un.d_ptr, base));
    if (d->d_tag == DT_PLTRELSZ) sizes[0] = d->d_un.d_val;
    if (d->d_tag == DT_RELA) tables[1] = reinterpret_cast<const Elf64_Rela*>(fix(d->d_un.d_ptr, base));
    if (d->d_tag == DT_RELASZ) sizes[1] = d->d_un.d_val;
  }
  const std::size_t length = std::strlen(prefix);
  for (int t = 0; t < 2; ++t) {
    if (!tables[t]) continue;
    for (std::size_t i = 0; i < sizes[t] / sizeof(Elf64_Rela); ++i) {
      const Elf64_Rela& r = tables[t][i];
      const std::uint32_t index = ELF64_R_SYM(r.r_info);
      if (index == 0) continue;
      const char* name = strings + symbols[index].st_name;
      if (std::strncmp(name, prefix, length) == 0) return *reinterpret_cast<void**>(base + r.r_offset);
    }
  }
  return nullptr;
}

// The ELF header of the object mapped around `inside` (scanning back page by page).
inline const Elf64_Ehdr* header_of(const void* inside) {
  std::uintptr_t page = reinterpret_cast<std::uintptr_t>(inside) & ~std::uintptr_t(0xfff);
  for (;; page -= 0x1000) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(page);
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
      const Elf64_Ehdr* h = reinterpret_cast<const Elf64_Ehdr*>(p);
      if ((h->e_type == ET_DYN || h->e_type == ET_EXEC) && h->e_machine == EM_X86_64) return h;
    }
  }
}

inline std::uint32_t gnu_hash(const char* s) {
  std::uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

// Looks `name` up in the dynamic symbol table of the object whose header is `h`.
inline void* lookup(const Elf64_Ehdr* h, const char* name) {
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(h);
  const Elf64_Phdr* ph = reinterpret_cast<const Elf64_Phdr*>(start + h->e_phoff);
  std::uintptr_t lowest = ~std::uintptr_t(0), dynamic = 0;
  for (int i = 0; i < h->e_phnum; ++i) {
    if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < lowest) lowest = ph[i].p_vaddr;
    if (ph[i].p_type == PT_DYNAMIC) dynamic = ph[i].p_vaddr;
  }
  const std::uintptr_t bias = start - lowest;
  const Elf64_Sym* symbols = nullptr;
  const char* strings = nullptr;
  const std::uint32_t* table = nullptr;
  for (const Elf64_Dyn* d = reinterpret_cast<const Elf64_Dyn*>(dynamic + bias); d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symbols = reinterpret_cast<const Elf64_Sym*>(fix(d->d_un.d_ptr, bias));
    if (d->d_tag == DT_STRTAB) strings = reinterpret_cast<const char*>(fix(d->d_un.d_ptr, bias));
    if (d->d_tag == DT_GNU_HASH) table = reinterpret_cast<const std::uint32_t*>(fix(d->d_un.d_ptr, bias));
  }
  if (!symbols || !strings || !table) return nullptr;
  const std::uint32_t buckets = table[0], offset = table[1], bloom = table[2];
  const std::uint32_t* bucket = reinterpret_cast<const std::uint32_t*>(
      reinterpret_cast<const std::uint64_t*>(table + 4) + bloom);
  const std::uint32_t* chain = bucket + buckets;
  const std::uint32_t hash = gnu_hash(name);
  std::uint32_t index = bucket[hash % buckets];
  if (index < offset) return nullptr;
  for (;; ++index) {
    const std::uint32_t link = chain[index - offset];
    if (((link ^ hash) >> 1) == 0 && std::strcmp(strings + symbols[index].st_name, name) == 0)
      return reinterpret_cast<void*>(symbols[index].st_value + bias);
    if (link & 1) return nullptr;
  }
}

}  // namespace walk
