// fp16's dynamic loss scaling (src/parallel/loss_scaler.hpp), on its own: PyTorch's GradScaler
// rule, the copy in backend memory the loss reads, the skip count, and a checkpoint round trip.
#include <catch2/catch.hpp>

#include <limits>

#include "src/cpu/cpu_backend.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/loss_scaler.hpp"

using squall::parallel::LossScaler;
using squall::parallel::LossScaling;

TEST_CASE("the loss scale halves on a skipped step and doubles after growth_interval good ones", "[loss-scaler]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  auto stream = backend->create_stream();
  LossScaling o;
  o.dynamic = true;
  o.initial = 1024.0f;
  o.growth_interval = 3;
  LossScaler s(*backend, *stream, o);
  REQUIRE(s.device_scale() != nullptr);
  CHECK(*s.device_scale() == 1024.0f);  // CPU backend memory: the host may read it
  s.end_step(false, *stream);
  s.end_step(false, *stream);
  CHECK(s.scale() == 1024.0f);
  s.end_step(false, *stream);  // the third good step in a row
  CHECK(s.scale() == 2048.0f);
  CHECK(*s.device_scale() == 2048.0f);
  s.end_step(false, *stream);
  s.end_step(true, *stream);  // an overflow: halve, and the good run starts again
  CHECK(s.scale() == 1024.0f);
  CHECK(*s.device_scale() == 1024.0f);
  CHECK(s.skipped_steps() == 1);
  s.end_step(false, *stream);
  s.end_step(false, *stream);
  CHECK(s.scale() == 1024.0f);

  // A checkpoint carries the scale, the good run and the skips.
  squall::checkpoint::CheckpointData saved;
  s.save(saved);
  LossScaler back(*backend, *stream, o);
  back.restore(saved, *stream);
  CHECK(back.scale() == 1024.0f);
  CHECK(*back.device_scale() == 1024.0f);
  CHECK(back.skipped_steps() == 1);
  back.end_step(false, *stream);  // the restored good run had 2 steps: this is the third
  CHECK(back.scale() == 2048.0f);
}

TEST_CASE("the loss scale stays finite and positive at its limits", "[loss-scaler]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  auto stream = backend->create_stream();
  LossScaling o;
  o.dynamic = true;
  o.initial = std::numeric_limits<float>::max();
  o.growth_interval = 1;
  LossScaler big(*backend, *stream, o);
  big.end_step(false, *stream);
  CHECK(big.scale() == std::numeric_limits<float>::max());
  o.initial = std::numeric_limits<float>::min();
  LossScaler small(*backend, *stream, o);
  small.end_step(true, *stream);
  CHECK(small.scale() == std::numeric_limits<float>::min());
  o.initial = 0.0f;
  CHECK_THROWS_AS(LossScaler(*backend, *stream, o), squall::UsageError);
}

TEST_CASE("without dynamic scaling the scale is 1 and only skips are counted", "[loss-scaler]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  auto stream = backend->create_stream();
  LossScaler s(*backend, *stream, LossScaling{});
  CHECK(s.device_scale() == nullptr);
  s.end_step(true, *stream);
  s.end_step(false, *stream);
  CHECK(s.scale() == 1.0f);
  CHECK(s.skipped_steps() == 1);
}
