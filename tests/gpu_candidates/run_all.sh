#!/usr/bin/env bash
# Evaluates every hand-written GPU candidate (tests/gpu_candidates/<level>/<task>/correct and the
# broken variants listed in tests/gpu_candidates/manifest.tsv) with `cuda-agent eval` on a CUDA
# machine and prints one table:
#
#   task | variant | verdict (accepted, or rejection reason: message)
#
# Exit status: 0 when every correct candidate is accepted and every broken variant marked
# `required` is rejected by the verifier; 1 otherwise (a correct one rejected, a required broken
# one accepted, a missing result, or a broken one rejected before verification ran:
# compile_error, load_error, interface_mismatch, state_dict_mismatch, harness_error). A broken
# variant rejected for a reason other than the manifest expects, or a `likely` one (race,
# out-of-range write) that was accepted, is reported as a warning.
#
# Usage: tests/gpu_candidates/run_all.sh [-j JOBS] [-J HEAVY_JOBS] [-l] [-o OUT_DIR] [-t SECONDS] CUDA_AGENT [FILTER...]
#   CUDA_AGENT   the cuda-agent binary (its `eval` subcommand is used)
#   FILTER       only tasks whose "level/task" contains one of these strings
#   -j JOBS      evaluations of light tasks run at once (default 4): their builds overlap on the CPUs
#   -J HEAVY     evaluations of heavy tasks (inputs of 0.8 to 2.1 G floats, up to ~30 GiB of GPU
#                memory each) run at once, next to the light ones (default 1)
#   -l           light tasks only (skips the five heavy level-1 tasks)
#   -o OUT_DIR   where the JSON results and logs go (default: a new directory under /tmp)
#   -t SECONDS   time limit per evaluation (default 900); heavy tasks also get
#                `--timeout SECONDS-120` for their verification (the eval default is 300 s)
# Extra arguments for every `cuda-agent eval` call can be given in CUDA_AGENT_EVAL_ARGS
# (split on spaces), e.g. CUDA_AGENT_EVAL_ARGS="--workers 2".
#
# Correct and broken variants of a task share most of their sources, so the compile driver's
# object cache and precompiled header serve both; the heavy tasks start first so that the long
# pole overlaps the many light evaluations.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
jobs=4
heavy_jobs=1
out=""
time_limit=900
light_only=0

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while getopts "j:J:lo:t:h" option; do
  case "$option" in
    l) light_only=1 ;;
    j) jobs="$OPTARG" ;;
    J) heavy_jobs="$OPTARG" ;;
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
[ -n "$out" ] || out="$(mktemp -d /tmp/gpu_candidates.XXXXXX)"
mkdir -p "$out"

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
heavy=()
queued=" "
while IFS=$'\t' read -r task variant weight _; do
  [[ -z "$task" || "$task" == \#* ]] && continue
  selected "$task" || continue
  [ "$light_only" = 1 ] && [ "$weight" = heavy ] && continue
  for candidate in correct "$variant"; do
    [[ "$queued" == *" $task/$candidate "* ]] && continue
    queued+="$task/$candidate "
    if [ ! -f "$here/$task/$candidate/model_new.py" ]; then
      echo "run_all.sh: $here/$task/$candidate has no model_new.py" >&2
      exit 2
    fi
    if [ "$weight" = heavy ]; then heavy+=("$task $candidate heavy"); else light+=("$task $candidate light"); fi
  done
done < "$here/manifest.tsv"
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
  [ "$weight" = heavy ] && extra=(--timeout $((TIME_LIMIT > 180 ? TIME_LIMIT - 120 : 60)))
  # shellcheck disable=SC2086  # CUDA_AGENT_EVAL_ARGS is a list of flags
  timeout --kill-after=30 "$TIME_LIMIT" "$BINARY" eval "$task_file" "$HERE/$task/$variant" --device cuda \
    --json "$result.json" "${extra[@]}" ${CUDA_AGENT_EVAL_ARGS:-} > "$result.log" 2>&1 || rc=$?
  echo "$rc" > "$result.rc"
  echo $((SECONDS - started)) > "$result.seconds"
  printf '  done %-55s %-7s rc=%s %ss\n' "$task" "$variant" "$rc" "$((SECONDS - started))"
}
export -f evaluate
export ROOT="$root" HERE="$here" OUT="$out" BINARY="$binary" TIME_LIMIT="$time_limit"

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

"$python" "$here/summarize_results.py" "$here/manifest.tsv" "$out"
