#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
#   benchmarks/run_timing_benchmarks.sh OUTPUT_DIRECTORY
#
# The profiler's GPU benchmarks, unattended, in about 9 minutes on one H200 with 16 cores;
# writes OUTPUT_DIRECTORY/RESULTS.md (Markdown tables, PASS/FAIL per target), one JSON and
# one log per benchmark. Steps, with their rough share of the time:
#   build      ~1 min   configures $CUDA_AGENT_BUILD_DIR (default ./build-timing-benchmarks) and builds the
#                       two programs it needs; meanwhile torch.compile of the A/A tasks fills
#                       the inductor/Triton caches in parallel processes (GPU otherwise idle)
#   fidelity   ~40 s    profiler time vs CUDA-graph device time (kernels >= 30 µs within 3%)
#   edit       ~1.5 min one-line .cu edit -> compile + verify + profile (warm), against the naive flow
#   honesty    ~5 min   A/A on 15+ KernelBench tasks (levels 1-3), eager vs eager and compile vs
#                       compile, 10 comparisons each; eager/compile ratios beside the H100 baselines
#                       (at least 15 tasks whatever the budget: 8 min on one H200 with a 230 s one)
#
# Environment: CUDA_AGENT_PYTHON (default /opt/cuda-agent/venv/bin/python3: torch with CUDA),
# CUDA_AGENT_BUILD_DIR, CUDA_AGENT_AA_BUDGET_S (seconds for the A/A step, default 300).
# Needs: an NVIDIA GPU (nvidia-smi), nvcc (PATH or /usr/local/cuda/bin), cmake, a C++20
# compiler, nlohmann-json, and bubblewrap (bwrap: the verifier's workers run confined).
# Exit status: 0 all targets met; 1 a target missed; 2 something needed is missing or a step
# crashed (the message says which).
set -euo pipefail

die() {
  echo "error: $*" >&2
  exit 2
}

[[ $# -eq 1 ]] || die "usage: $0 OUTPUT_DIRECTORY"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)" || die "cannot create $1"
python="${CUDA_AGENT_PYTHON:-/opt/cuda-agent/venv/bin/python3}"
build="${CUDA_AGENT_BUILD_DIR:-$root/build-timing-benchmarks}"
aa_budget="${CUDA_AGENT_AA_BUDGET_S:-300}"
jobs="$(nproc)"
started=$SECONDS
stamp() { printf '[%4d s] %s\n' $((SECONDS - started)) "$*"; }

# --- what the run needs, checked before anything starts --------------------------------
stamp "checking prerequisites"
[[ -x "$python" ]] || die "no Python at $python; set CUDA_AGENT_PYTHON to an interpreter with torch"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: these benchmarks need an NVIDIA GPU"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi sees no GPU: $(nvidia-smi -L 2>&1 | head -1)"
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  die "$python: torch is missing or sees no CUDA device (torch.cuda.is_available() is False)"
if ! command -v nvcc >/dev/null; then
  [[ -x /usr/local/cuda/bin/nvcc ]] || die "nvcc not found on PATH nor in /usr/local/cuda/bin (the CUDA candidate is built with it)"
  export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v cmake >/dev/null || die "cmake not found"
command -v bwrap >/dev/null || die "bubblewrap (bwrap) not found: the verifier's workers run in it; install it (apt-get install bubblewrap, or unpack the .deb) and run again"
free_gib="$(df -Pk "$out" | awk 'NR==2 {print int($4 / 1048576)}')"
[[ "$free_gib" -ge 5 ]] || die "only ${free_gib} GiB free under $out (5 GiB wanted for caches and builds)"
gpu_busy="$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
[[ "$gpu_busy" -eq 0 ]] || echo "warning: $gpu_busy other process(es) use the GPU; timings will be disturbed" >&2
echo "  GPU: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader)"
echo "  python: $python ($("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'))"
echo "  nvcc: $(nvcc --version | tail -1)"
echo "  output: $out"

# One compile cache for the whole run: compilation is not what these benchmarks measure.
caches="$out/compile-caches"
export TORCHINDUCTOR_CACHE_DIR="$caches/inductor" TRITON_CACHE_DIR="$caches/triton"
export PYTHONDONTWRITEBYTECODE=1

# --- build (and, meanwhile, torch.compile of the A/A tasks) ---------------------------
stamp "prewarming torch.compile of the A/A tasks in the background (log: prewarm.log)"
"$python" "$root/benchmarks/timing_honesty/run.py" --prewarm-only --workers 6 \
  --also "$root/benchmarks/edit_to_verdict/task/model.py" >"$out/prewarm.log" 2>&1 &
prewarm_pid=$!

stamp "building in $build (log: build.log)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if ! {
  cmake -S "$root" -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCUDA_AGENT_BUILD_BENCHMARKS=ON -DCUDA_AGENT_BUILD_TESTS=OFF -DCUDA_AGENT_BUILD_EXAMPLES=OFF \
    -DCUDA_AGENT_WITH_HTTP=OFF -DCUDA_AGENT_PYTHON="$python" &&
    cmake --build "$build" -j "$jobs" --target cuda_agent_benchmark_timing_judge cuda_agent_benchmark_edit_to_verdict
} >"$out/build.log" 2>&1; then
  kill "$prewarm_pid" 2>/dev/null || true
  tail -40 "$out/build.log" >&2
  die "the build failed (full log: $out/build.log)"
fi
judge="$build/benchmarks/cuda_agent_benchmark_timing_judge"
edit="$build/benchmarks/cuda_agent_benchmark_edit_to_verdict"
[[ -x "$judge" && -x "$edit" ]] || die "the build finished without $judge or $edit"
stamp "build done; waiting for the prewarm"
wait "$prewarm_pid" || die "the compile prewarm crashed (log: $out/prewarm.log)"
grep -E "prewarm:|warning" "$out/prewarm.log" | sed 's/^/  /' || true

# --- the benchmarks ---------------------------------------------------------------------
declare -A status
run() {
  local name="$1"
  shift
  stamp "$name (log: $name.log)"
  local begun=$SECONDS
  set +e
  "$@" 2>&1 | tee "$out/$name.log"
  status[$name]=${PIPESTATUS[0]}
  set -e
  stamp "$name: exit status ${status[$name]} after $((SECONDS - begun)) s"
}
run timing_fidelity "$python" "$root/benchmarks/timing_fidelity/run.py" --device cuda --samples 20 \
  --out "$out/timing_fidelity.json"
# Edit-to-verdict before the A/A step: it is short and fixed in length, while the A/A step
# measures at least --min-tasks tasks whatever its budget, so a run cut short by its
# caller's time limit still has the latency figures.
run edit_to_verdict "$edit" --device cuda --python "$python" --edits 3 --out "$out/edit_to_verdict.json"
run timing_honesty "$python" "$root/benchmarks/timing_honesty/run.py" --device cuda --budget-s "$aa_budget" \
  --judge "$judge" --out "$out/timing_honesty.json"

# --- the results table ----------------------------------------------------------------
stamp "writing $out/RESULTS.md"
set +e
"$python" "$root/benchmarks/timing_common/summarize.py" "$out" --elapsed-s $((SECONDS - started)) \
  --status "timing_fidelity=${status[timing_fidelity]}" --status "timing_honesty=${status[timing_honesty]}" \
  --status "edit_to_verdict=${status[edit_to_verdict]}"
summary=$?
set -e
stamp "done"
[[ $summary -ne 2 ]] || die "a benchmark left no results (see RESULTS.md and the logs in $out)"
for name in timing_fidelity timing_honesty edit_to_verdict; do
  if [[ "${status[$name]}" -ge 2 ]]; then
    echo "error: $name crashed (exit status ${status[$name]}; log: $out/$name.log)" >&2
    exit 2
  fi
done
exit $((summary == 0 ? 0 : 1))
