# Runs the stream fuzzer for a bounded time, seeded with the recorded LLM exchanges.
#
#   cmake -DFUZZER=<executable> -DWORK_DIR=<dir> -DSEEDS=<dir;dir...> -DSECONDS=30 -P run_fuzzer.cmake
#
# With -DFUZZ_SOURCE_DIR=<tests/llm/fuzz> -DINCLUDE_DIR=<include> -DCLANGXX=<clang++>
# -DGENERATOR=<generator> it first builds the fuzzer with clang in <WORK_DIR>/build, for
# projects compiled with another compiler. Without libFuzzer it reports the test skipped.
# New corpus entries go to <WORK_DIR>/corpus, crashing inputs to <WORK_DIR>/artifacts.
if(FUZZ_SOURCE_DIR)
  set(build_dir "${WORK_DIR}/build")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${FUZZ_SOURCE_DIR}" -B "${build_dir}" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CLANGXX}" "-DCUDA_AGENT_INCLUDE_DIR=${INCLUDE_DIR}" "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}"
      -DCMAKE_BUILD_TYPE=RelWithDebInfo
    RESULT_VARIABLE configured OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT configured EQUAL 0)
    if(output MATCHES "libFuzzer is not available")
      message(STATUS "[cuda-agent-test-skipped] libFuzzer is not available to ${CLANGXX} (Debian: libclang-rt-dev)")
      return()
    endif()
    message(FATAL_ERROR "configuring the fuzzer with ${CLANGXX} failed:\n${output}")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${build_dir}" RESULT_VARIABLE built)
  if(NOT built EQUAL 0)
    message(FATAL_ERROR "building the fuzzer with ${CLANGXX} failed")
  endif()
  set(FUZZER "${build_dir}/cuda_agent_fuzz_llm_stream")
endif()

file(REMOVE_RECURSE "${WORK_DIR}/corpus")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${WORK_DIR}/artifacts")
execute_process(
  COMMAND "${FUZZER}" "-max_total_time=${SECONDS}" -timeout=10 -rss_limit_mb=2048 -max_len=4096
    -print_final_stats=1 "-artifact_prefix=${WORK_DIR}/artifacts/" "${WORK_DIR}/corpus" ${SEEDS}
  RESULT_VARIABLE fuzzed)
if(NOT fuzzed EQUAL 0)
  message(FATAL_ERROR "the fuzzer found a failing input (exit ${fuzzed}); it is in ${WORK_DIR}/artifacts")
endif()
