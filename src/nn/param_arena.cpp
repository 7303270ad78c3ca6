#include "src/nn/param_arena.hpp"

#include <algorithm>

#include "src/core/error.hpp"

namespace squall::nn {

size_t packed_count(const std::vector<ParamInfo>& infos) {
  size_t n = 0;
  for (const ParamInfo& p : infos) n += p.count;
  return n;
}

std::vector<float> pack_arena(std::span<const float> arena, const std::vector<ParamInfo>& infos) {
  std::vector<float> out;
  out.reserve(packed_count(infos));
  for (const ParamInfo& p : infos) {
    if (p.offset + p.count > arena.size())
      throw Error("arena: tensor " + p.name + " at floats [" + std::to_string(p.offset) + ", " +
                  std::to_string(p.offset + p.count) + ") lies outside an arena of " + std::to_string(arena.size()));
    out.insert(out.end(), arena.begin() + static_cast<std::ptrdiff_t>(p.offset),
               arena.begin() + static_cast<std::ptrdiff_t>(p.offset + p.count));
  }
  return out;
}

std::vector<float> unpack_arena(std::span<const float> packed, const std::vector<ParamInfo>& infos,
                                size_t arena_floats, const std::string& what) {
  if (packed.size() != packed_count(infos))
    throw Error(what + " holds " + std::to_string(packed.size()) + " values; the model's " +
                std::to_string(infos.size()) + " tensors hold " + std::to_string(packed_count(infos)));
  std::vector<float> arena(arena_floats, 0.0f);
  size_t at = 0;
  for (const ParamInfo& p : infos) {
    if (p.offset + p.count > arena_floats)
      throw Error("arena: tensor " + p.name + " at floats [" + std::to_string(p.offset) + ", " +
                  std::to_string(p.offset + p.count) + ") lies outside an arena of " + std::to_string(arena_floats));
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), p.count,
                arena.begin() + static_cast<std::ptrdiff_t>(p.offset));
    at += p.count;
  }
  return arena;
}

}  // namespace squall::nn
