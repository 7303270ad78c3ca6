#pragma once
// Optimizer arithmetic: single-range SGD and Adam steps, and the fused multi-tensor updates
// over a ChunkTable (one block per chunk): bodies and launch sequences, run on a stream by
// cuda/optim.cu and on the host by the cuda-host tests. Element arithmetic is the CPU
// reference's (src/cpu/cpu_optim.cpp, src/optim/optimizer.cpp), rounded the same way.
//
// LAMB and LARC need per-tensor norms before they can apply: a first launch writes each
// chunk's partial sums of squares (doubles, in a fixed order within the block), a second
// adds each tensor's partials in chunk order, and the apply launch reads them. No float
// atomics anywhere, so the same input gives the same bits on every run.
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/grid.cuh"
#include "cuda/kernels.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

constexpr int kMaxChunkGrid = 65535;  // blocks past this loop (block-stride over chunks or tensors)

inline unsigned chunk_grid(int32_t n) { return static_cast<unsigned>(n < kMaxChunkGrid ? n : kMaxChunkGrid); }

// Adam's constants for one step, from the host (bias corrections computed in double there,
// as the CPU does).
struct AdamConsts {
  float lr, beta1, beta2, eps, inv_bc1, sqrt_bc2;
};

inline AdamConsts adam_consts(float lr, float beta1, float beta2, float eps, int64_t step) {
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  const float sqrt_bc2 =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step))));
  return AdamConsts{lr, beta1, beta2, eps, 1.0f / bc1, sqrt_bc2};
}

// Updates the moments of one element and returns the Adam direction m_hat / (sqrt(v_hat) +
// eps), as torch.optim.Adam: (m / bc1) / (sqrt(v) / sqrt(bc2) + eps). sqrtf and the division
// are correctly rounded on the device (nvcc's default -prec-sqrt, -prec-div) as on the host.
__host__ __device__ __forceinline__ float adam_direction(float w, float g, float& m, float& v, float coupled_wd,
                                                         const AdamConsts& k) {
  const float gi = g + coupled_wd * w;
  const float mi = k.beta1 * m + (1.0f - k.beta1) * gi;
  const float vi = k.beta2 * v + (1.0f - k.beta2) * gi * gi;
  m = mi;
  v = vi;
  return (mi * k.inv_bc1) / (sqrtf(vi) / k.sqrt_bc2 + k.eps);
}

// SGD (PyTorch, dampening 0): velocity starts at zero, so one formula covers every step.
__host__ __device__ __forceinline__ void sgd_element(float& w, float g, float& vel, float lr, float momentum,
                                                     float wd, bool nesterov) {
  const float gd = g + wd * w;
  const float v = momentum * vel + gd;
  vel = v;
  const float step = nesterov ? gd + momentum * v : v;
  w -= lr * step;
}

// The element range [begin, end) of chunk c and its tensor.
struct Chunk {
  DeviceTensor t;
  int32_t index;  // of the tensor
  uint64_t begin, end;
};

__host__ __device__ __forceinline__ Chunk chunk_at(const ChunkTable& table, int64_t c) {
  Chunk k;
  k.index = table.chunk_tensor[c];
  k.t = table.tensors[k.index];
  k.begin = table.chunk_begin[c];
  const uint64_t end = k.begin + static_cast<uint64_t>(table.chunk_elems);
  k.end = end < k.t.n ? end : k.t.n;
  return k;
}

// First chunk whose tensor is >= t (chunk_tensor is sorted).
__host__ __device__ __forceinline__ int32_t first_chunk_of(const ChunkTable& table, int32_t t) {
  int32_t lo = 0, hi = table.chunks;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (table.chunk_tensor[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// ---- weight mirrors (docs/design.md, "Weight mirrors") ----

// Where element i of w [k, c, rs] lands in the mirror ([k, rs, c] when mirror_c > 0), in 32-bit
// arithmetic for every tensor below 2^31 elements.
__host__ __device__ __forceinline__ uint64_t mirror_index(const DeviceTensor& t, uint64_t i) {
  if (t.mirror_c == 0) return i;
  if (t.n < (static_cast<uint64_t>(1) << 31)) {
    const uint32_t j = static_cast<uint32_t>(i), c = t.mirror_c, rs = t.mirror_rs;
    const uint32_t q = j / rs, p = j - q * rs;  // q = filter * c + channel
    const uint32_t k = q / c, ch = q - k * c;
    return (static_cast<uint64_t>(k) * rs + p) * c + ch;
  }
  const uint64_t c = t.mirror_c, rs = t.mirror_rs;
  const uint64_t q = i / rs, p = i - q * rs, k = q / c, ch = q - k * c;
  return (k * rs + p) * c + ch;
}

template <class T>
__host__ __device__ __forceinline__ void store_mirror(const DeviceTensor& t, uint64_t d, float w) {
  const T v = from_float<T>(w);
  if (t.mirror_widened) static_cast<float*>(t.mirror)[d] = to_float(v);
  else static_cast<T*>(t.mirror)[d] = v;
}

// The mirror's element for w's element i, from its new value: rounded once to the mirror's
// type, what the plan's copy of the weights (permute_convert) would hold.
__host__ __device__ __forceinline__ void write_mirror(const DeviceTensor& t, uint64_t i, float w) {
  const uint64_t d = mirror_index(t, i);
  switch (t.mirror_type) {
    case 1: store_mirror<__nv_bfloat16>(t, d, w); break;
    case 2: store_mirror<__half>(t, d, w); break;
    default: static_cast<float*>(t.mirror)[d] = w;
  }
}

// ---- single range (element-wise) ----

struct SgdStepOp {
  float* w;
  const float* g;
  float* velocity;
  float lr, momentum, weight_decay;
  bool nesterov;
  __host__ __device__ void operator()(size_t i) const {
    float wi = w[i], vi = velocity[i];
    sgd_element(wi, g[i], vi, lr, momentum, weight_decay, nesterov);
    velocity[i] = vi;
    w[i] = wi;
  }
};

struct AdamStepOp {
  float* w;
  const float* g;
  float *m, *v, *update;
  AdamConsts k;
  float coupled_wd, decoupled_wd;
  bool apply;
  __host__ __device__ void operator()(size_t i) const {
    const float wi = w[i];
    float mi = m[i], vi = v[i];
    const float u = adam_direction(wi, g[i], mi, vi, coupled_wd, k);
    m[i] = mi;
    v[i] = vi;
    // AdamW decays with the weight from before this step, then takes the Adam step.
    if (apply) w[i] = wi - k.lr * decoupled_wd * wi - k.lr * u;
    else update[i] = u + decoupled_wd * wi;
  }
};

// ---- fused: unit = chunk, thread t takes the chunk's elements t, t + blockDim, ... ----

struct SgdChunksOp {
  ChunkTable table;
  float* velocity;
  float lr, momentum, weight_decay;
  bool nesterov;
  __host__ __device__ void operator()(int64_t c, unsigned thread, unsigned threads) const {
    const Chunk k = chunk_at(table, c);
    const float wd = weight_decay * k.t.decay;
    float* vel = velocity + k.t.state_offset;
    const bool mirrored = k.t.mirror != nullptr;
    for (uint64_t i = k.begin + thread; i < k.end; i += threads) {
      float wi = k.t.w[i], vi = vel[i];
      sgd_element(wi, k.t.g[i], vi, lr, momentum, wd, nesterov);
      vel[i] = vi;
      k.t.w[i] = wi;
      if (mirrored) write_mirror(k.t, i, wi);
    }
  }
};

// adam (coupled decay) and adamw (decoupled), applied.
struct AdamChunksOp {
  ChunkTable table;
  float *m, *v;
  AdamConsts k;
  float weight_decay;
  bool decoupled;
  __host__ __device__ void operator()(int64_t c, unsigned thread, unsigned threads) const {
    const Chunk ch = chunk_at(table, c);
    const float wd = weight_decay * ch.t.decay;
    const float coupled_wd = decoupled ? 0.0f : wd;
    const float decoupled_wd = decoupled ? wd : 0.0f;
    float* mt = m + ch.t.state_offset;
    float* vt = v + ch.t.state_offset;
    const bool mirrored = ch.t.mirror != nullptr;
    for (uint64_t i = ch.begin + thread; i < ch.end; i += threads) {
      const float wi = ch.t.w[i];
      float mi = mt[i], vi = vt[i];
      const float u = adam_direction(wi, ch.t.g[i], mi, vi, coupled_wd, k);
      mt[i] = mi;
      vt[i] = vi;
      const float next = wi - k.lr * decoupled_wd * wi - k.lr * u;
      ch.t.w[i] = next;
      if (mirrored) write_mirror(ch.t, i, next);
    }
  }
};

// LAMB, first launch (reduce, unit = chunk): u = AdamW's direction + wd w into `update`,
// and the chunk's partial sums of w^2 and u^2 into partials[4c .. 4c+3].
struct LambDirectionOp {
  static constexpr int kSums = 2;
  ChunkTable table;
  float *m, *v;
  AdamConsts k;
  float weight_decay;
  float *update, *partials;
  __host__ __device__ Partial<2> part(int64_t c, const Place& at) const {
    const Chunk ch = chunk_at(table, c);
    const float wd = weight_decay * ch.t.decay;
    float* mt = m + ch.t.state_offset;
    float* vt = v + ch.t.state_offset;
    float* ut = update + ch.t.state_offset;
    Partial<2> acc{{0.0, 0.0}, 0};
    for (uint64_t i = ch.begin + at.thread; i < ch.end; i += at.threads) {
      const float wi = ch.t.w[i];
      float mi = mt[i], vi = vt[i];
      const float u = adam_direction(wi, ch.t.g[i], mi, vi, 0.0f, k) + wd * wi;
      mt[i] = mi;
      vt[i] = vi;
      ut[i] = u;
      acc.sum[0] += static_cast<double>(wi) * static_cast<double>(wi);
      acc.sum[1] += static_cast<double>(u) * static_cast<double>(u);
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t c, const Partial<2>& total) const {
    store_double(partials + 4 * c, total.sum[0]);
    store_double(partials + 4 * c + 2, total.sum[1]);
  }
};

// LARC, first launch (reduce, unit = chunk): the chunk's partial sums of w^2 and g^2 (the
// gradient before decay).
struct LarcPartialsOp {
  static constexpr int kSums = 2;
  ChunkTable table;
  float* partials;
  __host__ __device__ Partial<2> part(int64_t c, const Place& at) const {
    const Chunk ch = chunk_at(table, c);
    Partial<2> acc{{0.0, 0.0}, 0};
    for (uint64_t i = ch.begin + at.thread; i < ch.end; i += at.threads) {
      const double wi = ch.t.w[i], gi = ch.t.g[i];
      acc.sum[0] += wi * wi;
      acc.sum[1] += gi * gi;
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t c, const Partial<2>& total) const {
    store_double(partials + 4 * c, total.sum[0]);
    store_double(partials + 4 * c + 2, total.sum[1]);
  }
};

// Second launch (reduce, unit = tensor): its chunks' partials added in chunk order (a
// fixed order) into tensor_norms[4t .. 4t+3] (sum of squares of w, then of u or g). Every
// thread finds the tensor's chunk range itself (the same binary search, the same answer).
struct TensorNormsOp {
  static constexpr int kSums = 2;
  ChunkTable table;
  const float* partials;
  float* tensor_norms;
  __host__ __device__ Partial<2> part(int64_t t, const Place& at) const {
    const int32_t begin = first_chunk_of(table, static_cast<int32_t>(t));
    const int32_t end = first_chunk_of(table, static_cast<int32_t>(t) + 1);
    Partial<2> acc{{0.0, 0.0}, 0};
    for (int32_t c = begin + static_cast<int32_t>(at.thread); c < end; c += static_cast<int32_t>(at.threads)) {
      acc.sum[0] += load_double(partials + 4 * static_cast<int64_t>(c));
      acc.sum[1] += load_double(partials + 4 * static_cast<int64_t>(c) + 2);
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t t, const Partial<2>& total) const {
    store_double(tensor_norms + 4 * t, total.sum[0]);
    store_double(tensor_norms + 4 * t + 2, total.sum[1]);
  }
};

// LAMB, last launch: w -= lr * trust * u with trust = ||w|| / ||u|| (1 when either is 0),
// as the CPU: alpha = float(-lr * trust) in double, then w += alpha u.
struct LambApplyOp {
  ChunkTable table;
  const float* update;
  float lr;
  const float* tensor_norms;
  __host__ __device__ void operator()(int64_t c, unsigned thread, unsigned threads) const {
    const Chunk ch = chunk_at(table, c);
    const double w_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index)));
    const double u_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index) + 2));
    const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
    const float alpha = static_cast<float>(-static_cast<double>(lr) * trust);
    const float* ut = update + ch.t.state_offset;
    const bool mirrored = ch.t.mirror != nullptr;
    for (uint64_t i = ch.begin + thread; i < ch.end; i += threads) {
      const float next = ch.t.w[i] + alpha * ut[i];
      ch.t.w[i] = next;
      if (mirrored) write_mirror(ch.t, i, next);
    }
  }
};

// LARC, last launch: g += wd w, then g *= factor, factor = eta ||w|| / (||g|| + wd ||w||),
// clipped to min(local / lr, 1) when asked, 1 when either norm is 0 (computed in double as
// optim::larc_factor does).
struct LarcApplyOp {
  ChunkTable table;
  float lr, eta, weight_decay;
  bool clip;
  const float* tensor_norms;
  __host__ __device__ void operator()(int64_t c, unsigned thread, unsigned threads) const {
    const Chunk ch = chunk_at(table, c);
    const float wd = weight_decay * ch.t.decay;
    const double w_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index)));
    const double g_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index) + 2));
    double factor = 1.0;
    if (w_norm > 0 && g_norm > 0) {
      const double local = static_cast<double>(eta) * w_norm / (g_norm + static_cast<double>(wd) * w_norm);
      const double q = local / static_cast<double>(lr);
      factor = clip ? (1.0 < q ? 1.0 : q) : local;  // std::min(q, 1.0)
    }
    const bool decay = wd > 0.0f, scale = factor != 1.0;
    if (!decay && !scale) return;
    const float f = static_cast<float>(factor);
    for (uint64_t i = ch.begin + thread; i < ch.end; i += threads) {
      float gi = ch.t.g[i];
      if (decay) gi += wd * ch.t.w[i];
      if (scale) gi *= f;
      ch.t.g[i] = gi;
    }
  }
};

// ---- launch sequences ----

inline void check_step(const char* who, int64_t step) {
  if (step < 1) throw Error(std::string(who) + ": step must be >= 1 (bias correction), got " + std::to_string(step));
}

template <class L>
void sgd_step_on(const L& l, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                 float weight_decay, bool nesterov) {
  if (n == 0) return;
  l.for_each(grid_for(n), kThreads, SgdStepOp{w, g, velocity, lr, momentum, weight_decay, nesterov}, n);
}

template <class L>
void adam_step_on(const L& l, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply) {
  check_step("adam_step", step);
  if (!apply && !update) throw Error("adam_step: apply=false needs an update buffer");
  if (n == 0) return;
  const AdamConsts k = adam_consts(lr, beta1, beta2, eps, step);
  const float coupled_wd = decoupled ? 0.0f : weight_decay;
  const float decoupled_wd = decoupled ? weight_decay : 0.0f;
  l.for_each(grid_for(n), kThreads, AdamStepOp{w, g, m, v, update, k, coupled_wd, decoupled_wd, apply}, n);
}

template <class L>
void sgd_update_on(const L& l, const ChunkTable& t, float* velocity, float lr, float momentum, float weight_decay,
                   bool nesterov) {
  if (t.chunks <= 0) return;
  l.for_units(chunk_grid(t.chunks), kThreads, SgdChunksOp{t, velocity, lr, momentum, weight_decay, nesterov},
              t.chunks);
}

// The second launch of LAMB and LARC: per-tensor sums after the chunk partials.
template <class L>
void tensor_norms_on(const L& l, const ChunkTable& t, float* norms) {
  if (t.tensor_count <= 0) return;
  l.reduce(chunk_grid(t.tensor_count), kThreads, TensorNormsOp{t, norms, norms + 4 * static_cast<int64_t>(t.chunks)},
           t.tensor_count);
}

template <class L>
void adam_update_on(const L& l, const ChunkTable& t, float* m, float* v, int kind, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t step, float* update, float* norms) {
  check_step("adam_update", step);
  if (kind < 0 || kind > 2)
    throw Error("adam_update: kind must be 0 (adam), 1 (adamw) or 2 (lamb), got " + std::to_string(kind));
  if (kind == 2 && (!update || !norms)) throw Error("adam_update: lamb needs update and norms scratch");
  if (t.chunks <= 0) return;
  const AdamConsts k = adam_consts(lr, beta1, beta2, eps, step);
  const unsigned grid = chunk_grid(t.chunks);
  if (kind != 2) return l.for_units(grid, kThreads, AdamChunksOp{t, m, v, k, weight_decay, kind == 1}, t.chunks);
  l.reduce(grid, kThreads, LambDirectionOp{t, m, v, k, weight_decay, update, norms}, t.chunks);
  tensor_norms_on(l, t, norms);
  l.for_units(grid, kThreads, LambApplyOp{t, update, lr, norms + 4 * static_cast<int64_t>(t.chunks)}, t.chunks);
}

template <class L>
void larc_scale_on(const L& l, const ChunkTable& t, float lr, float eta, float weight_decay, bool clip, float* norms) {
  if (!norms) throw Error("larc_scale: needs norms scratch");
  if (t.chunks <= 0) return;
  const unsigned grid = chunk_grid(t.chunks);
  l.reduce(grid, kThreads, LarcPartialsOp{t, norms}, t.chunks);
  tensor_norms_on(l, t, norms);
  l.for_units(grid, kThreads, LarcApplyOp{t, lr, eta, weight_decay, clip, norms + 4 * static_cast<int64_t>(t.chunks)},
              t.chunks);
}

}  // namespace squall::cuda::kernels::detail
