# FindCppHttplib: cpp-httplib, as CppHttplib::CppHttplib.
#
# Debian and Ubuntu ship it as a compiled library whose pkg-config file carries the feature
# macros (OpenSSL, brotli) its header must see; elsewhere (vcpkg, Conan, a copy) it is one
# header, httplib.h, whose CMake package (httplib::httplib) is used when there is one.
# The targets are global, so that a project that adds cuda_agent with add_subdirectory sees them.
include(FindPackageHandleStandardArgs)

if(NOT TARGET CppHttplib::CppHttplib)
  find_package(httplib CONFIG QUIET)
  if(TARGET httplib::httplib)
    add_library(CppHttplib::CppHttplib INTERFACE IMPORTED GLOBAL)
    target_link_libraries(CppHttplib::CppHttplib INTERFACE httplib::httplib)
    set(CppHttplib_INCLUDE_DIR "(httplib::httplib)")
  else()
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(CPPHTTPLIB_PC QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
    endif()
    if(TARGET PkgConfig::CPPHTTPLIB_PC)
      add_library(CppHttplib::CppHttplib INTERFACE IMPORTED GLOBAL)
      target_link_libraries(CppHttplib::CppHttplib INTERFACE PkgConfig::CPPHTTPLIB_PC)
      set(CppHttplib_INCLUDE_DIR "${CPPHTTPLIB_PC_INCLUDEDIR}")
      if(NOT CppHttplib_INCLUDE_DIR)
        set(CppHttplib_INCLUDE_DIR "(pkg-config cpp-httplib)")
      endif()
    else()
      find_path(CppHttplib_INCLUDE_DIR httplib.h)
      if(CppHttplib_INCLUDE_DIR)
        add_library(CppHttplib::CppHttplib INTERFACE IMPORTED GLOBAL)
        target_include_directories(CppHttplib::CppHttplib INTERFACE "${CppHttplib_INCLUDE_DIR}")
      endif()
    endif()
  endif()
else()
  set(CppHttplib_INCLUDE_DIR "(already found)")
endif()

find_package_handle_standard_args(CppHttplib REQUIRED_VARS CppHttplib_INCLUDE_DIR)
