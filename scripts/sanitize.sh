#!/usr/bin/env bash
# Builds the components' unit tests with AddressSanitizer and UndefinedBehaviorSanitizer (the
# `asan` preset: Debug, leaks detected, any undefined behaviour fatal) and runs them.
#
#   scripts/sanitize.sh             # after scripts/test.sh has set the machine up
#   scripts/sanitize.sh -R '^tools/'  # extra arguments go to ctest
#
# The end-to-end suites (adversarial, gpu_candidates) and the Python-labelled tests are left
# out: their time goes to the Python harness, which the sanitizers do not see, and the
# ordinary build runs them. On 2 cores the build takes about 6 minutes and the tests under 1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUDA_AGENT_ASAN_BUILD_DIR:-$root/build-asan}"
if [ "$(id -u)" -eq 0 ]; then default_venv=/opt/cuda-agent/venv; else default_venv="$HOME/.local/share/cuda-agent/venv"; fi
python="${CUDA_AGENT_VENV:-$default_venv}/bin/python3"

components=(core tools llm tasks http sandbox compile verify profile evaluate agent service server)
started=$SECONDS
mkdir -p "$build"
cmake --preset asan -S "$root" -B "$build" -DCUDA_AGENT_PYTHON="$python" \
  -DCUDA_AGENT_BUILD_BENCHMARKS=OFF -DCUDA_AGENT_BUILD_FUZZERS=OFF > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
targets=()
for component in "${components[@]}"; do
  if grep -q "^build cuda_agent_test_$component:" "$build/build.ninja"; then
    targets+=("cuda_agent_test_$component")
  else
    echo "sanitize.sh: no test target for '$component' in this configuration (its dependencies are missing); left out"
  fi
done
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"
echo "sanitize.sh: build took $((SECONDS - started)) s"
begun=$SECONDS
pattern="^($(IFS='|'; echo "${components[*]}"))/"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" -L unit -R "$pattern" --no-tests=error "$@"
echo "sanitize.sh: tests took $((SECONDS - begun)) s"
