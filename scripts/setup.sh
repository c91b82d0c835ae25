#!/usr/bin/env bash
# Installs what cuda-agent needs on a Debian 12 or Ubuntu 22.04+ machine: the compilers
# and libraries (apt-get), and a Python environment with PyTorch for the evaluation
# harness. Safe to run again; it only adds what is missing.
#
#   scripts/setup.sh            # everything
#   CUDA_AGENT_SKIP_PYTHON=1 scripts/setup.sh   # C++ side only
#   CUDA_AGENT_SETUP_SLURM=1 scripts/setup.sh   # and Slurm's daemons, for its test (CI does)
#
# The Python environment goes to $CUDA_AGENT_VENV, by default /opt/cuda-agent/venv when
# run as root and ~/.local/share/cuda-agent/venv otherwise. It is built from the system
# interpreter (/usr/bin/python3) on purpose: sandboxed evaluations run as an
# unprivileged user, who must be able to read the interpreter and its standard library.
set -euo pipefail

sudo_if_needed() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  nlohmann-json3-dev catch2 libcurl4-openssl-dev libcpp-httplib-dev libcli11-dev
  bubblewrap ripgrep libre2-dev
  python3 python3-venv python3-dev python3-jsonschema
  clang libclang-rt-dev clang-format clang-tidy
)
# Debian's Chromium, headless, loads the page that `cuda-agent bench` writes in its test (Ubuntu
# ships Chromium as a snap only; there the test reports itself skipped).
if [ -r /etc/os-release ] && [ "$(. /etc/os-release && echo "${ID:-}")" = debian ]; then
  packages+=(chromium)
fi
# Slurm's controller, node daemon and commands, for the test of workers started as Slurm jobs
# only (a test cluster of one host); a workstation does not want the daemons' services.
if [ "${CUDA_AGENT_SETUP_SLURM:-0}" = "1" ]; then
  packages+=(slurmctld slurmd slurm-client)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${CUDA_AGENT_SKIP_PYTHON:-0}" = "1" ]; then exit 0; fi

if [ "$(id -u)" -eq 0 ]; then default_venv=/opt/cuda-agent/venv; else default_venv="$HOME/.local/share/cuda-agent/venv"; fi
venv="${CUDA_AGENT_VENV:-$default_venv}"
torch_version="${CUDA_AGENT_TORCH_VERSION:-2.11.0}"
if [ ! -x "$venv/bin/python3" ]; then
  echo "setup: creating the Python environment in $venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
fi
if ! "$venv/bin/python3" -c "import torch, numpy, jsonschema, pytest" 2>/dev/null; then
  echo "setup: installing torch==$torch_version, numpy, jsonschema and pytest into $venv (a few GB, a few minutes)"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off \
    "torch==$torch_version" numpy jsonschema pytest
fi
# The Python package's one dependency, and what builds its wheel without reaching PyPI.
if ! "$venv/bin/python3" -c "import httpx, wheel" 2>/dev/null; then
  echo "setup: installing httpx and wheel into $venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off httpx wheel
fi
# The trainers' base classes the package's adapters are tested against: their packages
# without their (heavy) dependencies, and the few modules their imports need.
if ! "$venv/bin/python3" -c "import skyrl_gym.envs.base_text_env" 2>/dev/null; then
  echo "setup: installing skyrl-gym (without its dependencies) into $venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off --no-deps \
    skyrl-gym pandas python-dateutil six pytz tzdata requests urllib3 charset-normalizer idna certifi
fi
# OpenEnv's Environment, its FastAPI server and its WebSocket client, without Gradio, the
# Hugging Face Hub and OpenAI: its package imports FastMCP (and so MCP) at import time, which
# need the few modules listed here. FastMCP 4 needs MCP 2, which OpenEnv 0.3.0 predates.
if ! "$venv/bin/python3" -c "import openenv.core.env_server, openenv.core.env_client" 2>/dev/null; then
  echo "setup: installing openenv-core (without its dependencies) into $venv"
  # Without their dependencies: the two whose own (Gradio, the Hugging Face Hub, OpenAI,
  # FastMCP 4 on MCP 2) the adapter never imports; with theirs: what their imports need.
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off --no-deps \
    openenv-core==0.3.0 fastmcp-slim==3.4.11
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off \
    fastapi uvicorn websockets "mcp<2" pydantic-settings python-dotenv rich py-key-value-aio beartype cachetools \
    sse-starlette exceptiongroup httpx-sse opentelemetry-api platformdirs requests
fi
# verl's agent loop (AgentLoopBase) without vLLM, SGLang, wandb and the rest: its module imports
# Transformers, Datasets (so pyarrow), Hydra and TensorDict at import time, and Ray and torch from
# above. About 25 s and 400 MB.
if ! "$venv/bin/python3" -c "import verl.experimental.agent_loop" 2>/dev/null; then
  echo "setup: installing verl (without its dependencies) into $venv"
  # Without their dependencies: verl (its own are the whole training stack: accelerate, peft,
  # wandb, torchdata, ...) and TensorDict (which names torch); with theirs: what the agent
  # loop's imports need, in verl's ranges.
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off --no-deps \
    verl==0.9.1 tensordict==0.10.0 cloudpickle orjson "pyvers<0.2"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off \
    transformers==5.10.4 datasets==5.2.0 hydra-core==1.3.8 pillow codetiming
fi
# A single-node Ray cluster with its dashboard (the Jobs REST API) for the test of workers
# started as Ray jobs (cuda-agent serve --ray-address). About 15 s and 250 MB.
ray_version="${CUDA_AGENT_RAY_VERSION:-2.60.0}"
if ! "$venv/bin/python3" -c "import ray.dashboard.modules.job.sdk, aiohttp" 2>/dev/null; then
  echo "setup: installing ray[default]==$ray_version into $venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --progress-bar off "ray[default]==$ray_version"
fi
chmod -R a+rX "$venv"
echo "setup: Python with torch $("$venv/bin/python3" -c 'import torch; print(torch.__version__)') at $venv/bin/python3"
