# Configures the library alone (no tests, no examples), installs it into INSTALL_DIR.
file(REMOVE_RECURSE "${BUILD_DIR}" "${INSTALL_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BUILD_DIR}" -G "${GENERATOR}"
    -DCUDA_AGENT_BUILD_TESTS=OFF -DCUDA_AGENT_BUILD_EXAMPLES=OFF -DCUDA_AGENT_INSTALL=ON
    "-DCMAKE_INSTALL_PREFIX=${INSTALL_DIR}" ${FORWARDED}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring the library failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "installing the library failed")
endif()
foreach(expected
    "share/cmake/cuda_agent/cuda_agent-config.cmake"
    "share/cmake/cuda_agent/cuda_agent-config-version.cmake"
    "share/cmake/cuda_agent/FindCppHttplib.cmake"
    "include/cuda_agent/cuda_agent.hpp"
    "include/cuda_agent/version.hpp"
    "include/cuda_agent/detail/embedded_resources.hpp")
  if(NOT EXISTS "${INSTALL_DIR}/${expected}")
    message(FATAL_ERROR "the install tree lacks ${expected}")
  endif()
endforeach()
# Every core header of the source tree, in each subsystem folder and its detail/, is installed.
file(GLOB_RECURSE core_headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/cuda_agent/*.hpp")
list(FILTER core_headers EXCLUDE REGEX "^cuda_agent/(http|cuda|torch|server)/")
foreach(header IN LISTS core_headers)
  if(NOT EXISTS "${INSTALL_DIR}/include/${header}")
    message(FATAL_ERROR "the install tree lacks include/${header}")
  endif()
endforeach()
