#pragma once
// What a test run computes on, said at its start (tests/support/catch_main.cpp and
// mpi_main.cpp), so that every test log names the path its numbers came from: oneDNN's ISA
// (and the cap ONEDNN_MAX_CPU_ISA puts on it) and how bf16 computes on this CPU, oneDNN's
// bf16 primitives ("native") or f32 arithmetic rounded to bf16 ("reference"; docs/design.md,
// "Precision"). And the rerun of the ISA-dependent cases at a lower ISA (the CTest entries
// "*:isa-avx2", tests/CMakeLists.txt), which has nothing to add where the cap changes nothing.
#include <string>

namespace squall::test {

// "oneDNN 2.6.3 (OMP), ISA AVX512-BF16, bf16 path native", with the cap and the ISA oneDNN
// would run without it when ONEDNN_MAX_CPU_ISA is set.
std::string cpu_path();

// The ISA oneDNN runs on this CPU without ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), asked in
// a child process: oneDNN reads its cap once, at its first query, so this process cannot ask
// twice, and a child forked after that first query would inherit its answer: the first call,
// which the test mains make first thing, asks; later calls return that answer. This
// process's own ISA when neither variable is set.
std::string uncapped_isa();

// Set by a rerun entry (SQUALL_TEST_ISA_RERUN=1, with ONEDNN_MAX_CPU_ISA): when the cap
// leaves oneDNN's ISA as it is on this CPU, the plain entries have already run this path, and
// the rerun is skipped: the reason, else empty.
std::string isa_rerun_skip_reason();

}  // namespace squall::test
