#pragma once
// The config's enumerated keys: one enum per key and one table of its names
// (src/core/enum_table.hpp). The field table in config.cpp reads and writes these keys through
// their tables, so the names a file may use, the list an error gives, "did you mean" and
// to_toml are the same list; code that acts on a key switches on the enum.
//
// Keys whose values a lower layer acts on use that layer's enum and table, so that it needs
// no src/train header: data.sampling (input::Sampling), data.normalization
// (data::NormalizationKind), data.pad (data::PadMode), run.backend and run.cpu_streams (nn::BackendKind,
// nn::CpuStreams), parallel.device_allreduce (mpi::AllreduceKind), parallel.cross_node
// (mpi::CrossAlgorithm), parallel.algorithm (parallel::Algorithm), optimizer.name,
// schedule.kind and schedule.milestone_unit (src/optim/options.hpp).
#include "io/input/sampler.hpp"
#include "mpi/allreduce_kind.hpp"
#include "mpi/cross_algorithm.hpp"
#include "mpi/halo_kind.hpp"
#include "src/core/enum_table.hpp"
#include "src/data/normalization_kind.hpp"
#include "src/data/pad_mode.hpp"
#include "src/nn/backend_kind.hpp"
#include "src/nn/model_padding.hpp"
#include "src/optim/options.hpp"
#include "src/parallel/algorithm.hpp"

namespace squall::config {

// train.precision: the activations' type.
enum class Precision { fp32, bf16, fp16 };
inline constexpr auto k_precisions =
    enum_table<Precision>({{"fp32", Precision::fp32}, {"bf16", Precision::bf16}, {"fp16", Precision::fp16}});

// train.cpu_precision: how the CPU backend computes bf16/fp16 activations (docs/training.md,
// "Mixed precision"). auto_: oneDNN's bf16 primitives where the CPU has bf16 arithmetic
// (AVX512-BF16, AMX), refused elsewhere; native: the same, named; reference: the emulation
// (f32 arithmetic rounded to the 16-bit type), on any CPU.
enum class CpuPrecision { auto_, native, reference };
inline constexpr auto k_cpu_precisions = enum_table<CpuPrecision>(
    {{"auto", CpuPrecision::auto_}, {"native", CpuPrecision::native}, {"reference", CpuPrecision::reference}});

// model.layout: the activations' memory order, or auto_ (resolve_layout in learners.hpp).
enum class LayoutChoice { auto_, nchw, nhwc, blocked };
inline constexpr auto k_layout_choices =
    enum_table<LayoutChoice>({{"auto", LayoutChoice::auto_},
                              {"nchw", LayoutChoice::nchw},
                              {"nhwc", LayoutChoice::nhwc},
                              {"blocked", LayoutChoice::blocked}});

// train.nonfinite: what a step with a NaN or infinite loss or gradient does.
enum class NonFinitePolicy { stop, skip };
inline constexpr auto k_nonfinite_policies =
    enum_table<NonFinitePolicy>({{"stop", NonFinitePolicy::stop}, {"skip", NonFinitePolicy::skip}});

// parallel.comm_precision: the type of gradient sums across ranks.
enum class CommPrecision { fp32, bf16 };
inline constexpr auto k_comm_precisions =
    enum_table<CommPrecision>({{"fp32", CommPrecision::fp32}, {"bf16", CommPrecision::bf16}});

// train.target.metric: the held-out metric a run aims for (none: no target).
enum class TargetMetric { none, accuracy, miou };
inline constexpr auto k_target_metrics = enum_table<TargetMetric>(
    {{"none", TargetMetric::none}, {"accuracy", TargetMetric::accuracy}, {"miou", TargetMetric::miou}});

// elastic.batch: what a resume on another shape keeps (docs/training.md, "Elastic resume"):
// the global batch (the batch per learner changes with the number of learners) or the batch per
// learner (the global batch changes, and the learning rate with it by the linear rule).
enum class ElasticBatch { global, learner };
inline constexpr auto k_elastic_batches =
    enum_table<ElasticBatch>({{"global", ElasticBatch::global}, {"learner", ElasticBatch::learner}});

}  // namespace squall::config
