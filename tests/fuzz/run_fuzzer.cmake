# Builds the fuzz targets with clang, or runs one of them for a bounded time.
#
#   cmake -DFUZZ_SOURCE_DIR=<tests/fuzz/targets> -DBUILD_DIR=<dir> -DINCLUDE_DIR=<include>
#         -DCLANGXX=<clang++> -DGENERATOR=<generator> [-DPREFIX_PATH=<paths>] -P run_fuzzer.cmake
#     configures and builds the targets with clang in BUILD_DIR, for projects compiled with
#     another compiler; without libFuzzer it reports the test skipped.
#   cmake -DFUZZER=<executable> -DWORK_DIR=<dir> -DSEEDS=<dir;dir...> -DSECONDS=30 [-DSEED=1] -P run_fuzzer.cmake
#     runs FUZZER for SECONDS, from the corpus SEEDS and with libFuzzer's random seed SEED
#     (0 or none: a random one); new corpus entries go to WORK_DIR/corpus, failing inputs to
#     WORK_DIR/artifacts, and a failing input is printed (escaped) so that a log shows it.
#     A FUZZER the build left out (no libFuzzer, or a target's library missing) is reported
#     skipped.
if(FUZZ_SOURCE_DIR)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${FUZZ_SOURCE_DIR}" -B "${BUILD_DIR}" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CLANGXX}" "-DCUDA_AGENT_INCLUDE_DIR=${INCLUDE_DIR}" "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}"
      -DCMAKE_BUILD_TYPE=RelWithDebInfo
    RESULT_VARIABLE configured OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT configured EQUAL 0)
    if(output MATCHES "libFuzzer is not available")
      message(STATUS "[cuda-agent-test-skipped] libFuzzer is not available to ${CLANGXX} (Debian: libclang-rt-dev)")
      return()
    endif()
    message(FATAL_ERROR "configuring the fuzz targets with ${CLANGXX} failed:\n${output}")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" RESULT_VARIABLE built)
  if(NOT built EQUAL 0)
    message(FATAL_ERROR "building the fuzz targets with ${CLANGXX} failed")
  endif()
  return()
endif()

if(NOT EXISTS "${FUZZER}")
  message(STATUS "[cuda-agent-test-skipped] ${FUZZER} was not built (no libFuzzer, or a library it needs is missing)")
  return()
endif()
file(REMOVE_RECURSE "${WORK_DIR}/corpus" "${WORK_DIR}/artifacts")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${WORK_DIR}/artifacts")
if(NOT SEED)
  set(SEED 0)
endif()
execute_process(
  COMMAND "${FUZZER}" "-max_total_time=${SECONDS}" "-seed=${SEED}" -timeout=10 -rss_limit_mb=2048 -max_len=4096
    -print_final_stats=1 "-artifact_prefix=${WORK_DIR}/artifacts/" "${WORK_DIR}/corpus" ${SEEDS}
  RESULT_VARIABLE fuzzed)
if(NOT fuzzed EQUAL 0)
  file(GLOB artifacts "${WORK_DIR}/artifacts/*")
  foreach(artifact IN LISTS artifacts)
    file(READ "${artifact}" bytes HEX)
    message(STATUS "failing input ${artifact} (hex): ${bytes}")
  endforeach()
  message(FATAL_ERROR "the fuzzer found a failing input (exit ${fuzzed}, seed ${SEED}); it is in ${WORK_DIR}/artifacts")
endif()
