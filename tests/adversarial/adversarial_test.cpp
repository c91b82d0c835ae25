// SPDX-License-Identifier: Apache-2.0
#include "adversarial/adversarial_suite.hpp"

namespace ca = cuda_agent;

TEST_CASE("adversarial suite on the CPU: every exploit is rejected with the right reason", "[python][adversarial]") {
  ca::testing::run_suite("cpu", false, std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-reject.json");
}

TEST_CASE("adversarial suite on the CPU: legitimate tricky candidates are accepted", "[python][adversarial]") {
  ca::testing::run_suite("cpu", true, std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-accept.json");
}

TEST_CASE("adversarial suite on the GPU: every exploit is rejected with the right reason", "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", false, std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-reject.json");
}

TEST_CASE("adversarial suite on the GPU: legitimate tricky candidates are accepted", "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", true, std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-accept.json");
}

TEST_CASE("the suite's tasks reject null models (task audit)", "[python][adversarial]") {
  ca::HarnessVerifier verifier{ca::testing::harness_options("cpu")};
  for (const auto& entry : std::filesystem::directory_iterator(ca::testing::adversarial_directory() / "tasks" / "cpu")) {
    const ca::Task task = ca::testing::task_from_file(entry.path());
    const nlohmann::json audit = verifier.audit(task);
    INFO(entry.path().filename() << ": " << audit.dump(2));
    CHECK(audit["degenerate"] == false);
  }
}

TEST_CASE("the manifest covers at least 25 exploits of the catalog and 10 legitimate candidates on each device",
          "[adversarial]") {
  const nlohmann::json manifest = ca::testing::load_manifest();
  for (const std::string device : {"cpu", "cuda"}) {
    int rejected = 0;
    int accepted = 0;
    for (const nlohmann::json& entry : manifest["candidates"]) {
      if (!entry.contains(device)) continue;
      const bool correct = entry[device]["expect"] == "correct";
      (correct ? accepted : rejected) += 1;
      CHECK(std::filesystem::exists(ca::testing::adversarial_directory() / "candidates" / entry["name"].get<std::string>() /
                                    "model_new.py"));
      if (!correct) {
        for (const std::string reason : entry[device]["expect"])
          CHECK(ca::parse_rejection_reason(reason).has_value());
      }
    }
    INFO(device);
    CHECK(rejected >= 25);
    CHECK(accepted >= 10);
  }
}
