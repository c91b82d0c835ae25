// SPDX-License-Identifier: Apache-2.0
#pragma once

// The CUDA probe: a short Python program, run inside a sandbox, that loads the driver
// library through ctypes and goes as far as creating a context on each visible device.
// It needs only Python's standard library and the driver, no toolkit, no torch. It prints
// one JSON line saying how far it got; cuda_probe.hpp turns that into a reason.

#include <string>       // string
#include <string_view>  // string_view

namespace cuda_agent::detail {

inline constexpr std::string_view cuda_probe_script = R"PY(
import ctypes, json, sys

def report(**fields):
    print(json.dumps(fields))
    sys.stdout.flush()
    sys.exit(0)

try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    report(stage="load", message=str(error))

def error_name(code):
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(code, ctypes.byref(name))
    return name.value.decode() if name.value else ""

def check(stage, code):
    if code != 0:
        report(stage=stage, code=code, name=error_name(code))

driver = ctypes.c_int()
cuda.cuDriverGetVersion(ctypes.byref(driver))
check("cuInit", cuda.cuInit(0))
count = ctypes.c_int()
check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)))
release = getattr(cuda, "cuDevicePrimaryCtxRelease_v2", None) or cuda.cuDevicePrimaryCtxRelease
devices = []
for ordinal in range(count.value):
    device = ctypes.c_int()
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), ordinal))
    name = ctypes.create_string_buffer(256)
    check("cuDeviceGetName", cuda.cuDeviceGetName(name, 256, device))
    uuid = ctypes.create_string_buffer(16)
    check("cuDeviceGetUuid", cuda.cuDeviceGetUuid(uuid, device))
    context = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
    release(device)
    hexadecimal = uuid.raw.hex()
    devices.append({"name": name.value.decode(), "uuid": "GPU-%s-%s-%s-%s-%s" % (
        hexadecimal[0:8], hexadecimal[8:12], hexadecimal[12:16], hexadecimal[16:20], hexadecimal[20:32])})
report(stage="ok", driver=driver.value, devices=devices)
)PY";

/// What a CUDA driver error means for a process in a sandbox, and what to check.
inline std::string explain_cuda_error(int code) {
  switch (code) {
    case 100:
      return "CUDA sees no device: no /dev/nvidiaN is bound into the sandbox (SandboxOptions::gpus is empty), or "
             "the nodes were bound without device access";
    case 304:
      return "an operating-system call failed while CUDA started: usually /dev/nvidia-uvm is missing (or, with "
             "driver 570, /dev/nvidia-uvm-tools), or /sys is hidden from the sandbox";
    case 2:
      return "out of memory while CUDA started: an address-space limit (RLIMIT_AS) is probably set; CUDA reserves "
             "tens of GB of virtual memory";
    case 3:
      return "the driver is not initialised";
    case 34:
      return "the CUDA stub library was loaded instead of the driver's libcuda.so.1 (a toolkit 'stubs' directory "
             "is on the library path)";
    case 35:
      return "the installed NVIDIA driver is older than this CUDA library needs";
    case 46:
      return "the GPU is unavailable: it is in exclusive-process compute mode and another process holds it";
    case 101:
      return "invalid device ordinal";
    case 999:
      return "unknown error: the driver may be in a bad state (check dmesg for Xid errors)";
    default:
      return "CUDA driver error " + std::to_string(code);
  }
}

}  // namespace cuda_agent::detail
