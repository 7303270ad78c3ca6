# ThreadSanitizer copies of squall's libraries, for the `tsan` tests (tests/tsan/).
#
# SQUALL_TSAN_TESTS (AUTO | ON | OFF, root CMakeLists.txt) decides; this file sets
#   SQUALL_TSAN_ENABLED  ON when the copies are built
#   SQUALL_TSAN_WHY_NOT  why not, otherwise (the skipped CTest entries print it)
# and defines squall_tsan_clone(), which declares <target>_tsan from an existing library.
#
# The copies are second targets in the same build, not a sub-build: `make test` compiles them
# beside everything else (one configure, one dependency graph, the same ccache), and only the
# libraries the tsan tests link are copied. CUDA code is never instrumented: the copies are
# the CPU backend only, as if squall were configured with -DSQUALL_CUDA=OFF.

set(SQUALL_TSAN_ENABLED OFF)
set(SQUALL_TSAN_WHY_NOT "")
if(SQUALL_TSAN_TESTS STREQUAL "OFF")
  set(SQUALL_TSAN_WHY_NOT "squall was configured with -DSQUALL_TSAN_TESTS=OFF")
  message(STATUS "squall: tsan tests skipped: ${SQUALL_TSAN_WHY_NOT}")
  return()
endif()

# Does a threaded program compile and link with -fsanitize=thread? (GCC needs libtsan, which
# Debian's libgcc-12-dev pulls in; Clang ships its own runtime.)
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)
cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=thread")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=thread")
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
#include <thread>
int main() { int x = 0; std::thread t([&] { x = 1; }); t.join(); return x - 1; }
]] SQUALL_TSAN_LINKS)
cmake_pop_check_state()
if(NOT SQUALL_TSAN_LINKS)
  set(SQUALL_TSAN_WHY_NOT "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} cannot build with -fsanitize=thread (no ThreadSanitizer runtime?)")
  if(SQUALL_TSAN_TESTS STREQUAL "ON")
    message(FATAL_ERROR "SQUALL_TSAN_TESTS=ON, but ${SQUALL_TSAN_WHY_NOT}")
  endif()
  message(STATUS "squall: tsan tests skipped: ${SQUALL_TSAN_WHY_NOT}")
  return()
endif()
set(SQUALL_TSAN_ENABLED ON)
message(STATUS "squall: tsan tests built (ThreadSanitizer copies of the CPU-backend libraries)")

# What every instrumented target compiles and links with. -O1: several times faster than
# -O0 under tsan, with stacks that still follow the source; -g for the reports' lines.
# OpenMP: libgomp is not instrumented, so tsan sees neither its barriers nor its hand-offs,
# and would report every parallel loop's output as racing with whoever reads it next. The
# copies are therefore compiled with -fopenmp-simd (simd pragmas as in the real build,
# `omp parallel` ignored: squall's own loops run on the calling thread) and linked against
# the OpenMP runtime only for its API (omp_get_max_threads, ...). The threads tsan checks are
# the ones squall starts itself: stream workers, learner threads, loader workers, the stall
# watchdog.
add_library(squall_tsan_flags INTERFACE)
target_compile_options(squall_tsan_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread;-O1;-g;-fno-omit-frame-pointer;-fopenmp-simd;-Wno-unknown-pragmas>)
target_link_options(squall_tsan_flags INTERFACE -fsanitize=thread)

find_package(OpenMP REQUIRED COMPONENTS CXX)
add_library(squall_tsan_openmp_runtime INTERFACE)
target_link_libraries(squall_tsan_openmp_runtime INTERFACE ${OpenMP_CXX_LIBRARIES})

# squall_tsan_clone(<library> [DROP <target>...] [EXTRA_SOURCES <file>...] [LEAVE_SOURCES <name>...])
# Declares <library>_tsan: the same sources, include directories, definitions and options,
# compiled with squall_tsan_flags, linking the _tsan copy of every library in
# SQUALL_TSAN_LIBRARIES (clone those first, or at least before generation: names are
# resolved then) and the serial OpenMP stand-in for OpenMP::OpenMP_CXX. DROP leaves targets
# out of the link (the CUDA backend); EXTRA_SOURCES adds files (cuda_absent.cpp in its place);
# LEAVE_SOURCES leaves out the sources of those file names (mpi/nccl.cpp).
set(SQUALL_TSAN_LIBRARIES squall_base squall_mpi squall_nn squall_optim squall_data squall_cpu
                          squall_formats squall_input squall_checkpoint squall_parallel
                          squall_test_support squall_mpi_test_main)

function(_squall_tsan_map_links out)
  set(mapped)
  foreach(item IN LISTS ARGN)
    if(item MATCHES "^\\$<LINK_ONLY:(.+)>$")
      set(name "${CMAKE_MATCH_1}")
      set(wrap ON)
    else()
      set(name "${item}")
      set(wrap OFF)
    endif()
    if(name IN_LIST _squall_tsan_drop)
      continue()
    elseif(name IN_LIST SQUALL_TSAN_LIBRARIES)
      set(name ${name}_tsan)
    elseif(name STREQUAL "OpenMP::OpenMP_CXX")
      set(name squall_tsan_openmp_runtime)
    endif()
    if(wrap)
      list(APPEND mapped "$<LINK_ONLY:${name}>")
    else()
      list(APPEND mapped "${name}")
    endif()
  endforeach()
  set(${out} "${mapped}" PARENT_SCOPE)
endfunction()

function(squall_tsan_clone target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DROP;EXTRA_SOURCES;LEAVE_SOURCES")
  set(_squall_tsan_drop ${arg_DROP})
  set(clone ${target}_tsan)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    add_library(${clone} INTERFACE)
  elseif(type STREQUAL "STATIC_LIBRARY")
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    set(absolute)
    foreach(source IN LISTS sources)
      cmake_path(GET source FILENAME name)
      if(name IN_LIST arg_LEAVE_SOURCES)
        continue()
      endif()
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${dir}")
      list(APPEND absolute "${source}")
    endforeach()
    add_library(${clone} STATIC ${absolute} ${arg_EXTRA_SOURCES})
    # Overwritten, not appended: the original's already hold the directory-wide options.
    foreach(prop INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS)
      get_target_property(value ${target} ${prop})
      if(value)
        set_property(TARGET ${clone} PROPERTY ${prop} "${value}")
      else()
        set_property(TARGET ${clone} PROPERTY ${prop} "")
      endif()
    endforeach()
    # Batched as the original is (SQUALL_UNITY_BUILD): the copies are the other half of the
    # libraries' compile time.
    get_target_property(unity ${target} UNITY_BUILD)
    set_property(TARGET ${clone} PROPERTY UNITY_BUILD "${unity}")
    get_target_property(links ${target} LINK_LIBRARIES)
    if(NOT links)
      set(links)
    endif()
    _squall_tsan_map_links(links ${links})
    set_property(TARGET ${clone} PROPERTY LINK_LIBRARIES ${links} squall_tsan_flags)
  else()
    message(FATAL_ERROR "squall_tsan_clone: ${target} is a ${type}, not a static or interface library")
  endif()
  foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_COMPILE_DEFINITIONS INTERFACE_COMPILE_OPTIONS)
    get_target_property(value ${target} ${prop})
    if(value)
      set_property(TARGET ${clone} PROPERTY ${prop} "${value}")
    endif()
  endforeach()
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT links)
    set(links)
  endif()
  _squall_tsan_map_links(links ${links})
  set_property(TARGET ${clone} PROPERTY INTERFACE_LINK_LIBRARIES ${links} squall_tsan_flags)
endfunction()
