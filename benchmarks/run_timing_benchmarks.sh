#!/usr/bin/env bash
# The profiler's benchmarks, unattended, on a GPU machine, in about 8 minutes:
#   timing_fidelity   ~1 min    profiler time vs CUDA-graph device time (>= 30 us kernels within 3%)
#   timing_honesty    ~5 min    A/A on 15+ KernelBench tasks, 10 comparisons each way; H100 agreement
#   edit_to_verdict   ~2 min    one-line .cu change -> compile + verify + profile, against the naive flow
#
#   benchmarks/run_timing_benchmarks.sh [results-directory]
#
# Needs a build with benchmarks (cmake -DCUDA_AGENT_BUILD_BENCHMARKS=ON) in $CUDA_AGENT_BUILD_DIR
# (default ./build) and $CUDA_AGENT_PYTHON (default /opt/cuda-agent/venv/bin/python3).
# Each benchmark prints a table and writes JSON; the exit status is 1 if any missed its target.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUDA_AGENT_BUILD_DIR:-$root/build}"
python="${CUDA_AGENT_PYTHON:-/opt/cuda-agent/venv/bin/python3}"
out="${1:-$root/benchmarks/results}"
mkdir -p "$out"

cmake --build "$build" --target cuda_agent_benchmark_timing_judge cuda_agent_benchmark_edit_to_verdict || exit 2
judge="$build/benchmarks/cuda_agent_benchmark_timing_judge"

status=0
run() {
  local name="$1"
  shift
  echo
  echo "=== $name ==="
  local started=$SECONDS
  "$@" || status=1
  echo "=== $name: $((SECONDS - started)) s ==="
}
run timing_fidelity "$python" "$root/benchmarks/timing_fidelity/run.py" --out "$out/timing_fidelity.json"
run timing_honesty "$python" "$root/benchmarks/timing_honesty/run.py" --budget-s "${CUDA_AGENT_AA_BUDGET_S:-300}" \
  --judge "$judge" --out "$out/timing_honesty.json"
run edit_to_verdict "$build/benchmarks/cuda_agent_benchmark_edit_to_verdict" --python "$python" \
  --harness "$root/resources/harness" --out "$out/edit_to_verdict.json"
exit $status
