#!/bin/sh
# Crash and resume through the real CPU harness: `cuda-agent optimize` replays the episode
# the CPU demo recorded, is killed (SIGKILL) once the trajectory holds three model answers,
# resumes with --resume, and must reach the same best candidate as the recording.
#   cli_resume.sh <cuda-agent> <work directory holding demo/>
set -eu
program=$1
work=$2
out="$work/resume"
rm -rf "$out"
task="$work/demo/task/level2/14_Gemm_Divide_Sum_Scaling.py"
recording="$work/demo/trajectory.jsonl"

"$program" optimize "$task" --llm "replay:$recording" --device cpu --out "$out" --quiet > "$work/resume-first.log" 2>&1 &
pid=$!
answers=0
waited=0
while [ "$answers" -lt 3 ]; do
  if ! kill -0 "$pid" 2> /dev/null; then
    echo "the first run ended before it could be killed:"; cat "$work/resume-first.log"; exit 1
  fi
  sleep 0.2
  waited=$((waited + 1))
  if [ "$waited" -gt 3000 ]; then echo "no third answer after 600 s"; kill -9 "$pid"; exit 1; fi
  answers=$(grep -c '"role":"assistant"' "$out/trajectory.jsonl" 2> /dev/null || true)
done
kill -9 "$pid"
wait "$pid" 2> /dev/null || true
echo "killed the first run after $answers model answers"

"$program" optimize "$task" --llm "replay:$recording" --device cpu --out "$out" --resume --quiet > "$work/resume-second.log" 2>&1 || {
  echo "the resumed run failed:"; cat "$work/resume-second.log"; exit 1; }
cat "$work/resume-second.log"
grep -q "best       reward 1 (correct), scored after turn 4" "$work/resume-second.log"
for file in model_new.py kernels/gemm_sum.cpp kernels/binding.cpp kernels/gemm_sum.h; do
  cmp "$work/demo/best/$file" "$out/best/$file" || { echo "the resumed episode's best $file differs"; exit 1; }
done
# No finished tool call ran twice: each call id of the recording answered once.
duplicates=$(grep -o '"tool_call_id":"call_[0-9]*"' "$out/trajectory.jsonl" | sort | uniq -d)
if [ -n "$duplicates" ]; then echo "tool calls answered twice: $duplicates"; exit 1; fi
echo "resumed to the recorded result"
