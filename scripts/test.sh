#!/usr/bin/env bash
# Sets up the machine, builds cuda-agent with its tests, and runs them.
#
#   scripts/test.sh                 # set up, build in ./build, run every test this machine can run
#   scripts/test.sh -L unit         # extra arguments go to ctest
#
# GPU tests are registered too; on a machine without an NVIDIA GPU they report
# themselves as skipped, with the reason.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUDA_AGENT_BUILD_DIR:-$root/build}"

started=$SECONDS
stamp() { echo "test.sh: $1 took $((SECONDS - $2)) s (total $((SECONDS - started)) s)"; }
"$root/scripts/setup.sh"
stamp "set-up" "$started"

if [ "$(id -u)" -eq 0 ]; then default_venv=/opt/cuda-agent/venv; else default_venv="$HOME/.local/share/cuda-agent/venv"; fi
python="${CUDA_AGENT_VENV:-$default_venv}/bin/python3"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The cuda component needs the CUDA Toolkit; build it wherever nvcc is installed.
with_cuda=OFF
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then with_cuda=ON; fi
# The torch component needs libtorch, whose CMake package asks for the CUDA Toolkit when
# torch was built with CUDA: build it where both are there.
with_torch=OFF
torch_prefix=""
if [ "$with_cuda" = ON ] && torch_prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"; then
  with_torch=ON
fi
# The benchmarks run on GPU machines only, but are built everywhere (2 minutes on 2 cores), so
# that a change that breaks one shows here rather than on the device.
begun=$SECONDS
cmake -S "$root" -B "$build" "${generator[@]}" \
  -DCUDA_AGENT_WITH_TORCH="$with_torch" ${torch_prefix:+-DCMAKE_PREFIX_PATH="$torch_prefix"} \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCUDA_AGENT_ENABLE_GPU_TESTS=ON -DCUDA_AGENT_BUILD_BENCHMARKS=ON \
  -DCUDA_AGENT_WITH_CUDA="$with_cuda" -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" \
  -DCUDA_AGENT_PYTHON="$python" \
  -DCUDA_AGENT_WARNINGS_AS_ERRORS="${CUDA_AGENT_WARNINGS_AS_ERRORS:-OFF}"
cmake --build "$build" --parallel "$(nproc)"
stamp "configure and build" "$begun"
cd "$build"
begun=$SECONDS
status=0
ctest --output-on-failure --parallel "$(nproc)" "$@" || status=$?
stamp "tests" "$begun"
exit "$status"
