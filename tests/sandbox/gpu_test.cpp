// SPDX-License-Identifier: Apache-2.0
// The sandbox on a GPU: CUDA programs (built with nvcc at test time) run inside on the
// assigned GPU only; a hung kernel dies at the deadline and leaves the GPU clean; an
// illegal address fails only its own sandbox. Skipped where there is no NVIDIA GPU.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/cuda_probe.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ca::testing::ScratchDirectory;

namespace {

constexpr const char* kernels_source = R"CU(
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t error_ = (call);                                                               \
    if (error_ != cudaSuccess) {                                                               \
      std::printf("CUDA ERROR %s (%d) in %s\n", cudaGetErrorName(error_), (int)error_, #call); \
      std::fflush(stdout);                                                                     \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

__global__ void add(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
__global__ void spin(volatile int* flag) { while (*flag == 0) { } }
__global__ void poke(int* pointer) { *pointer = 1; }

static int vector_add() {
  const int n = 1 << 20;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) { a[i] = float(i); b[i] = 2.0f * float(i); }
  float *da, *db, *dc;
  CHECK_CUDA(cudaMalloc(&da, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&db, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dc, n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    if (c[i] != 3.0f * float(i)) { std::printf("WRONG RESULT at %d\n", i); return 1; }
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dc));
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "vecadd";
  if (!std::strcmp(mode, "vecadd")) {
    if (vector_add() != 0) return 1;
    std::printf("VECADD OK\n");
  } else if (!std::strcmp(mode, "loop")) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::atoi(argv[2]));
    int rounds = 0;
    while (std::chrono::steady_clock::now() < until) { if (vector_add() != 0) return 1; ++rounds; }
    std::printf("LOOP OK %d\n", rounds);
  } else if (!std::strcmp(mode, "spin")) {
    int* flag;
    CHECK_CUDA(cudaMalloc(&flag, sizeof(int)));
    CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
    spin<<<132, 128>>>(flag);
    CHECK_CUDA(cudaGetLastError());
    std::printf("SPIN LAUNCHED\n");
    std::fflush(stdout);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::printf("SPIN ENDED\n");
  } else if (!std::strcmp(mode, "illegal")) {
    poke<<<1, 1>>>(reinterpret_cast<int*>(0x10));
    const cudaError_t error = cudaDeviceSynchronize();
    std::printf("ILLEGAL %s\n", cudaGetErrorName(error));
    return error == cudaSuccess ? 0 : 2;
  } else if (!std::strcmp(mode, "uuid")) {
    int count = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    std::printf("COUNT %d\n", count);
    cudaDeviceProp properties;
    CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
    const unsigned char* u = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
    std::printf("UUID GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  }
  return 0;
}
)CU";

std::optional<fs::path> find_nvcc() {
  if (auto found = ca::find_program("nvcc", ca::Environment::from_current({"PATH"}))) return found;
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return fs::path("/usr/local/cuda/bin/nvcc");
  return std::nullopt;
}

/// Why this host cannot run the GPU tests, or nothing when it can.
std::optional<std::string> gpu_unavailable() {
  if (!fs::exists("/dev/nvidiactl") || ca::host_nvidia_gpus().empty()) return "no NVIDIA GPU on this machine";
  if (!find_nvcc()) return "nvcc is not installed (looked in PATH and /usr/local/cuda/bin)";
  return std::nullopt;
}

/// A PCI address without its domain, lower case: "0000:1B:00.0" and "00000000:1b:00.0"
/// both become "1b:00.0".
std::string bus_address(std::string text) {
  text = text.substr(text.find(':') + 1);
  for (char& each : text) each = static_cast<char>(std::tolower(static_cast<unsigned char>(each)));
  return text;
}

ca::ProcessResult run_nvidia_smi(std::vector<std::string> arguments) {
  ca::ProcessSpec spec;
  spec.argv = {"nvidia-smi"};
  spec.argv.insert(spec.argv.end(), arguments.begin(), arguments.end());
  spec.environment = ca::Environment::from_current({"PATH"});
  spec.timeout = 30s;
  return ca::run_process(spec);
}

/// The GPU UUID of each device minor: from the driver's /proc files, or through the PCI
/// address from nvidia-smi where those files do not list it.
std::map<int, std::string> uuids_by_minor() {
  std::map<int, std::string> uuids;
  std::map<std::string, int> minors_by_bus;
  std::error_code error;
  for (const auto& gpu : fs::directory_iterator("/proc/driver/nvidia/gpus", error)) {
    std::ifstream information(gpu.path() / "information");
    std::string line, uuid;
    int minor = -1;
    while (std::getline(information, line)) {
      const auto value = line.substr(line.find(':') + 1);
      const auto start = value.find_first_not_of(" \t");
      if (line.rfind("GPU UUID", 0) == 0 && start != std::string::npos) uuid = value.substr(start);
      if (line.rfind("Device Minor", 0) == 0) minor = std::stoi(value);
    }
    if (minor < 0) continue;
    minors_by_bus[bus_address(gpu.path().filename().string())] = minor;
    if (uuid.rfind("GPU-", 0) == 0) uuids[minor] = uuid;
  }
  if (uuids.size() < minors_by_bus.size()) {
    std::istringstream lines(
        run_nvidia_smi({"--query-gpu=pci.bus_id,uuid", "--format=csv,noheader"}).standard_output.text);
    std::string line;
    while (std::getline(lines, line)) {
      const auto comma = line.find(',');
      if (comma == std::string::npos) continue;
      const auto found = minors_by_bus.find(bus_address(line.substr(0, comma)));
      const auto uuid_start = line.find("GPU-", comma);
      if (found != minors_by_bus.end() && uuid_start != std::string::npos)
        uuids[found->second] = line.substr(uuid_start, line.find_first_of(" \r", uuid_start) - uuid_start);
    }
  }
  return uuids;
}

/// Device memory in use on all GPUs together, in MiB.
long gpu_memory_used_mib() {
  const auto result = run_nvidia_smi({"--query-gpu=memory.used", "--format=csv,noheader,nounits"});
  REQUIRE(result.succeeded());
  long total = 0;
  std::istringstream lines(result.standard_output.text);
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty()) total += std::stol(line);
  return total;
}

std::set<std::string> compute_app_pids() {
  const auto result = run_nvidia_smi({"--query-compute-apps=pid", "--format=csv,noheader"});
  REQUIRE(result.succeeded());
  std::set<std::string> pids;
  std::istringstream lines(result.standard_output.text);
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty()) pids.insert(line);
  return pids;
}

/// A workspace holding the test kernels, built for this host's GPU.
struct GpuWorkspace {
  ScratchDirectory scratch{"gpu"};
  ca::SandboxOptions options;

  GpuWorkspace() {
    options.workspace = scratch.path() / "ws";
    ca::testing::write_file(options.workspace / "kernels.cu", kernels_source);
    ca::ProcessSpec build;
    build.argv = {find_nvcc()->string(),
                  "-O2",
                  "-arch=native",
                  "-o",
                  (options.workspace / "kernels").string(),
                  (options.workspace / "kernels.cu").string()};
    build.environment = ca::Environment::from_current({"PATH", "HOME"});
    build.timeout = 180s;
    build.merge_stderr = true;
    const auto built = ca::run_process(build);
    INFO(built.standard_output.text);
    REQUIRE(built.succeeded());
    ca::hand_over_to_sandbox(options.workspace, options);
  }

  /// A sandbox with the given GPUs; the test fails (rather than skips) without bubblewrap,
  /// since a GPU host running these tests is expected to have it.
  ca::BubblewrapSandbox sandbox(std::vector<int> gpus) {
    REQUIRE(ca::testing::bubblewrap_installed());
    ca::SandboxOptions with_gpus = options;
    with_gpus.gpus = std::move(gpus);
    return ca::BubblewrapSandbox(with_gpus);
  }
};

ca::Command kernels(std::vector<std::string> arguments, std::chrono::milliseconds timeout = 60s) {
  ca::Command command;
  command.argv = {"./kernels"};
  command.argv.insert(command.argv.end(), arguments.begin(), arguments.end());
  command.timeout = timeout;
  return command;
}

std::string probe_python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

}  // namespace

TEST_CASE("a CUDA program runs inside the sandbox on its assigned GPU", "[sandbox][gpu]") {
  if (const auto reason = gpu_unavailable()) CUDA_AGENT_SKIP(*reason);
  GpuWorkspace workspace;
  const int gpu = ca::host_nvidia_gpus().front();
  ca::BubblewrapSandbox sandbox = workspace.sandbox({gpu});

  const ca::CudaProbe probe = ca::probe_cuda(sandbox, probe_python());
  INFO(probe.reason);
  REQUIRE(probe.usable);
  REQUIRE(probe.devices.size() == 1);
  const auto uuids = uuids_by_minor();
  if (uuids.count(gpu)) CHECK(probe.devices[0].uuid == uuids.at(gpu));

  const auto added = sandbox.run(kernels({"vecadd"}));
  INFO(added.standard_output.text);
  CHECK(added.succeeded());
  CHECK(added.standard_output.text == "VECADD OK\n");

  // GPU sandboxes never get an address-space or data rlimit; memory is either a cgroup
  // limit or reported as not enforced.
  const ca::LimitStatus* memory = ca::testing::find_status(added, ca::LimitKind::memory);
  REQUIRE(memory != nullptr);
  CHECK(memory->enforced == (memory->mechanism.find("cgroup") != std::string::npos));
}

TEST_CASE("a hung kernel is killed at the deadline and the GPU is clean right after", "[sandbox][gpu]") {
  if (const auto reason = gpu_unavailable()) CUDA_AGENT_SKIP(*reason);
  GpuWorkspace workspace;
  ca::BubblewrapSandbox sandbox = workspace.sandbox({ca::host_nvidia_gpus().front()});
  const std::set<std::string> before = compute_app_pids();
  const long memory_before = gpu_memory_used_mib();

  const auto started = std::chrono::steady_clock::now();
  const auto hung = sandbox.run(kernels({"spin"}, 4s));
  const auto took = std::chrono::steady_clock::now() - started;
  INFO(hung.standard_output.text);
  CHECK(hung.timed_out);
  CHECK(hung.hit(ca::LimitKind::wall_time));
  CHECK_THAT(hung.standard_output.text, Catch::Matchers::Contains("SPIN LAUNCHED"));
  CHECK(hung.standard_output.text.find("SPIN ENDED") == std::string::npos);
  CHECK(took < 20s);

  // The next kernel runs at once ...
  const auto next = sandbox.run(kernels({"vecadd"}));
  INFO(next.standard_output.text);
  CHECK(next.succeeded());

  // ... and the killed process's context is gone: no new compute process, no device
  // memory left behind. run() returns once the PID namespace is gone; the driver may
  // finish releasing the context a moment later, so this waits up to 5 s.
  const auto leftovers = [&] {
    std::vector<std::string> found;
    for (const std::string& pid : compute_app_pids())
      if (before.count(pid) == 0) found.push_back(pid);
    return found;
  };
  const auto settle_until = std::chrono::steady_clock::now() + 5s;
  while ((!leftovers().empty() || gpu_memory_used_mib() > memory_before + 64) &&
         std::chrono::steady_clock::now() < settle_until)
    std::this_thread::sleep_for(100ms);
  CHECK(leftovers().empty());
  const long memory_after = gpu_memory_used_mib();
  INFO("device memory in use: " << memory_before << " MiB before, " << memory_after << " MiB after");
  CHECK(memory_after <= memory_before + 64);
}

TEST_CASE("an illegal memory access fails only its own sandbox", "[sandbox][gpu]") {
  if (const auto reason = gpu_unavailable()) CUDA_AGENT_SKIP(*reason);
  GpuWorkspace workspace;
  ca::BubblewrapSandbox sandbox = workspace.sandbox({ca::host_nvidia_gpus().front()});

  ca::CommandResult healthy;
  ca::CommandResult faulty;
  std::thread neighbour([&] { healthy = sandbox.run(kernels({"loop", "3000"})); });
  std::this_thread::sleep_for(500ms);
  faulty = sandbox.run(kernels({"illegal"}));
  neighbour.join();

  INFO(faulty.standard_output.text);
  INFO(healthy.standard_output.text);
  CHECK(faulty.exit_code == 2);
  CHECK_THAT(faulty.standard_output.text, Catch::Matchers::Contains("ILLEGAL cudaErrorIllegalAddress"));
  CHECK(healthy.succeeded());
  CHECK_THAT(healthy.standard_output.text, Catch::Matchers::Contains("LOOP OK"));
  CHECK(sandbox.run(kernels({"vecadd"})).succeeded());
}

TEST_CASE("a sandbox bound to the second GPU sees exactly that one device", "[sandbox][gpu]") {
  if (const auto reason = gpu_unavailable()) CUDA_AGENT_SKIP(*reason);
  const std::vector<int> gpus = ca::host_nvidia_gpus();
  if (gpus.size() < 2) CUDA_AGENT_SKIP("needs two GPUs (for example the nvidia-h200-x2 machine)");
  GpuWorkspace workspace;
  ca::BubblewrapSandbox sandbox = workspace.sandbox({gpus[1]});

  const ca::CudaProbe probe = ca::probe_cuda(sandbox, probe_python());
  INFO(probe.reason);
  REQUIRE(probe.usable);
  CHECK(probe.devices.size() == 1);
  const auto uuids = uuids_by_minor();
  REQUIRE(uuids.count(gpus[1]) == 1);
  CHECK(probe.devices[0].uuid == uuids.at(gpus[1]));

  const auto seen = sandbox.run(kernels({"uuid"}));
  INFO(seen.standard_output.text);
  CHECK_THAT(seen.standard_output.text, Catch::Matchers::Contains("COUNT 1\n"));
  CHECK_THAT(seen.standard_output.text, Catch::Matchers::Contains("UUID " + uuids.at(gpus[1])));

  ca::Command nodes;
  nodes.argv = {"/bin/sh", "-c", "ls /dev"};
  const std::string listing = sandbox.run(nodes).standard_output.text;
  CHECK_THAT(listing, Catch::Matchers::Contains("nvidia" + std::to_string(gpus[1]) + "\n"));
  CHECK(listing.find("nvidia" + std::to_string(gpus[0]) + "\n") == std::string::npos);
}

TEST_CASE("on a GPU host, a sandbox without GPUs says why CUDA does not start", "[sandbox][gpu]") {
  if (const auto reason = gpu_unavailable()) CUDA_AGENT_SKIP(*reason);
  GpuWorkspace workspace;
  ca::BubblewrapSandbox sandbox = workspace.sandbox({});
  const ca::CudaProbe probe = ca::probe_cuda(sandbox, probe_python());
  CHECK_FALSE(probe.usable);
  CHECK(probe.error_code == 100);
  CHECK_THAT(probe.reason, Catch::Matchers::Contains("no /dev/nvidiaN is bound"));
  CHECK_FALSE(sandbox.run(kernels({"vecadd"})).succeeded());
}
