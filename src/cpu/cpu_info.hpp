#pragma once
#include <string>

namespace squall::cpu {

std::string dnn_library();   // "oneDNN 2.6.3 (cpu runtime: OMP)"

// The instruction set oneDNN's kernels use on this CPU ("AVX2", "AVX-512", "AVX512-BF16",
// "AMX", ...), as dnnl_get_effective_cpu_isa reports it (ONEDNN_MAX_CPU_ISA can lower it).
std::string dnn_isa();
// Whether that instruction set has bf16 arithmetic (AVX512-BF16 or AMX): oneDNN's bf16
// primitives then run in hardware (train.cpu_precision, docs/training.md).
bool dnn_has_bf16();
// How this CPU computes bf16 activations when train.cpu_precision is auto: "native" (oneDNN's
// bf16 convolution primitives, where dnn_has_bf16) or "reference" (f32 arithmetic rounded to
// bf16 after every operation: the only path without bf16 arithmetic, which training then asks
// for by train.cpu_precision = reference). docs/design.md, "Precision".
std::string dnn_bf16_path();
// The cap the environment puts on oneDNN's ISA (ONEDNN_MAX_CPU_ISA, or its older name
// DNNL_MAX_CPU_ISA, as oneDNN reads them); empty when none is set.
std::string dnn_isa_cap();

// The processor's model name from /proc/cpuinfo ("AMD EPYC 7B13"), or "cpu".
std::string cpu_model_name();

// Cores this process may really use: its affinity mask, capped by a cgroup CPU quota
// (containers and batch systems often show every host core but grant only a few).
// Running more OpenMP threads than this makes spinning barriers crawl.
int hardware_threads();

// The default compute threads of one rank when `ranks_on_host` ranks share this machine:
// when the launcher pinned the rank to some cores (its affinity mask is smaller than the
// machine), all of them; when every rank may run everywhere (no binding), an equal share, so
// that the ranks' OpenMP teams do not oversubscribe the cores (spinning barriers then crawl).
int default_threads(int ranks_on_host);

// The quota alone, rounded up; 0 when there is none. Exposed for tests.
int cgroup_cpu_limit(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace squall::cpu
