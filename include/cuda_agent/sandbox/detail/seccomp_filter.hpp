// SPDX-License-Identifier: Apache-2.0
#pragma once

// A small seccomp filter (classic BPF, as bubblewrap's --add-seccomp-fd expects) that
// refuses, with EPERM, syscalls no compiler, Python or CUDA program needs and that have a
// long record of kernel exploits or reach state shared with the host: io_uring, bpf,
// userfaultfd, the kernel keyrings (not namespaced), the kernel log, module and kexec
// loading, handle-based opens. Foreign system-call ABIs (32-bit x86, x32) are killed,
// since the numbers below only hold for the native one. Everything else is decided by
// the namespaces, the dropped capabilities and the unprivileged uid.

#include <cerrno>   // EPERM
#include <cstddef>  // offsetof
#include <cstdint>  // uint32_t
#include <string>   // string
#include <vector>   // vector

#include <linux/audit.h>    // AUDIT_ARCH_*
#include <linux/filter.h>   // sock_filter, BPF_*
#include <linux/seccomp.h>  // seccomp_data, SECCOMP_RET_*
#include <sys/syscall.h>    // SYS_*

namespace cuda_agent::detail {

#if defined(__x86_64__)
inline constexpr std::uint32_t seccomp_native_arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr std::uint32_t seccomp_native_arch = AUDIT_ARCH_AARCH64;
#else
inline constexpr std::uint32_t seccomp_native_arch = 0;  // no filter: numbers unknown here
#endif

/// The refused syscalls of this architecture.
inline std::vector<long> seccomp_denied_syscalls() {
  return {
#ifdef SYS_io_uring_setup
      SYS_io_uring_setup,
      SYS_io_uring_enter,
      SYS_io_uring_register,
#endif
#ifdef SYS_bpf
      SYS_bpf,
#endif
#ifdef SYS_userfaultfd
      SYS_userfaultfd,
#endif
      SYS_keyctl,
      SYS_add_key,
      SYS_request_key,
      SYS_syslog,
#ifdef SYS_kexec_load
      SYS_kexec_load,
#endif
#ifdef SYS_kexec_file_load
      SYS_kexec_file_load,
#endif
      SYS_init_module,
      SYS_finit_module,
      SYS_delete_module,
      SYS_open_by_handle_at,
      SYS_acct,
#ifdef SYS_fanotify_init
      SYS_fanotify_init,
#endif
  };
}

/// The filter program, or an empty one where this architecture is not supported.
inline std::vector<sock_filter> seccomp_filter_program() {
  std::vector<sock_filter> program;
  if (seccomp_native_arch == 0) return program;
  auto statement = [&](std::uint16_t code, std::uint32_t value) { program.push_back(BPF_STMT(code, value)); };
  auto jump = [&](std::uint16_t code, std::uint32_t value, std::uint8_t if_true, std::uint8_t if_false) {
    program.push_back(BPF_JUMP(code, value, if_true, if_false));
  };
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, seccomp_native_arch, 1, 0);
  statement(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  // x32 calls carry the native arch with bit 30 set in the number.
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  statement(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
  for (const long number : seccomp_denied_syscalls()) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(number), 0, 1);
    statement(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
  }
  statement(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return program;
}

/// The program as the bytes bubblewrap reads from its seccomp descriptor.
inline std::string seccomp_filter_bytes() {
  const std::vector<sock_filter> program = seccomp_filter_program();
  return {reinterpret_cast<const char*>(program.data()), program.size() * sizeof(sock_filter)};
}

}  // namespace cuda_agent::detail
