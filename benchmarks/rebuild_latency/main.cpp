// SPDX-License-Identifier: Apache-2.0
//
// Rebuild latency of the compile driver, the number that decides how fast an agent can
// iterate: time to a loadable module after a one-line change to one kernel file and
// after a change to the binding file, with warm caches, against the naive flow (a full
// torch.utils.cpp_extension.load rebuild in a fresh Python, as CUDA-Agent's scripts do).
//
//   cuda_agent_benchmark_rebuild_latency [--device cuda|cpu] [--repetitions N]
//       [--cache DIR] [--work DIR] [--python PATH] [--json FILE] [--skip-naive]
//
// Device defaults to cuda when nvidia-smi sees a GPU, else cpu. Compilers run directly
// (an unconfined sandbox): this measures the driver and the compilers, not bubblewrap.

#include <cuda_agent/compile/compile_driver.hpp>

#include <algorithm>   // sort, min, max
#include <chrono>      // steady_clock
#include <cstdio>      // printf
#include <filesystem>  // path
#include <fstream>     // ofstream
#include <iostream>    // cout, cerr
#include <random>      // random_device
#include <string>      // string
#include <thread>      // hardware_concurrency
#include <vector>      // vector

namespace ca = cuda_agent;

namespace {

/// Runs each command directly, without confinement (the benchmark's sources are its own).
struct UnconfinedSandbox {
  ca::CommandResult run(const ca::Command& command) {
    ca::ProcessSpec spec;
    spec.argv = command.argv;
    spec.environment = command.environment;
    spec.working_directory = command.working_directory;
    spec.timeout = command.timeout;
    spec.output_limit = command.output_limit;
    spec.merge_stderr = command.merge_stderr;
    spec.cancellation = command.cancellation;
    ca::CommandResult result;
    static_cast<ca::ProcessResult&>(result) = ca::run_process(spec);
    result.sandbox = "unconfined";
    return result;
  }
};

struct Sample {
  double seconds = 0;
  std::size_t compiled = 0;
  std::size_t reused = 0;
};

struct Row {
  std::string step;
  std::vector<Sample> samples;
  std::string note;
};

std::string token() {
  std::random_device entropy;
  return std::to_string(entropy() % 1000000);
}

void write(const std::filesystem::path& root, const std::string& relative, const std::string& content) {
  std::filesystem::create_directories((root / relative).parent_path());
  std::ofstream(root / relative, std::ios::trunc) << content;
}

// The benchmark candidate: a fused scale+ReLU kernel, its launcher header, a binding.
std::string kernel_source(bool cuda, const std::string& slope) {
  if (cuda)
    return "#include \"kernel.h\"\n"
           "__global__ void leaky_kernel(const float* __restrict__ in, float* __restrict__ out, std::int64_t n) {\n"
           "  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
           "  if (i < n) out[i] = in[i] > 0.f ? in[i] : in[i] * " +
           slope +
           "f;\n"
           "}\n"
           "void launch_leaky(const float* in, float* out, std::int64_t n, cudaStream_t stream) {\n"
           "  leaky_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(in, out, n);\n"
           "}\n";
  return "#include \"kernel.h\"\n"
         "void launch_leaky(const float* in, float* out, std::int64_t n) {\n"
         "  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : in[i] * " +
         slope +
         "f;\n"
         "}\n";
}

std::string kernel_header(bool cuda) {
  if (cuda)
    return "#pragma once\n#include <cstdint>\n#include <cuda_runtime_api.h>\n"
           "void launch_leaky(const float* in, float* out, std::int64_t n, cudaStream_t stream);\n";
  return "#pragma once\n#include <cstdint>\nvoid launch_leaky(const float* in, float* out, std::int64_t n);\n";
}

// `torch_header`: <torch/python.h> as the starter binding and the SKILL have it, or
// <torch/extension.h>, which gets the heavier precompiled header of torch's C++ frontend.
std::string binding_source(bool cuda, const std::string& doc, const std::string& torch_header = "torch/python.h") {
  std::string text = "#include <" + torch_header + ">\n";
  if (cuda) text += "#include <ATen/cuda/CUDAContext.h>\n";
  text +=
      "#include \"kernel.h\"\n"
      "torch::Tensor leaky(const torch::Tensor& input) {\n"
      "  TORCH_CHECK(input.is_contiguous() && input.scalar_type() == torch::kFloat32, \"contiguous float32 "
      "expected\");\n"
      "  torch::Tensor output = torch::empty_like(input);\n";
  text += cuda ? "  launch_leaky(input.data_ptr<float>(), output.data_ptr<float>(), input.numel(), "
                 "at::cuda::getCurrentCUDAStream());\n"
               : "  launch_leaky(input.data_ptr<float>(), output.data_ptr<float>(), input.numel());\n";
  text +=
      "  return output;\n}\n"
      "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"leaky\", &leaky, \"" +
      doc + "\"); }\n";
  return text;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0 : (n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2);
}

bool gpu_present() {
  const auto smi = ca::find_program("nvidia-smi", ca::Environment::inherit_all());
  if (!smi) return false;
  ca::ProcessSpec spec;
  spec.argv = {smi->string(), "-L"};
  spec.environment = ca::Environment::inherit_all();
  spec.timeout = std::chrono::seconds(30);
  const auto result = ca::run_process(spec);
  return result.succeeded() && result.standard_output.text.find("GPU") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device;
  int repetitions = 5;
  std::filesystem::path cache;
  std::filesystem::path work = std::filesystem::temp_directory_path() / ("cuda-agent-rebuild-" + token());
  std::filesystem::path python = CUDA_AGENT_PYTHON;
  std::filesystem::path json_path;
  bool naive = true;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << argument << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (argument == "--device")
      device = value();
    else if (argument == "--repetitions")
      repetitions = std::max(1, std::stoi(value()));
    else if (argument == "--cache")
      cache = value();
    else if (argument == "--work")
      work = value();
    else if (argument == "--python")
      python = value();
    else if (argument == "--json")
      json_path = value();
    else if (argument == "--skip-naive")
      naive = false;
    else {
      std::cerr << "usage: " << argv[0]
                << " [--device cuda|cpu] [--repetitions N] [--cache DIR] [--work DIR] [--python PATH] [--json FILE]"
                   " [--skip-naive]\n";
      return 2;
    }
  }
  if (device.empty()) device = gpu_present() ? "cuda" : "cpu";
  if (device != "cpu" && device != "cuda") {
    std::cerr << "--device is cuda or cpu, not '" << device << "'\n";
    return 2;
  }
  if (device == "cuda" && !gpu_present()) {
    std::cout << "rebuild latency on cuda: skipped, no NVIDIA GPU here (nvidia-smi -L lists none);"
                 " run with --device cpu to measure the host compiler path\n";
    return 0;
  }
  const bool cuda = device == "cuda";

  ca::CompileOptions options;
  options.device = device;
  options.python = python;
  if (!cache.empty()) options.cache_directory = cache;
  options.progress = [](std::string_view line) { std::cerr << "  .. " << line << "\n"; };
  ca::CompileDriver driver(UnconfinedSandbox{}, options);

  std::vector<Row> rows;
  auto clock = [] { return std::chrono::steady_clock::now(); };
  auto seconds = [](auto start, auto end) { return std::chrono::duration<double>(end - start).count(); };

  std::cerr << "toolchain and precompiled header...\n";
  auto started = clock();
  const ca::Toolchain& tools = driver.toolchain();
  const double probe_seconds = seconds(started, clock());
  started = clock();
  driver.prepare(/*with_frontend=*/true);
  rows.push_back({"precompiled headers ready (once per toolchain)", {{seconds(started, clock()), 0, 0}}, ""});

  const std::filesystem::path candidate = work / "candidate";
  const std::filesystem::path build = work / "build";
  const std::string kernel_file = cuda ? "kernels/kernel.cu" : "kernels/kernel.cpp";
  const std::string unique = token();
  write(candidate, "kernels/kernel.h", kernel_header(cuda));
  write(candidate, kernel_file, kernel_source(cuda, "0.0" + unique));
  write(candidate, "kernels/binding.cpp", binding_source(cuda, "leaky relu " + unique));

  auto timed_build = [&](Row& row) {
    const auto start = clock();
    const ca::CompileResult result = driver.build(candidate, build);
    const double elapsed = seconds(start, clock());
    if (!result.succeeded) {
      std::cerr << "build failed:\n" << result.log << "\n";
      std::exit(1);
    }
    row.samples.push_back({elapsed, result.objects_compiled, result.objects_reused});
    return result;
  };

  std::cerr << "first build...\n";
  Row first{"first build (new sources, warm toolchain)", {}, ""};
  timed_build(first);
  rows.push_back(first);

  Row noop{"rebuild, nothing changed", {}, ""};
  for (int r = 0; r < repetitions; ++r) timed_build(noop);
  rows.push_back(noop);

  Row kernel{"one-line change to " + kernel_file, {}, ""};
  Row binding{"change to kernels/binding.cpp (<torch/python.h>)", {}, ""};
  Row frontend_binding{"change to a binding with <torch/extension.h>", {}, ""};
  Row revert{"change reverted (object cache hit)", {}, ""};
  for (int r = 0; r < repetitions; ++r) {
    std::cerr << "repetition " << r + 1 << "/" << repetitions << "...\n";
    write(candidate, kernel_file, kernel_source(cuda, "0.0" + token()));
    timed_build(kernel);
    write(candidate, "kernels/binding.cpp", binding_source(cuda, "leaky relu " + token()));
    timed_build(binding);
    write(candidate, "kernels/binding.cpp", binding_source(cuda, "leaky relu " + token(), "torch/extension.h"));
    timed_build(frontend_binding);
    write(candidate, kernel_file, kernel_source(cuda, "0.0" + unique));
    write(candidate, "kernels/binding.cpp", binding_source(cuda, "leaky relu " + unique));
    timed_build(revert);
  }
  rows.push_back(kernel);
  rows.push_back(binding);
  rows.push_back(frontend_binding);
  rows.push_back(revert);

  // The module works: import it and run it once.
  {
    ca::ProcessSpec spec;
    const std::string tensor = cuda ? "torch.tensor([-2.0, 3.0], device='cuda')" : "torch.tensor([-2.0, 3.0])";
    spec.argv = {python.string(), "-c",
                 "import sys; sys.path.insert(0, '" + build.string() +
                     "')\nimport torch, cuda_extension\n"
                     "print(cuda_extension.leaky(" +
                     tensor + ").cpu().tolist())"};
    spec.environment = ca::Environment::inherit_all();
    spec.merge_stderr = true;
    spec.timeout = std::chrono::minutes(5);
    const auto checked = ca::run_process(spec);
    std::cerr << "module check: " << checked.standard_output.text;
    if (!checked.succeeded()) return 1;
  }

  double naive_import = 0;
  if (naive) {
    std::cerr << "naive torch.utils.cpp_extension.load (full rebuild in a fresh Python)...\n";
    Row row{"naive: torch.utils.cpp_extension.load, fresh Python", {}, ""};
    std::vector<double> imports;
    for (int r = 0; r < std::min(repetitions, 2); ++r) {
      const std::filesystem::path naive_build = work / ("naive-" + std::to_string(r));
      std::filesystem::create_directories(naive_build);
      write(candidate, "kernels/binding.cpp", binding_source(cuda, "leaky relu " + token()));
      std::string sources =
          "['" + (candidate / "kernels/binding.cpp").string() + "', '" + (candidate / kernel_file).string() + "']";
      ca::ProcessSpec spec;
      spec.argv = {python.string(), "-c",
                   "import json, time\nstart = time.time()\nimport torch\nfrom torch.utils.cpp_extension import load\n"
                   "imported = time.time()\n"
                   "load(name='cuda_extension', sources=" +
                       sources + ", build_directory='" + naive_build.string() +
                       "', verbose=False)\n"
                       "print(json.dumps({'import_s': imported - start, 'load_s': time.time() - imported}))\n"};
      spec.environment = ca::Environment::inherit_all();
      spec.timeout = std::chrono::minutes(20);
      const auto start = clock();
      const auto ran = ca::run_process(spec);
      const double elapsed = seconds(start, clock());
      if (!ran.succeeded()) {
        std::cerr << "naive build failed (" << ca::describe_exit(ran) << "):\n"
                  << ran.standard_output.text << ran.standard_error.text << "\n";
        break;
      }
      const auto line = ran.standard_output.text.substr(ran.standard_output.text.rfind('{'));
      imports.push_back(nlohmann::json::parse(line).value("import_s", 0.0));
      row.samples.push_back({elapsed, 2, 0});
    }
    naive_import = median(imports);
    if (!row.samples.empty()) {
      row.note = "import torch " + std::to_string(naive_import).substr(0, 4) + " s of it";
      rows.push_back(row);
    }
  }

  // The table.
  std::printf("\nrebuild latency: device %s%s, torch %s, %s, %u hardware threads\n", device.c_str(),
              cuda ? (" (" + tools.gpu_architecture + ")").c_str() : "", tools.torch_version.c_str(),
              tools.cxx_identity.substr(0, tools.cxx_identity.find('\n')).c_str(), std::thread::hardware_concurrency());
  std::printf("toolchain probe %.2f s (cached on disk after the first run); %d repetitions; compilers unconfined\n\n",
              probe_seconds, repetitions);
  std::printf("| %-52s | %8s | %8s | %8s | %-17s |\n", "step", "median s", "min s", "max s", "compiled / reused");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(54, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(19, '-').c_str());
  nlohmann::json report = {{"device", device},
                           {"gpu_architecture", tools.gpu_architecture},
                           {"torch_version", tools.torch_version},
                           {"cxx", tools.cxx_identity.substr(0, tools.cxx_identity.find('\n'))},
                           {"hardware_threads", std::thread::hardware_concurrency()},
                           {"repetitions", repetitions},
                           {"rows", nlohmann::json::array()}};
  for (const Row& row : rows) {
    std::vector<double> values;
    for (const Sample& sample : row.samples) values.push_back(sample.seconds);
    const double low = *std::min_element(values.begin(), values.end());
    const double high = *std::max_element(values.begin(), values.end());
    const std::string counts =
        std::to_string(row.samples.back().compiled) + " / " + std::to_string(row.samples.back().reused);
    std::printf("| %-52s | %8.2f | %8.2f | %8.2f | %-17s |%s\n", row.step.c_str(), median(values), low, high,
                counts.c_str(), row.note.empty() ? "" : (" " + row.note).c_str());
    report["rows"].push_back({{"step", row.step},
                              {"median_s", median(values)},
                              {"min_s", low},
                              {"max_s", high},
                              {"samples", values},
                              {"note", row.note}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  std::error_code ignored;
  std::filesystem::remove_all(work, ignored);
  return 0;
}
