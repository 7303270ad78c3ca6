#pragma once
// ssgd's gradient buckets (docs/training.md, "ssgd"): the ranges of the gradient arena handed
// to the allreduce one by one while the backward pass still computes the earlier layers'.
// A pure function of the tensors' offsets and the size asked for, the same on every rank.
#include <cstddef>
#include <utility>
#include <vector>

namespace squall::parallel {

// [lo, hi) ranges of whole tensors covering [0, total), from the end of the arena (the
// gradients a backward pass finishes first) to its start: each at least `bucket_floats`
// floats, except the last one (which starts at 0). `offsets`: each tensor's first float, in
// arena order (non-decreasing, the first 0); empty ranges (tensors of no floats) are left
// out. Throws squall::Error for offsets out of order or past `total`.
std::vector<std::pair<size_t, size_t>> plan_buckets(const std::vector<size_t>& offsets, size_t total,
                                                    size_t bucket_floats);

}  // namespace squall::parallel
