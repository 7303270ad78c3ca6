#pragma once
// Which backend a run asks for (run.backend) and how the CPU backend runs its streams
// (run.cpu_streams), with the one list of their names. backends::make_backend
// (src/backends/backends.hpp) takes them.
#include "src/core/enum_table.hpp"

namespace squall::nn {

// cpu; cuda; auto_: cuda when this build has it and a device is visible, else cpu.
enum class BackendKind { cpu, cuda, auto_ };
inline constexpr auto k_backend_kinds = enum_table<BackendKind>(
    {{"cpu", BackendKind::cpu}, {"cuda", BackendKind::cuda}, {"auto", BackendKind::auto_}});

// inline_: every call completes before it returns (the default, and the fast one); async: each
// stream a worker thread (src/cpu/cpu_stream.hpp), a checking mode.
enum class CpuStreams { inline_, async };
inline constexpr auto k_cpu_stream_modes =
    enum_table<CpuStreams>({{"inline", CpuStreams::inline_}, {"async", CpuStreams::async}});

}  // namespace squall::nn
