// SPDX-License-Identifier: Apache-2.0
// What the file tools cost per call, and how fast the built-in Grep searches compared
// with ripgrep and GNU grep where they are installed.
//
//   cuda_agent_benchmark_agent_tools [files=400] [runs=5]
//
// Builds a synthetic tree of CUDA/C++-like sources (about 100 KB per file) in a
// temporary directory, then prints, for each measurement, the median over the runs of the
// processor time (user + system, of this process or of the external program), which a
// shared machine disturbs less than the wall time.
#include <cuda_agent/process.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace ca = cuda_agent;

namespace {

double cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

/// The median over `runs` of what `work` returns (seconds).
double median_of(int runs, const std::function<double()>& work) {
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) seconds.push_back(work());
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

/// The median processor time of `work`, run in this process.
double median_cpu_seconds(int runs, const std::function<void()>& work) {
  return median_of(runs, [&] {
    const double start = cpu_seconds();
    work();
    return cpu_seconds() - start;
  });
}

/// Deterministic source-like text: kernels, host code, comments, identifiers with digits.
std::string synthetic_source(std::mt19937& random, std::size_t bytes) {
  static const char* const lines[] = {
      "__global__ void kernel_%(const float* __restrict__ in, float* out, int n) {",
      "  const int index = blockIdx.x * blockDim.x + threadIdx.x;",
      "  if (index < n) out[index] = in[index] * scale_% + bias_%;",
      "}",
      "// Launch configuration tuned for Value% elements per thread",
      "static void launch_%(cudaStream_t stream, const Tensor& input, Tensor& output) {",
      "  dim3 grid((n + 255) / 256), block(256);",
      "  kernel_%<<<grid, block, 0, stream>>>(input.data(), output.data(), n);",
      "  CUDA_CHECK(cudaGetLastError());",
      "#include <cuda_runtime.h>",
      "    for (int k = 0; k < K; ++k) accumulator += a[row * K + k] * b[k * N + column];",
      "  return torch::empty_like(input);",
  };
  std::string text;
  while (text.size() < bytes) {
    std::string line = lines[random() % std::size(lines)];
    for (std::size_t at = line.find('%'); at != std::string::npos; at = line.find('%'))
      line.replace(at, 1, std::to_string(random() % 1000));
    text += line + "\n";
  }
  text += "  cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);  // rare\n";
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const int file_count = argc > 1 ? std::atoi(argv[1]) : 400;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  std::string base_template = (std::filesystem::temp_directory_path() / "cuda-agent-tools-bench-XXXXXX").string();
  if (::mkdtemp(base_template.data()) == nullptr) return 1;
  const std::filesystem::path base = base_template;
  const std::filesystem::path workspace = base / "ws";

  std::mt19937 random(12345);
  std::uint64_t total_bytes = 0;
  for (int i = 0; i < file_count; ++i) {
    const std::filesystem::path file =
        workspace / ("dir" + std::to_string(i % 20)) / ("file" + std::to_string(i) + (i % 2 ? ".cu" : ".cpp"));
    std::filesystem::create_directories(file.parent_path());
    const std::string text = synthetic_source(random, 100 * 1024);
    std::ofstream(file) << text;
    total_bytes += text.size();
  }
  std::string long_file;
  for (int i = 1; i <= 2000; ++i) long_file += "line " + std::to_string(i) + " of a two-thousand-line file\n";
  std::ofstream(workspace / "long.py") << long_file;

  const double megabytes = static_cast<double>(total_bytes) / (1024.0 * 1024.0);
  std::cout << std::fixed << std::setprecision(1) << "corpus: " << file_count << " files, " << megabytes << " MB\n";

  ca::GrepOptions grep_options;
  grep_options.max_entries = 1'000'000;
  ca::GrepTool grep(grep_options);
  ca::ToolContext context(workspace);
  const ca::Environment path = ca::Environment::from_current({"PATH"});
  const auto rg = ca::find_program("rg", path);
  const auto gnu_grep = ca::find_program("grep", path);

  struct Search {
    const char* label;
    const char* pattern;
    bool ignore_case;
    const char* grep_flags;  // for GNU grep
  };
  const Search searches[] = {
      {"rare literal", "cudaMemcpyAsync", false, "-rcF"},
      {"regex with a literal", "__global__\\s+void\\s+\\w+", false, "-rcP"},
      {"regex without a literal", "[A-Z][a-z]+[0-9]{3}", false, "-rcE"},
      {"case-insensitive literal", "THREADIDX", true, "-rciF"},
  };
  for (const Search& search : searches) {
    nlohmann::json arguments = {{"pattern", search.pattern}, {"output_mode", "count"}, {"head_limit", 0}};
    if (search.ignore_case) arguments["-i"] = true;
    std::string summary;
    const double ours = median_cpu_seconds(runs, [&] { summary = grep.invoke(arguments, context).content; });
    std::cout << std::setprecision(3) << "Grep " << search.label << " (" << search.pattern << "): " << ours << " s, "
              << std::setprecision(0) << megabytes / ours << " MB/s";
    const auto time_external = [&](const std::vector<std::string>& command) {
      ca::ProcessSpec spec;
      spec.argv = command;
      spec.environment = path;
      spec.output_limit = 4096;
      return median_of(runs, [&] {
        const ca::ProcessResult result = ca::run_process(spec);
        return std::chrono::duration<double>(result.user_cpu_time + result.system_cpu_time).count();
      });
    };
    if (rg) {
      std::vector<std::string> command = {rg->string(), "-c", "-j1"};
      if (search.ignore_case) command.push_back("-i");
      command.insert(command.end(), {search.pattern, workspace.string()});
      std::cout << std::setprecision(3) << "; rg -j1 " << time_external(command) << " s";
    }
    if (gnu_grep)
      std::cout << std::setprecision(3) << "; grep " << search.grep_flags << " "
                << time_external({gnu_grep->string(), search.grep_flags, search.pattern, workspace.string()}) << " s";
    std::cout << "\n    " << summary.substr(summary.rfind('\n') + 1) << "\n";
  }

  ca::GlobTool glob;
  std::cout << std::setprecision(2) << "Glob **/*.cu over " << file_count << " files: "
            << 1e3 * median_cpu_seconds(runs,
                                        [&] {
                                          (void)glob.invoke({{"pattern", "**/*.cu"}}, context);
                                        })
            << " ms\n";

  ca::ReadTool read;
  ca::EditTool edit;
  const int calls = 200;
  const double read_seconds = median_cpu_seconds(calls, [&] {
    (void)read.invoke({{"file_path", "long.py"}}, context);
  });
  bool flip = false;
  const double edit_seconds = median_cpu_seconds(calls, [&] {
    const std::string from = flip ? "line 1000 of a 2000-line" : "line 1000 of a two-thousand-line";
    const std::string to = flip ? "line 1000 of a two-thousand-line" : "line 1000 of a 2000-line";
    flip = !flip;
    const ca::ToolResult result =
        edit.invoke({{"file_path", "long.py"}, {"old_string", from}, {"new_string", to}}, context);
    if (result.is_error) std::cerr << result.content << "\n";
  });
  std::cout << std::setprecision(0) << "Read of a 2000-line file: " << read_seconds * 1e6
            << " us; Edit (read, replace, atomic rename, snippet): " << edit_seconds * 1e6 << " us\n";

  std::error_code ignored;
  std::filesystem::remove_all(base, ignored);
  return 0;
}
