# Helpers that register tests with CTest labels and the launcher settings MPI needs.

# Environment every launched test gets: Open MPI refuses root without these two, and the
# suite starts more ranks than CI has cores. PMIx's munge security plugin waits 2.2 s in
# mpirun and in every rank when munge is installed (the Slurm tests need it) but no munged
# answers, as on a machine without systemd; every test runs on one machine, where PMIx's
# native security is all there is to check (tests/cluster/README.md, measured there).
# SQUALL_CHECK_SUMS=1: every sum of a multi-rank test is compared across ranks before it runs
# (mpi/sum_check.hpp), so that ranks that start different sums fail naming both instead of
# adding the wrong buffers together (the launch tests get it from tests/support/process.cpp).
set(SQUALL_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1"
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "OMPI_MCA_rmaps_base_oversubscribe=1"
    "OMPI_MCA_btl_vader_single_copy_mechanism=none"
    "PMIX_MCA_psec=native"
    "SQUALL_CHECK_SUMS=1")

# One CTest test per Catch2 test case, labelled; every case gets a timeout. A case that calls
# SQUALL_SKIP exits 77 (tests/support/skip.hpp) and is reported as skipped. (The launcher
# environment is set by tests/support/process.cpp: a list does not survive discovery.)
# Cases tagged [slow] train for real with every core: they run alone (RUN_SERIAL), because
# OpenMP teams of two tests sharing two cores spin at each other's barriers and crawl. The
# others run side by side, with OpenMP threads that sleep rather than spin at barriers, and so
# do cases tagged [slow][beside]: slow (kept out of the suite's repeat runs) but using about
# one core, which a machine to themselves would leave the other core of idle.
# A test name must not hold ';' (CMake's list separator cuts it, and the piece matches no test):
# -w NoTests makes a run that matches nothing fail instead of passing empty.
function(squall_add_catch_tests target label)
  catch_discover_tests(${target}
    TEST_SPEC "~[slow]"
    EXTRA_ARGS -w NoTests
    TEST_PREFIX "${label}:"
    PROPERTIES LABELS ${label} TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_WAIT_POLICY=passive")
  catch_discover_tests(${target}
    TEST_SPEC "[slow]~[beside]"
    EXTRA_ARGS -w NoTests
    TEST_PREFIX "${label}:"
    PROPERTIES LABELS ${label} TIMEOUT 600 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
  catch_discover_tests(${target}
    TEST_SPEC "[slow][beside]"
    EXTRA_ARGS -w NoTests
    TEST_PREFIX "${label}:"
    PROPERTIES LABELS ${label} TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_WAIT_POLICY=passive")
endfunction()

# squall_add_isa_rerun(<name> <target> <catch test spec> <label>): the cases of <spec> (those
# tagged [isa]: their path or oneDNN's choice of kernels depends on the CPU's instruction set)
# again as on a CPU with AVX2 at most (ONEDNN_MAX_CPU_ISA=AVX2), in one process, labelled <label>
# and isa-avx2: a machine with AVX-512 then runs both paths (docs/design.md, "Where it runs,
# and how it is tested"). Where the cap changes nothing (oneDNN runs AVX2 or less anyway), the
# plain entries already ran that path and the test main skips the entry, saying so
# (SQUALL_TEST_ISA_RERUN, tests/support/cpu_path.hpp). Cases that skip on a machine without
# some hardware ([needs-hardware]) belong in no such spec: one skip reports the whole entry as
# skipped.
function(squall_add_isa_rerun name target spec label)
  add_test(NAME ${name} COMMAND ${target} -w NoTests "${spec}")
  set_tests_properties(${name} PROPERTIES LABELS "${label};isa-avx2" TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ONEDNN_MAX_CPU_ISA=AVX2;SQUALL_TEST_ISA_RERUN=1;OMP_WAIT_POLICY=passive")
endfunction()

function(squall_mpi_test_properties name)
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${SQUALL_MPI_TEST_ENV}")
endfunction()

# squall_add_mpi_test(name np exe [catch args...]): runs exe on np ranks.
function(squall_add_mpi_test name np exe)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe ${exe} ${ARGN})
  squall_mpi_test_properties(${name})
endfunction()

# squall_test_headers(<target>...): the headers nearly every test file includes (Catch2's single
# header alone is 18k lines), parsed once per test binary as a precompiled header rather than
# once per file: a second or two of each test file's compile. SQUALL_TEST_PCH=OFF compiles
# every file on its own includes (to check that each names what it uses).
option(SQUALL_TEST_PCH "Precompile the headers the test files share" ON)
function(squall_test_headers)
  if(NOT SQUALL_TEST_PCH)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    target_precompile_headers(${target} PRIVATE <catch2/catch.hpp> <nlohmann/json.hpp> <filesystem> <functional>
                              <map> <memory> <string> <vector>)
  endforeach()
endfunction()
