#!/usr/bin/env bash
# On the GPU machine (H200, as root, after the setup script has installed bubblewrap), from the
# repository root with cuda-agent built:
#
#   tests/gpu_candidates/run_all.sh -o /tmp/gpu_candidates build/examples/cuda-agent/cuda-agent
#
# evaluates the 23 correct candidates and the 25 broken variants (48 evaluations: light tasks 6
# at a time, the five heavy level-1 tasks up to 3 at a time next to them within a GPU memory
# budget, all through one compile cache), prints the table and writes it to the output directory: summary.md (task, level,
# correct: accepted?, broken variant, bug kind, broken: rejected with which reason?), summary.tsv
# (the same for scripts, with the rejection messages), summary.txt (the printed report), and per
# evaluation <level>/<task>.<variant>.{json,log,rc,seconds}. Expected: exit status 0 with
# "23/23 correct candidates accepted, 23/23 required broken variants rejected" in about 5 to 6
# minutes (estimated; the heavy tasks are the long pole).
#
# Exit status: 0 when every correct candidate is accepted and every broken variant marked
# `required` is rejected by the verifier; 1 otherwise (a correct one rejected, a required broken
# one accepted, a missing result, or a broken one rejected before verification ran:
# compile_error, load_error, interface_mismatch, state_dict_mismatch, harness_error); 2 when it
# cannot start (usage, no executable, no GPU, no bubblewrap). A broken variant rejected for a
# reason other than the manifest expects, or a `likely` one (race, out-of-range write) that was
# accepted, is reported as a warning.
#
# Usage: tests/gpu_candidates/run_all.sh [-j JOBS] [-J HEAVY_JOBS] [-M GIB] [-l] [-n] [-c CACHE_DIR]
#                                        [-o OUT_DIR] [-t SECONDS] CUDA_AGENT [FILTER...]
#   CUDA_AGENT   the cuda-agent binary (its `eval` subcommand is used)
#   FILTER       only tasks whose "level/task" contains one of these strings
#   -j JOBS      evaluations of light tasks run at once (default 6): builds and Python workers
#                overlap on the CPUs
#   -J HEAVY     evaluations of heavy tasks (inputs of 0.8 to 2.1 G floats) run at once at most,
#                next to the light ones (default 3)
#   -M GIB       GPU memory the heavy evaluations running at once may hold together (default 100
#                of the H200's 141; the light ones need well under 30). Each heavy task's peak is
#                estimated in the manifest (gpu_memory `heavy:GIB`: the reference keeps five
#                expected outputs, and both processes hold their inputs and outputs); a heavy
#                evaluation waits until its estimate fits, or runs alone when it exceeds the budget
#   -l           light tasks only (skips the five heavy level-1 tasks; about 2 minutes)
#   -n           no host checks (GPU device node, bubblewrap) before starting, e.g. for a stand-in
#                binary
#   -c DIR       the compile cache every evaluation shares (`eval --cache-dir`); default: the
#                compile driver's own default ($CUDA_AGENT_CACHE_DIR/compile, or
#                /var/cache/cuda-agent/compile as root), the same for every evaluation
#   -o OUT_DIR   where the summary, JSON results and logs go (default: a new directory under /tmp)
#   -t SECONDS   time limit per evaluation (default 900); heavy tasks also get
#                `--timeout SECONDS-120` for their verification (the eval default is 300 s)
# Extra arguments for every `cuda-agent eval` call can be given in CUDA_AGENT_EVAL_ARGS
# (split on spaces), e.g. CUDA_AGENT_EVAL_ARGS="--strict".
#
# Correct candidates are queued before the broken variants, so a broken variant's build finds
# the objects of the files it shares with its correct twin (binding.cpp, unchanged kernels) in
# the cache; the heavy tasks start first so that the long pole overlaps the light evaluations.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
jobs=6
heavy_jobs=3
memory_budget=100
out=""
cache=""
time_limit=900
light_only=0
host_checks=1

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while getopts "j:J:M:lnc:o:t:h" option; do
  case "$option" in
    l) light_only=1 ;;
    n) host_checks=0 ;;
    c) cache="$OPTARG" ;;
    j) jobs="$OPTARG" ;;
    J) heavy_jobs="$OPTARG" ;;
    M) memory_budget="$OPTARG" ;;
    o) out="$OPTARG" ;;
    t) time_limit="$OPTARG" ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
  usage >&2
  exit 2
fi
binary="$(realpath "$1")"
shift
filters=("$@")
if [ ! -x "$binary" ]; then
  echo "run_all.sh: '$binary' is not an executable cuda-agent binary" >&2
  exit 2
fi
python="$(command -v python3 || true)"
if [ -z "$python" ]; then
  echo "run_all.sh: python3 is needed to read the JSON results" >&2
  exit 2
fi
if [ "$host_checks" = 1 ]; then
  if [ ! -e /dev/nvidia0 ]; then
    echo "run_all.sh: no NVIDIA GPU here (/dev/nvidia0 is missing); the candidates are CUDA extensions" >&2
    exit 2
  fi
  # The budget assumes the GPU is this run's own: another process on it (a test suite, a
  # benchmark) leaves the heavy evaluations less, and out-of-memory errors would reject
  # correct candidates. Light evaluations need well under 30 GiB together.
  if command -v nvidia-smi > /dev/null; then
    free_gib="$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | awk 'NR==1 {print int($1 / 1024)}')"
    if [ -n "$free_gib" ] && [ $((free_gib - 30)) -lt "$memory_budget" ]; then
      fitting=$((free_gib > 30 ? free_gib - 30 : 0))
      echo "run_all.sh: warning: only $free_gib GiB of GPU memory are free (another process uses the GPU);" \
           "the heavy evaluations get $fitting GiB instead of $memory_budget" >&2
      memory_budget="$fitting"
    fi
  fi
  if [[ " ${CUDA_AGENT_EVAL_ARGS:-} " != *" --unconfined "* ]] && ! command -v bwrap > /dev/null; then
    echo "run_all.sh: bubblewrap (bwrap) is not on PATH: cuda-agent eval builds and runs candidates inside it." \
         "Install it (run the machine's setup script) or, for trusted code only," \
         "CUDA_AGENT_EVAL_ARGS=--unconfined" >&2
    exit 2
  fi
fi
[ -n "$out" ] || out="$(mktemp -d /tmp/gpu_candidates.XXXXXX)"
mkdir -p "$out"
out="$(realpath "$out")"
cache_args=()
if [ -n "$cache" ]; then
  mkdir -p "$cache"
  cache_args=(--cache-dir "$(realpath "$cache")")
fi

selected() {
  local task="$1"
  [ ${#filters[@]} -eq 0 ] && return 0
  local filter
  for filter in "${filters[@]}"; do
    [[ "$task" == *"$filter"* ]] && return 0
  done
  return 1
}

light=()
light_broken=()
heavy=()
heavy_broken=()
queued=" "
while IFS=$'\t' read -r task variant weight _; do
  [[ -z "$task" || "$task" == \#* ]] && continue
  selected "$task" || continue
  [ "$light_only" = 1 ] && [ "${weight%%:*}" = heavy ] && continue
  for candidate in correct "$variant"; do
    [[ "$queued" == *" $task/$candidate "* ]] && continue
    queued+="$task/$candidate "
    if [ ! -f "$here/$task/$candidate/model_new.py" ]; then
      echo "run_all.sh: $here/$task/$candidate has no model_new.py" >&2
      exit 2
    fi
    case "$weight/$candidate" in
      heavy*/correct) heavy+=("$task $candidate $weight") ;;
      heavy*/*) heavy_broken+=("$task $candidate $weight") ;;
      */correct) light+=("$task $candidate light") ;;
      *) light_broken+=("$task $candidate light") ;;
    esac
  done
done < "$here/manifest.tsv"
heavy+=("${heavy_broken[@]}")
light+=("${light_broken[@]}")
total=$((${#light[@]} + ${#heavy[@]}))
if [ "$total" -eq 0 ]; then
  echo "run_all.sh: no task matches ${filters[*]}" >&2
  exit 2
fi

# One evaluation: writes <out>/<level>/<task>.<variant>.{json,log,rc,seconds}.
evaluate() {
  local task="$1" variant="$2" weight="$3"
  local level="${task%%/*}" stem="${task#*/}"
  local task_file="$ROOT/tests/data/kernelbench/$level/$stem.py"
  local result="$OUT/$level/$stem.$variant"
  mkdir -p "$OUT/$level"
  rm -f "$result.json" "$result.rc"
  local started=$SECONDS rc=0
  local extra=()
  local gib=0
  if [ "${weight%%:*}" = heavy ]; then
    extra=(--timeout $((TIME_LIMIT > 180 ? TIME_LIMIT - 120 : 60)))
    [[ "$weight" == heavy:* ]] && gib="${weight#heavy:}"
    reserve_gpu_memory "$gib"
  fi
  # shellcheck disable=SC2086  # CUDA_AGENT_EVAL_ARGS is a list of flags
  timeout --kill-after=30 "$TIME_LIMIT" "$BINARY" eval "$task_file" "$HERE/$task/$variant" --device cuda \
    --json "$result.json" "${extra[@]}" $CACHE_ARGS ${CUDA_AGENT_EVAL_ARGS:-} > "$result.log" 2>&1 || rc=$?
  [ "$gib" -gt 0 ] && return_gpu_memory "$gib"
  echo "$rc" > "$result.rc"
  echo $((SECONDS - started)) > "$result.seconds"
  printf '  done %-55s %-7s rc=%s %ss%s\n' "$task" "$variant" "$rc" "$((SECONDS - started))" "$(verdict_line "$result.json")"
}
# The reason and the start of the message of a rejected evaluation, so that the progress lines
# alone tell what happened when the run is cut short before its summary.
verdict_line() {
  "$PYTHON" - "$1" <<'PY' 2>/dev/null || true
import json, sys
try:
    with open(sys.argv[1]) as stream:
        document = json.load(stream)
except (OSError, ValueError):
    print("  (no JSON result)", end="")
    sys.exit(0)
evaluation = document.get("evaluation", document)
rejection = document.get("rejection") or (evaluation.get("verification") or {}).get("rejection")
if rejection:
    message = " ".join(str(rejection.get("message", "")).split())
    print(f"  {rejection.get('reason')}: {message[:160]}", end="")
PY
}
# The GPU memory budget of the heavy evaluations: GiB in use, in a file guarded by flock.
reserve_gpu_memory() {
  local gib="$1" used
  while true; do
    {
      flock 9
      used="$(cat "$OUT/.gpu_memory_in_use")"
      if [ "$used" -eq 0 ] || [ $((used + gib)) -le "$MEMORY_BUDGET" ]; then
        echo $((used + gib)) > "$OUT/.gpu_memory_in_use"
        return 0
      fi
    } 9> "$OUT/.gpu_memory.lock"
    sleep 2
  done
}
return_gpu_memory() {
  {
    flock 9
    echo $(($(cat "$OUT/.gpu_memory_in_use") - $1)) > "$OUT/.gpu_memory_in_use"
  } 9> "$OUT/.gpu_memory.lock"
}
export -f evaluate verdict_line reserve_gpu_memory return_gpu_memory
export ROOT="$root" HERE="$here" OUT="$out" BINARY="$binary" TIME_LIMIT="$time_limit" CACHE_ARGS="${cache_args[*]}" \
  MEMORY_BUDGET="$memory_budget" PYTHON="$python"
echo 0 > "$out/.gpu_memory_in_use"

printf '%s\n' "${heavy[@]}" "${light[@]}" | sed '/^$/d' | cut -d' ' -f1,2 > "$out/evaluated.txt"
echo "Evaluating $total candidates (${#heavy[@]} heavy, ${#light[@]} light) with $binary; results in $out"
started=$SECONDS
if [ ${#heavy[@]} -gt 0 ]; then
  printf '%s\n' "${heavy[@]}" | xargs -P "$heavy_jobs" -L 1 bash -c 'evaluate "$0" "$1" "$2"' &
  heavy_pid=$!
fi
if [ ${#light[@]} -gt 0 ]; then
  printf '%s\n' "${light[@]}" | xargs -P "$jobs" -L 1 bash -c 'evaluate "$0" "$1" "$2"'
fi
[ -n "${heavy_pid:-}" ] && wait "$heavy_pid"
echo "All evaluations finished in $((SECONDS - started)) s"
echo

status=0
"$python" "$here/summarize_results.py" "$here/manifest.tsv" "$out" > "$out/summary.txt" || status=$?
echo "Wall time $((SECONDS - started)) s with -j $jobs -J $heavy_jobs -M $memory_budget; summary.md, summary.tsv and summary.txt in $out" \
  >> "$out/summary.txt"
cat "$out/summary.txt"
exit "$status"
