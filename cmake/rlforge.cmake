# Helpers shared by every folder's CMakeLists.

# rlforge_library(NAME SOURCES... DEPS ...): a static library with our warnings.
function(rlforge_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE rlforge_warnings)
endfunction()

# rlforge_test(NAME SOURCES... DEPS ...): a gtest binary registered with ctest.
function(rlforge_test name)
  if(NOT RLFORGE_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SOURCES} ${CMAKE_SOURCE_DIR}/cmake/test_signals.cc)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main rlforge_warnings)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST
                       PROPERTIES LABELS ${ARG_LABELS})
endfunction()
include(cmake/proto.cmake)
include(cmake/torch.cmake)
configure_file(${CMAKE_SOURCE_DIR}/cmake/paths.h.in ${CMAKE_BINARY_DIR}/rlforge_paths.h @ONLY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/paths.h.in ${CMAKE_BINARY_DIR}/rlforge_paths.h @ONLY)
