// SPDX-License-Identifier: Apache-2.0
// The GPUs an engine reserved (CUDA_VISIBLE_DEVICES) as the sandbox binds them: device
// minors read from a stand-in of the driver's /proc/driver/nvidia/gpus, where the CUDA
// index order (by PCI bus) and the minors differ.
#include "catch.hpp"

#include <cuda_agent/sandbox/visible_gpus.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

/// Three GPUs whose minors run against their bus order, and a folder the driver would not
/// write (no minor), which is skipped.
fs::path fake_driver() {
  const fs::path driver = fs::temp_directory_path() / ("cuda-agent-driver-" + std::to_string(::getpid()));
  fs::remove_all(driver);
  const auto gpu = [&](const std::string& bus, int minor, const std::string& uuid) {
    fs::create_directories(driver / bus);
    std::ofstream(driver / bus / "information")
        << "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t\t " << uuid << "\nDevice Minor: \t\t "
        << minor << "\nBus Location: \t " << bus << "\n";
  };
  gpu("0000:c1:00.0", 0, "GPU-cccc");
  gpu("0000:41:00.0", 2, "GPU-aaaa");
  gpu("0000:81:00.0", 1, "GPU-bbbb");
  fs::create_directories(driver / "0000:01:00.0");
  return driver;
}

}  // namespace

TEST_CASE("visible GPUs: indices follow the bus order, UUIDs name their GPU, and both give device minors") {
  const fs::path driver = fake_driver();
  const std::vector<ca::DriverGpu> gpus = ca::driver_gpus(driver);
  REQUIRE(gpus.size() == 3);
  CHECK(gpus[0].bus == "0000:41:00.0");
  CHECK(gpus[0].uuid == "GPU-aaaa");
  CHECK(gpus[0].minor == 2);

  CHECK(ca::visible_gpu_minors("0", gpus) == std::vector<int>{2});
  CHECK(ca::visible_gpu_minors("2,1", gpus) == std::vector<int>{0, 1});
  CHECK(ca::visible_gpu_minors("GPU-bbbb,GPU-cccc", gpus) == std::vector<int>{1, 0});

  CHECK_THROWS_WITH(ca::visible_gpu_minors("3", gpus), Catch::Contains("this machine has 3"));
  CHECK_THROWS_WITH(ca::visible_gpu_minors("GPU-dddd", gpus), Catch::Contains("UUID GPU-dddd"));
  CHECK_THROWS_WITH(ca::visible_gpu_minors("0,,1", gpus), Catch::Contains("neither a GPU index nor a GPU UUID"));
  CHECK_THROWS_WITH(ca::visible_gpu_minors("first", gpus), Catch::Contains("'first'"));
  CHECK_THROWS_AS(ca::visible_gpu_minors("", gpus), std::invalid_argument);
  fs::remove_all(driver);
}

TEST_CASE("visible GPUs: without the driver's listing, indices are taken as minors and UUIDs cannot be resolved") {
  const std::vector<ca::DriverGpu> none = ca::driver_gpus(fs::temp_directory_path() / "no-such-driver-folder");
  CHECK(none.empty());
  CHECK(ca::visible_gpu_minors("1,0", none) == std::vector<int>{1, 0});
  CHECK_THROWS_AS(ca::visible_gpu_minors("GPU-aaaa", none), std::invalid_argument);
}
