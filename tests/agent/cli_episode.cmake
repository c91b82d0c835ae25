# Runs the cuda-agent program's demo and optimize subcommands end to end, as ctest tests.
#   cmake -DPROGRAM=<cuda-agent> -DMODE=demo-cpu|replay-cpu|demo-cuda -DWORK=<dir> -P cli_episode.cmake
# demo-cpu:   the bundled episode on the CPU: the recorded story must happen (exit 0), with
#             a correct candidate (reward 1) and the statement of what needs a GPU.
# replay-cpu: optimize replays the trajectory demo-cpu recorded and must reach the same
#             best candidate (the same files) and the same reward.
# demo-cuda:  the bundled episode on the GPU must end with reward 3 (skipped without a GPU).
function(run_program output_variable)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  message("${output}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "exit status ${status}:\n${errors}")
  endif()
  set(${output_variable} "${output}" PARENT_SCOPE)
endfunction()

function(expect output text)
  string(FIND "${output}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected '${text}' in the output")
  endif()
endfunction()

if(MODE STREQUAL "demo-cpu")
  file(REMOVE_RECURSE "${WORK}/demo")
  run_program(output "${PROGRAM}" demo --device cpu --out "${WORK}/demo")
  expect("${output}" "best       reward 1 (correct)")
  expect("${output}" "replay     every tool call succeeded or failed as recorded")
  expect("${output}" "needs GPU  timing against eager PyTorch and torch.compile")
  file(READ "${WORK}/demo/trajectory.jsonl" trajectory)
  expect("${trajectory}" "was not declared in this scope")        # the real compile error
  expect("${trajectory}" "REJECTED (value_mismatch)")             # the real verification failure
  foreach(file report.md report.json best/model_new.py best/kernels/gemm_sum.cpp)
    if(NOT EXISTS "${WORK}/demo/${file}")
      message(FATAL_ERROR "the demo did not write ${file}")
    endif()
  endforeach()
elseif(MODE STREQUAL "replay-cpu")
  file(REMOVE_RECURSE "${WORK}/replay")
  run_program(output "${PROGRAM}" optimize "${WORK}/demo/task/level2/14_Gemm_Divide_Sum_Scaling.py"
              --llm "replay:${WORK}/demo/trajectory.jsonl" --device cpu --out "${WORK}/replay")
  expect("${output}" "best       reward 1 (correct), scored after turn 4")
  foreach(file model_new.py kernels/gemm_sum.cpp kernels/binding.cpp kernels/gemm_sum.h)
    file(READ "${WORK}/demo/best/${file}" recorded)
    file(READ "${WORK}/replay/best/${file}" replayed)
    if(NOT recorded STREQUAL replayed)
      message(FATAL_ERROR "the replayed episode's best ${file} differs from the recorded one")
    endif()
  endforeach()
elseif(MODE STREQUAL "demo-cuda")
  if(NOT EXISTS "/dev/nvidia0")
    message("SKIPPED: no NVIDIA GPU (/dev/nvidia0) on this machine; the CUDA demo needs one")
    return()
  endif()
  file(REMOVE_RECURSE "${WORK}/demo-cuda")
  run_program(output "${PROGRAM}" demo --device cuda --out "${WORK}/demo-cuda")
  expect("${output}" "best       reward 3 (")
  expect("${output}" "replay     every tool call succeeded or failed as recorded")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
