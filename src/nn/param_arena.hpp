#pragma once
// The flat arenas that hold a model's parameters, their gradients and its non-learned state
// (docs/design.md, "Memory"). Every tensor starts on a 256-byte boundary, as every activation
// view and every backend allocation does: cuDNN 9 may refuse a misaligned pointer, and
// vectorised kernels want 16 bytes, whatever the model's channel counts make of a packed
// layout (LeNet-5's conv biases would start 8 bytes in). The floats between tensors, and after
// the last one up to the arena's end, are padding: zero from Graph::build on, and zero they
// stay, since every operation on a whole arena (sums, averages, scaling, sums of squares) maps
// zeros to zeros and every other one works per tensor.
//
// Checkpoints keep the tensors packed, back to back in this order (docs/formats.md,
// "Checkpoints"): a file does not depend on the padding, and files of earlier versions read
// the same way. pack_arena and unpack_arena convert between the two.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "src/nn/tensor.hpp"

namespace squall::nn {

// Where one parameter (or state) tensor lives inside its flat arena.
struct ParamInfo {
  std::string name;     // "stage2.block0.conv1.weight"
  size_t offset = 0;    // floats from the arena start: a multiple of k_arena_alignment_floats
  size_t count = 0;
  Shape shape;
  bool weight_decay = true;
};

inline constexpr size_t k_arena_alignment = 256;  // bytes
inline constexpr size_t k_arena_alignment_floats = k_arena_alignment / sizeof(float);

// The first tensor start at or after `floats`.
constexpr size_t arena_aligned(size_t floats) {
  return (floats + k_arena_alignment_floats - 1) / k_arena_alignment_floats * k_arena_alignment_floats;
}

// The tensors' values without the padding (the sum of their counts).
size_t packed_count(const std::vector<ParamInfo>& infos);

// The tensors of `arena` back to back, in `infos`' order.
std::vector<float> pack_arena(std::span<const float> arena, const std::vector<ParamInfo>& infos);

// An arena of `arena_floats` holding `packed`'s tensors at their offsets and zeros between.
// Throws squall::Error naming `what` (the file and entry it came from) when `packed` does not
// hold packed_count(infos) values.
std::vector<float> unpack_arena(std::span<const float> packed, const std::vector<ParamInfo>& infos,
                                size_t arena_floats, const std::string& what);

}  // namespace squall::nn
