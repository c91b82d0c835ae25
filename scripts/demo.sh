#!/usr/bin/env bash
# The main job on a bundled example: a recorded model optimizes KernelBench
# level2/14_Gemm_Divide_Sum_Scaling, and everything it does runs for real here (sandbox,
# compile driver, verifier, profiler, trusted evaluation). Sets the machine up first.
#
#   scripts/demo.sh                   # set up, build cuda-agent, run the demo
#   scripts/demo.sh --device cpu      # extra arguments go to `cuda-agent demo`
#
# With an NVIDIA GPU the kernels are CUDA and timed against eager PyTorch and torch.compile;
# without one the same story runs as C++ CPU extensions and the program says what needs a GPU.
# Outputs go to a new directory under /tmp unless --out is given.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUDA_AGENT_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"

if [ "$(id -u)" -eq 0 ]; then default_venv=/opt/cuda-agent/venv; else default_venv="$HOME/.local/share/cuda-agent/venv"; fi
python="${CUDA_AGENT_VENV:-$default_venv}/bin/python3"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCUDA_AGENT_PYTHON="$python" >/dev/null
cmake --build "$build" --target cuda-agent --parallel "$(nproc)"

arguments=("$@")
if [[ " $* " != *" --out "* ]]; then
  # The sandbox user must be able to enter the outputs, so the directory is not private.
  out="$(mktemp -d /tmp/cuda-agent-demo.XXXXXX)"
  chmod 0755 "$out"
  arguments+=(--out "$out/run")
fi
exec "$build/examples/cuda-agent/cuda-agent" demo "${arguments[@]}"
