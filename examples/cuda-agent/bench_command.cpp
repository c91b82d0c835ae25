// SPDX-License-Identifier: Apache-2.0
// `cuda-agent bench --generations DIR`: a folder of KernelBench generations (or candidate
// directories) scored the trusted way through the evaluation pool, with Table 1 and the
// reports (report.md, report.html); `--report-only` writes the reports of an earlier run again.
#include <cuda_agent/bench/bench_report.hpp>
#include <cuda_agent/bench/generation_set.hpp>
#include <cuda_agent/bench/table_metrics.hpp>
#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/tasks/kernelbench_generation.hpp>
#include <cuda_agent/tasks/task_loader.hpp>

#include <algorithm>     // find, max, sort
#include <chrono>        // steady_clock
#include <cstdio>        // snprintf
#include <filesystem>    // path
#include <iostream>      // cout, cerr
#include <map>           // map
#include <memory>        // shared_ptr
#include <optional>      // optional
#include <string>        // string
#include <system_error>  // error_code
#include <tuple>         // tuple
#include <utility>       // move
#include <vector>        // vector

#include "command_line.hpp"
#include "commands.hpp"
#include "trusted_slots.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* bench_description =
    R"(Scores a folder of KernelBench generations the trusted way and prints the paper's Table 1
(per level: pass rate, faster-than-eager and faster-than-compile rates, geometric-mean
speedups) with KernelBench's fast_p.

The folder holds single-file generations named level_{L}_problem_{P}_sample_{S}_kernel.py
(a model_new.py that builds with load_inline or load: see `cuda-agent eval --help`) or
candidate directories level_{L}_problem_{P}_sample_{S}/ (model_new.py and kernels/); each
answers the task level{L}/{P}_*.py of --tasks. Samples run concurrently through the
evaluation pool (builds on CPU workers, verification and timing on the GPUs' slots).

--out receives samples/<sample>.json as each sample finishes (a run started again with the
same --out scores only what is missing), the laid-out generations under candidates/,
results.json (every sample and Table 1), eval_results.json in KernelBench's shape
(per problem, a list of samples with compiled, correctness, runtime in ms, runtime_stats
and metadata), and the reports report.md and report.html (one page without scripts or
network: Table 1 beside the CUDA Agent paper's rows, fast_p and speedup plots, the best
sample of each task linked to its record). Our verdicts reject generations that KernelBench
accepts (its metadata says so). A sample that fails for reasons not its own
(infrastructure_error) is reported and left unscored, to be retried by the next run.

--report-only --out OUT writes OUT's report.md and report.html again from the samples of its
results.json, evaluating nothing.)";

struct BenchOptions {
  std::filesystem::path generations;
  std::filesystem::path tasks = "tests/data/kernelbench";
  std::filesystem::path out;
  std::string levels;
  bool quiet = false;
  bool report_only = false;
  LocalSlotOptions local;
};

/// One sample's record, as written to samples/<name>.json.
struct SampleRecord {
  GenerationSample sample;
  std::filesystem::path task_file;
  std::string outcome;  // "evaluated", "infrastructure_error", ...
  std::string message;
  std::optional<Evaluation> evaluation;
  Reward reward;
  nlohmann::json generation;  // how a single file was laid out, or null
  double wall_seconds = 0;
};

nlohmann::json to_record_json(const SampleRecord& record) {
  const std::optional<Rejection> rejection = record.evaluation ? record.evaluation->rejection() : std::nullopt;
  return {
      {"sample", record.sample.key.name()},
      {"level", record.sample.key.level},
      {"problem", record.sample.key.problem},
      {"sample_id", record.sample.key.sample},
      {"source", record.sample.path.string()},
      {"task", record.task_file.string()},
      {"outcome", record.outcome},
      {"message", record.message},
      {"generation", record.generation},
      {"evaluation", record.evaluation ? nlohmann::json(*record.evaluation) : nlohmann::json(nullptr)},
      {"reward",
       {{"value", record.reward.value}, {"label", record.reward.label}, {"explanation", record.reward.explanation}}},
      {"rejection", rejection ? nlohmann::json(*rejection) : nlohmann::json(nullptr)},
      {"wall_seconds", record.wall_seconds}};
}

BenchSample to_bench_sample(const nlohmann::json& record) {
  BenchSample sample;
  sample.task = record.at("task").get<std::string>();
  sample.level = record.at("level").get<int>();
  sample.sample = record.at("sample_id").get<int>();
  sample.reward = record.at("reward").at("value").get<double>();
  sample.wall_seconds = record.value("wall_seconds", 0.0);
  if (record.at("evaluation").is_null()) return sample;
  const Evaluation evaluation = record.at("evaluation").get<Evaluation>();
  sample.correct = evaluation.correct();
  sample.scored = evaluation.scored();
  if (const std::optional<Rejection> rejection = evaluation.rejection()) sample.rejection = rejection->reason;
  if (evaluation.profile) {
    sample.versus_eager = evaluation.profile->versus_eager;
    sample.versus_compile = evaluation.profile->versus_compile;
  }
  return sample;
}

/// A sample as KernelBench's eval_results.json has it (runtime in ms, -1 when not timed).
nlohmann::json kernelbench_entry(const nlohmann::json& record) {
  const nlohmann::json& evaluation = record.at("evaluation");
  const bool compiled = !evaluation.is_null() && evaluation.at("compile").value("succeeded", false);
  Evaluation parsed;
  if (!evaluation.is_null()) parsed = evaluation.get<Evaluation>();
  const TimingStats* candidate = parsed.profile ? parsed.profile->timing("candidate") : nullptr;
  nlohmann::json runtime_stats = nlohmann::json::object();
  if (candidate)
    runtime_stats = {{"mean", candidate->mean_us / 1000.0}, {"median", candidate->median_us / 1000.0},
                     {"min", candidate->min_us / 1000.0},   {"max", candidate->max_us / 1000.0},
                     {"num_trials", candidate->samples},    {"unit", "ms"}};
  nlohmann::json metadata = {{"evaluator", "cuda-agent"},
                             {"note", "cuda-agent's trusted evaluation: it rejects generations KernelBench accepts"},
                             {"reward", record.at("reward").at("value")},
                             {"outcome", record.at("outcome")}};
  if (!record.at("rejection").is_null()) metadata["rejection"] = record.at("rejection");
  if (parsed.profile && parsed.profile->versus_eager)
    metadata["speedup_vs_eager"] = parsed.profile->versus_eager->speedup;
  if (parsed.profile && parsed.profile->versus_compile)
    metadata["speedup_vs_compile"] = parsed.profile->versus_compile->speedup;
  return {{"sample_id", record.at("sample_id")},       {"compiled", compiled},
          {"correctness", parsed.correct()},           {"runtime", candidate ? candidate->median_us / 1000.0 : -1.0},
          {"runtime_stats", std::move(runtime_stats)}, {"metadata", std::move(metadata)}};
}

ReportSample to_report_sample(const nlohmann::json& record, const std::filesystem::path& out) {
  ReportSample sample;
  sample.metrics = to_bench_sample(record);
  sample.name = record.at("sample").get<std::string>();
  const nlohmann::json& rejection = record.at("rejection");
  sample.message = rejection.is_object() ? rejection.value("message", "") : record.value("message", "");
  std::error_code error;
  sample.has_candidate = std::filesystem::is_directory(out / "candidates" / sample.name, error);
  return sample;
}

/// report.md and report.html in `out`, from what its results.json holds: the samples in
/// level, problem and sample order.
void write_reports(const std::filesystem::path& out, const nlohmann::json& results) {
  std::vector<nlohmann::json> records = results.at("samples").get<std::vector<nlohmann::json>>();
  const auto key = [](const nlohmann::json& record) {
    return std::tuple(record.at("level").get<int>(), record.at("problem").get<int>(),
                      record.at("sample_id").get<int>());
  };
  std::sort(records.begin(), records.end(),
            [&](const nlohmann::json& a, const nlohmann::json& b) { return key(a) < key(b); });
  BenchReport report;
  report.generations = results.value("generations", "");
  report.unscored = results.value("unscored", std::size_t{0});
  for (const nlohmann::json& record : records) report.samples.push_back(to_report_sample(record, out));
  detail::write_file_atomically(out / "report.md", render_bench_markdown(report));
  detail::write_file_atomically(out / "report.html", render_bench_html(report));
}

void print_report_paths(const std::filesystem::path& out) {
  std::cout << "report     " << (out / "report.md").string() << " and " << (out / "report.html").string() << "\n";
}

/// `--report-only`: the reports of the run whose results.json is in --out, written again.
int write_reports_only(const BenchOptions& options) {
  const std::filesystem::path out = std::filesystem::absolute(options.out);
  const std::filesystem::path results = out / "results.json";
  if (!std::filesystem::is_regular_file(results))
    throw UsageError("--report-only: " + results.string() + " does not exist; run bench with this --out first");
  write_reports(out, nlohmann::json::parse(detail::read_file(results)));
  print_report_paths(out);
  return 0;
}

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof(text), "%5.1f%%", 100.0 * share);
  return text;
}

std::string times(const std::optional<double>& value) {
  if (!value) return "    -";
  char text[16];
  std::snprintf(text, sizeof(text), "%5.2fx", *value);
  return text;
}

void print_table(const std::vector<TableRow>& table, std::ostream& out) {
  out << "\nlevel  samples  pass    >eager  >compile  geomean eager (solved/all)  geomean compile (solved/all)\n";
  for (const TableRow& row : table) {
    const std::string level = row.level == 0 ? "all" : std::to_string(row.level);
    char line[256];
    std::snprintf(line, sizeof(line), "%-5s  %7zu  %s  %s  %s    %s / %s              %s / %s\n", level.c_str(),
                  row.samples, percent(row.pass_rate).c_str(), percent(row.faster_than_eager_rate).c_str(),
                  percent(row.faster_than_compile_rate).c_str(), times(row.geomean_speedup_eager_solved).c_str(),
                  times(row.geomean_speedup_eager_all).c_str(), times(row.geomean_speedup_compile_solved).c_str(),
                  times(row.geomean_speedup_compile_all).c_str());
    out << line;
  }
  const TableRow& all = table.back();
  out << "fast_p (all, vs eager / vs compile):";
  for (double p : fast_p_thresholds) {
    char cell[64];
    std::snprintf(cell, sizeof(cell), "  p=%g %s/%s", p, percent(all.fast_p_eager.at(p)).c_str(),
                  percent(all.fast_p_compile.at(p)).c_str());
    out << cell;
  }
  out << "\n(faster: a FASTER verdict beyond the 5% threshold; geomean over solved samples, and over all with "
         "failures as 1x)\n";
}

std::vector<int> parse_levels(const std::string& list) {
  std::vector<int> levels;
  if (list.empty()) return levels;
  try {
    levels = parse_gpus(list, "--levels");
  } catch (const UsageError&) {
    throw UsageError("--levels: expects levels L,M,..., not '" + list + "'");
  }
  return levels;
}

int run_bench(BenchOptions& options) {
  if (options.report_only) return write_reports_only(options);
  if (options.generations.empty()) throw UsageError("--generations is required (or --report-only with --out)");
  if (!std::filesystem::is_directory(options.generations))
    throw UsageError(options.generations.string() + " is not a directory of generations");
  if (!std::filesystem::is_directory(options.tasks))
    throw UsageError("--tasks: " + options.tasks.string() +
                     " is not a directory (KernelBench's level1/, level2/, ...)");
  const std::vector<int> levels = parse_levels(options.levels);
  const std::vector<int> devices = settle_local_slots(options.local);
  if (options.out.empty())
    options.out = std::filesystem::absolute(options.generations).lexically_normal().parent_path() /
                  (std::filesystem::absolute(options.generations).lexically_normal().filename().string() + "-scored");
  options.out = std::filesystem::absolute(options.out);
  const std::filesystem::path samples_folder = options.out / "samples";
  detail::make_open_directory(options.out);
  detail::make_open_directory(samples_folder);
  detail::make_open_directory(options.out / "candidates");

  const GenerationSet set = find_generations(options.generations);
  const auto tasks = index_kernelbench_tasks(options.tasks);
  std::vector<GenerationSample> chosen;
  std::size_t without_task = 0;
  for (const GenerationSample& sample : set.samples) {
    if (!levels.empty() && std::find(levels.begin(), levels.end(), sample.key.level) == levels.end()) continue;
    if (!tasks.contains({sample.key.level, sample.key.problem})) {
      std::cerr << "cuda-agent bench: no task level" << sample.key.level << "/" << sample.key.problem << "_*.py in "
                << options.tasks.string() << " for " << sample.path.filename().string() << ": left out\n";
      ++without_task;
      continue;
    }
    chosen.push_back(sample);
  }
  if (chosen.empty()) throw UsageError("no sample of " + options.generations.string() + " answers a task of --tasks");

  // What an earlier run with this --out scored is kept.
  std::map<std::string, nlohmann::json> records;
  std::vector<GenerationSample> to_score;
  for (const GenerationSample& sample : chosen) {
    const std::filesystem::path file = samples_folder / (sample.key.name() + ".json");
    if (std::filesystem::exists(file)) {
      try {
        records[sample.key.name()] = nlohmann::json::parse(detail::read_file(file));
        continue;
      } catch (const std::exception&) {  // a torn file from a killed run: score it again
      }
    }
    to_score.push_back(sample);
  }
  std::cerr << "cuda-agent bench: " << chosen.size() << " samples (" << records.size() << " already scored in "
            << options.out.string() << ", " << to_score.size() << " to score" << (without_task ? ", " : "")
            << (without_task ? std::to_string(without_task) + " without a task" : "") << ")\n";

  EvaluationPoolOptions pool;
  set_local_slots(options.local, devices, pool);
  const TrustedSlotSettings& settings = options.local.evaluator;
  const nlohmann::json policy = {{"tolerance", settings.strict ? "strict" : "default"},
                                 {"timing", !settings.no_profile},
                                 {"device", options.local.device}};
  pool.environment = evaluation_environment(options.local, devices, policy);
  pool.max_pending = std::max<std::size_t>(pool.max_pending, to_score.size() + 1);
  const std::filesystem::path work = options.out / "work";
  pool.work_directory = work / "pool";
  raise_descriptor_limit();

  // Single files are laid out first; one that cannot be is that sample's failure, not the run's.
  SandboxOptions reading;
  reading.workspace = options.out / "candidates";
  AnySandbox sandbox = settings.unconfined ? AnySandbox(ProcessSandbox(reading)) : make_default_sandbox(reading);
  GenerationConversionOptions conversion;
  conversion.python = settings.python;

  EvaluationPool evaluations(
      pool, make_evaluator(settings, PoolSlot{options.local.device, devices.front()}, work / "builder"),
      slot_evaluators(settings, work));
  struct Pending {
    SampleRecord record;
    std::chrono::steady_clock::time_point started;
    std::optional<EvaluationPool::Ticket> ticket;
  };
  std::vector<Pending> pending;
  for (const GenerationSample& sample : to_score) {
    Pending item;
    item.record.sample = sample;
    item.record.task_file = tasks.at({sample.key.level, sample.key.problem});
    item.started = std::chrono::steady_clock::now();
    std::filesystem::path candidate = sample.path;
    if (!sample.is_directory) {
      const GenerationConversion converted = convert_kernelbench_generation(sandbox, sample.path, conversion);
      item.record.generation = describe_conversion(converted);
      if (converted.rejection) {
        item.record.outcome = to_string(PoolOutcome::evaluated);
        item.record.evaluation = refused_evaluation(converted);
        pending.push_back(std::move(item));
        continue;
      }
      candidate = options.out / "candidates" / sample.key.name();
      std::filesystem::remove_all(candidate);
      write_candidate_sources(converted.candidate.files, candidate);
    }
    EvaluationRequest request;
    request.id = sample.key.name();
    request.task = load_task(item.record.task_file);
    request.candidate_directory = candidate;
    request.policy = policy;
    request.timing = !settings.no_profile;
    item.ticket = evaluations.submit(std::move(request));
    pending.push_back(std::move(item));
  }

  std::size_t done = records.size();
  std::size_t infrastructure_errors = 0;
  for (Pending& item : pending) {
    SampleRecord& record = item.record;
    if (item.ticket) {
      const PoolResult& result = item.ticket->result.get();
      record.outcome = to_string(result.outcome);
      record.message = result.message;
      record.evaluation = result.evaluation;
    }
    record.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - item.started).count();
    const bool scored = record.outcome == to_string(PoolOutcome::evaluated) && record.evaluation;
    if (scored) record.reward = MilestoneReward{}.reward(*record.evaluation);
    const nlohmann::json json = to_record_json(record);
    ++done;
    if (scored) {
      records[record.sample.key.name()] = json;
      detail::write_file_atomically(samples_folder / (record.sample.key.name() + ".json"), json.dump(2) + "\n");
    } else {
      ++infrastructure_errors;
    }
    if (!options.quiet)
      std::cerr << "[" << done << "/" << chosen.size() << "] " << record.sample.key.name() << ": "
                << (scored ? "reward " + nlohmann::json(record.reward.value).dump() + " (" + record.reward.label + ")"
                           : record.outcome + ": " + record.message.substr(0, 200))
                << std::endl;
  }

  std::vector<BenchSample> samples;
  nlohmann::json kernelbench = nlohmann::json::object();
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& [name, record] : records) {
    samples.push_back(to_bench_sample(record));
    kernelbench[std::to_string(record.at("problem").get<int>())].push_back(kernelbench_entry(record));
    listed.push_back(record);
  }
  const std::vector<TableRow> table = table_one(samples);
  nlohmann::json document = {
      {"generations", std::filesystem::absolute(options.generations).string()},
      {"tasks", std::filesystem::absolute(options.tasks).string()},
      {"policy", policy},
      {"conventions",
       "pass rate: correct over scored samples; faster: a FASTER verdict (whole interval beyond the threshold); "
       "geomean solved: over correct timed samples (the paper's); geomean all: failures as 1x; fast_p: correct and "
       "speedup above p, over scored samples"},
      {"table", table},
      {"samples", std::move(listed)},
      {"unscored", infrastructure_errors}};
  detail::write_file_atomically(options.out / "results.json", document.dump(2) + "\n");
  detail::write_file_atomically(options.out / "eval_results.json", kernelbench.dump(2) + "\n");
  write_reports(options.out, document);
  print_table(table, std::cout);
  std::cout << "results    " << (options.out / "results.json").string() << "\n"
            << "kernelbench " << (options.out / "eval_results.json").string() << "\n";
  print_report_paths(options.out);
  if (infrastructure_errors > 0) {
    std::cerr << "cuda-agent bench: " << infrastructure_errors
              << " samples failed for reasons not their own; run again with the same --out to retry them\n";
    return 3;
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command =
      program.add_subcommand("bench", "score a folder of KernelBench generations the trusted way: Table 1 and fast_p");
  command->footer(std::string(bench_description) +
                  "\n\nexit status: 0 every sample scored, 2 usage error, 3 some samples failed for reasons not their "
                  "own");
  CLI::Option* generations =
      command->add_option("--generations", options->generations, "the folder of generations or candidate directories")
          ->type_name("DIR");
  command
      ->add_option("--tasks", options->tasks,
                   "KernelBench's tasks: level1/, level2/, ... with {P}_{Name}.py (default tests/data/kernelbench)")
      ->type_name("DIR");
  CLI::Option* out = command
                         ->add_option("--out", options->out,
                                      "where results and reports go (default: DIR-scored beside the generations)")
                         ->type_name("DIR");
  command->add_option("--levels", options->levels, "only these levels (default all)")->type_name("L,M,...");
  command->add_flag("--no-profile", options->local.evaluator.no_profile,
                    "verify only (no speedups: the faster rates and fast_p are then 0)");
  command->add_flag("--strict", options->local.evaluator.strict,
                    "KernelBench's tolerances (fp32 1e-4) instead of the paper's (1e-2)");
  command->add_flag("--quiet", options->quiet, "no line per finished sample");
  command
      ->add_flag("--report-only", options->report_only,
                 "write report.md and report.html of --out again from its results.json; evaluates nothing")
      ->needs(out)
      ->excludes(generations);
  add_local_slot_options(*command, options->local);
  command->callback([options, &exit_status] { exit_status = run_bench(*options); });
}

}  // namespace cuda_agent::cli
