// Optimizer arithmetic: single-range SGD and Adam steps, and the fused multi-tensor updates
// over a ChunkTable (one block per chunk). Element arithmetic is the CPU reference's
// (src/cpu/cpu_optim.cpp, src/train/optimizer.cpp), rounded the same way.
//
// LAMB and LARC need per-tensor norms before they can apply: a first launch writes each
// chunk's partial sums of squares (doubles, in a fixed order within the block), a second
// adds each tensor's partials in chunk order, and the apply launch reads them. No float
// atomics anywhere, so the same input gives the same bits on every run.
#include <cmath>
#include <string>

#include "cuda/check.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/kernels.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels {

using detail::block_sum;
using detail::global_index;
using detail::global_stride;
using detail::grid_for;
using detail::kThreads;
using detail::load_double;
using detail::store_double;

namespace {

constexpr int kWarps = kThreads / 32;
constexpr int kMaxGrid = 65535;  // blocks past this loop (grid-stride over chunks or tensors)

// Adam's constants for one step, from the host (bias corrections computed in double there,
// as the CPU does).
struct AdamConsts {
  float lr, beta1, beta2, eps, inv_bc1, sqrt_bc2;
};

AdamConsts adam_consts(float lr, float beta1, float beta2, float eps, int64_t step) {
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  const float sqrt_bc2 =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step))));
  return AdamConsts{lr, beta1, beta2, eps, 1.0f / bc1, sqrt_bc2};
}

// Updates the moments of one element and returns the Adam direction m_hat / (sqrt(v_hat) +
// eps), as torch.optim.Adam: (m / bc1) / (sqrt(v) / sqrt(bc2) + eps).
__device__ __forceinline__ float adam_direction(float w, float g, float& m, float& v, float coupled_wd,
                                                const AdamConsts& k) {
  const float gi = g + coupled_wd * w;
  const float mi = k.beta1 * m + (1.0f - k.beta1) * gi;
  const float vi = k.beta2 * v + (1.0f - k.beta2) * gi * gi;
  m = mi;
  v = vi;
  return (mi * k.inv_bc1) / (sqrtf(vi) / k.sqrt_bc2 + k.eps);
}

// SGD (PyTorch, dampening 0): velocity starts at zero, so one formula covers every step.
__device__ __forceinline__ void sgd_element(float& w, float g, float& vel, float lr, float momentum, float wd,
                                            bool nesterov) {
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

__device__ __forceinline__ Chunk chunk_at(const ChunkTable& table, int32_t c) {
  Chunk k;
  k.index = table.chunk_tensor[c];
  k.t = table.tensors[k.index];
  k.begin = table.chunk_begin[c];
  const uint64_t end = k.begin + static_cast<uint64_t>(table.chunk_elems);
  k.end = end < k.t.n ? end : k.t.n;
  return k;
}

// ---- single range ----

__global__ void sgd_step_kernel(float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                                float weight_decay, bool nesterov) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    float wi = w[i], vi = velocity[i];
    sgd_element(wi, g[i], vi, lr, momentum, weight_decay, nesterov);
    velocity[i] = vi;
    w[i] = wi;
  }
}

__global__ void adam_step_kernel(float* w, const float* g, float* m, float* v, float* update, size_t n,
                                 AdamConsts k, float coupled_wd, float decoupled_wd, bool apply) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float wi = w[i];
    float mi = m[i], vi = v[i];
    const float u = adam_direction(wi, g[i], mi, vi, coupled_wd, k);
    m[i] = mi;
    v[i] = vi;
    // AdamW decays with the weight from before this step, then takes the Adam step.
    if (apply) w[i] = wi - k.lr * decoupled_wd * wi - k.lr * u;
    else update[i] = u + decoupled_wd * wi;
  }
}

// ---- fused ----

__global__ void sgd_chunks_kernel(ChunkTable table, float* velocity, float lr, float momentum, float weight_decay,
                                  bool nesterov) {
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    const float wd = weight_decay * k.t.decay;
    float* vel = velocity + k.t.state_offset;
    for (uint64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      float wi = k.t.w[i], vi = vel[i];
      sgd_element(wi, k.t.g[i], vi, lr, momentum, wd, nesterov);
      vel[i] = vi;
      k.t.w[i] = wi;
    }
  }
}

// adam (coupled decay) and adamw (decoupled), applied.
__global__ void adam_chunks_kernel(ChunkTable table, float* m, float* v, AdamConsts k, float weight_decay,
                                   bool decoupled) {
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const Chunk ch = chunk_at(table, c);
    const float wd = weight_decay * ch.t.decay;
    const float coupled_wd = decoupled ? 0.0f : wd;
    const float decoupled_wd = decoupled ? wd : 0.0f;
    float* mt = m + ch.t.state_offset;
    float* vt = v + ch.t.state_offset;
    for (uint64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float wi = ch.t.w[i];
      float mi = mt[i], vi = vt[i];
      const float u = adam_direction(wi, ch.t.g[i], mi, vi, coupled_wd, k);
      mt[i] = mi;
      vt[i] = vi;
      ch.t.w[i] = wi - k.lr * decoupled_wd * wi - k.lr * u;
    }
  }
}

// LAMB, first launch: u = AdamW's direction + wd w into `update`, and the chunk's partial
// sums of w^2 and u^2 into partials[4c .. 4c+3].
__global__ void lamb_direction_kernel(ChunkTable table, float* m, float* v, AdamConsts k, float weight_decay,
                                      float* update, float* partials) {
  __shared__ double shared[kWarps];
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const Chunk ch = chunk_at(table, c);
    const float wd = weight_decay * ch.t.decay;
    float* mt = m + ch.t.state_offset;
    float* vt = v + ch.t.state_offset;
    float* ut = update + ch.t.state_offset;
    double w2 = 0.0, u2 = 0.0;
    for (uint64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float wi = ch.t.w[i];
      float mi = mt[i], vi = vt[i];
      const float u = adam_direction(wi, ch.t.g[i], mi, vi, 0.0f, k) + wd * wi;
      mt[i] = mi;
      vt[i] = vi;
      ut[i] = u;
      w2 += static_cast<double>(wi) * static_cast<double>(wi);
      u2 += static_cast<double>(u) * static_cast<double>(u);
    }
    const double sw = block_sum(w2, shared);
    const double su = block_sum(u2, shared);
    if (threadIdx.x == 0) {
      store_double(partials + 4 * static_cast<int64_t>(c), sw);
      store_double(partials + 4 * static_cast<int64_t>(c) + 2, su);
    }
  }
}

// LARC, first launch: the chunk's partial sums of w^2 and g^2 (the gradient before decay).
__global__ void larc_partials_kernel(ChunkTable table, float* partials) {
  __shared__ double shared[kWarps];
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const Chunk ch = chunk_at(table, c);
    double w2 = 0.0, g2 = 0.0;
    for (uint64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const double wi = ch.t.w[i], gi = ch.t.g[i];
      w2 += wi * wi;
      g2 += gi * gi;
    }
    const double sw = block_sum(w2, shared);
    const double sg = block_sum(g2, shared);
    if (threadIdx.x == 0) {
      store_double(partials + 4 * static_cast<int64_t>(c), sw);
      store_double(partials + 4 * static_cast<int64_t>(c) + 2, sg);
    }
  }
}

// First chunk whose tensor is >= t (chunk_tensor is sorted).
__device__ int32_t first_chunk_of(const ChunkTable& table, int32_t t) {
  int32_t lo = 0, hi = table.chunks;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (table.chunk_tensor[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Second launch: per tensor, its chunks' partials added in chunk order (a fixed order)
// into tensor_norms[4t .. 4t+3] (sum of squares of w, then of u or g).
__global__ void tensor_norms_kernel(ChunkTable table, const float* partials, float* tensor_norms) {
  __shared__ double shared[kWarps];
  __shared__ int32_t range[2];
  for (int32_t t = blockIdx.x; t < table.tensor_count; t += gridDim.x) {
    __syncthreads();  // range is rewritten below
    if (threadIdx.x == 0) {
      range[0] = first_chunk_of(table, t);
      range[1] = first_chunk_of(table, t + 1);
    }
    __syncthreads();
    double a = 0.0, b = 0.0;
    for (int32_t c = range[0] + static_cast<int32_t>(threadIdx.x); c < range[1]; c += blockDim.x) {
      a += load_double(partials + 4 * static_cast<int64_t>(c));
      b += load_double(partials + 4 * static_cast<int64_t>(c) + 2);
    }
    const double sa = block_sum(a, shared);
    const double sb = block_sum(b, shared);
    if (threadIdx.x == 0) {
      store_double(tensor_norms + 4 * static_cast<int64_t>(t), sa);
      store_double(tensor_norms + 4 * static_cast<int64_t>(t) + 2, sb);
    }
  }
}

// LAMB, last launch: w -= lr * trust * u with trust = ||w|| / ||u|| (1 when either is 0),
// as the CPU: alpha = float(-lr * trust) in double, then w += alpha u.
__global__ void lamb_apply_kernel(ChunkTable table, const float* update, float lr, const float* tensor_norms) {
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const Chunk ch = chunk_at(table, c);
    const double w_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index)));
    const double u_norm = sqrt(load_double(tensor_norms + 4 * static_cast<int64_t>(ch.index) + 2));
    const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
    const float alpha = static_cast<float>(-static_cast<double>(lr) * trust);
    const float* ut = update + ch.t.state_offset;
    for (uint64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) ch.t.w[i] += alpha * ut[i];
  }
}

// LARC, last launch: g += wd w, then g *= factor, factor = eta ||w|| / (||g|| + wd ||w||),
// clipped to min(local / lr, 1) when asked, 1 when either norm is 0 (computed in double as
// train::larc_factor does).
__global__ void larc_apply_kernel(ChunkTable table, float lr, float eta, float weight_decay, bool clip,
                                  const float* tensor_norms) {
  for (int32_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
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
    if (!decay && !scale) continue;
    const float f = static_cast<float>(factor);
    for (uint64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      float gi = ch.t.g[i];
      if (decay) gi += wd * ch.t.w[i];
      if (scale) gi *= f;
      ch.t.g[i] = gi;
    }
  }
}

unsigned chunk_grid(int32_t n) { return static_cast<unsigned>(n < kMaxGrid ? n : kMaxGrid); }

// The two norm launches shared by LAMB and LARC happen in the callers; this is the second.
void launch_tensor_norms(cudaStream_t s, const ChunkTable& t, float* norms) {
  if (t.tensor_count <= 0) return;
  tensor_norms_kernel<<<chunk_grid(t.tensor_count), kThreads, 0, s>>>(t, norms, norms + 4 * static_cast<int64_t>(t.chunks));
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void check_step(const char* who, int64_t step) {
  if (step < 1) throw Error(std::string(who) + ": step must be >= 1 (bias correction), got " + std::to_string(step));
}

}  // namespace

void sgd_step(cudaStream_t s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
              float weight_decay, bool nesterov) {
  if (n == 0) return;
  sgd_step_kernel<<<grid_for(n), kThreads, 0, s>>>(w, g, velocity, n, lr, momentum, weight_decay, nesterov);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void adam_step(cudaStream_t s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply) {
  check_step("adam_step", step);
  if (!apply && !update) throw Error("adam_step: apply=false needs an update buffer");
  if (n == 0) return;
  const AdamConsts k = adam_consts(lr, beta1, beta2, eps, step);
  const float coupled_wd = decoupled ? 0.0f : weight_decay;
  const float decoupled_wd = decoupled ? weight_decay : 0.0f;
  adam_step_kernel<<<grid_for(n), kThreads, 0, s>>>(w, g, m, v, update, n, k, coupled_wd, decoupled_wd, apply);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

size_t norms_scratch_floats(int32_t chunks, int32_t tensor_count) {
  return 4 * static_cast<size_t>(chunks > 0 ? chunks : 0) + 4 * static_cast<size_t>(tensor_count > 0 ? tensor_count : 0);
}

void sgd_update(cudaStream_t s, const ChunkTable& t, float* velocity, float lr, float momentum, float weight_decay,
                bool nesterov) {
  if (t.chunks <= 0) return;
  sgd_chunks_kernel<<<chunk_grid(t.chunks), kThreads, 0, s>>>(t, velocity, lr, momentum, weight_decay, nesterov);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void adam_update(cudaStream_t s, const ChunkTable& t, float* m, float* v, int kind, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t step, float* update, float* norms) {
  check_step("adam_update", step);
  if (kind < 0 || kind > 2) throw Error("adam_update: kind must be 0 (adam), 1 (adamw) or 2 (lamb), got " +
                                        std::to_string(kind));
  if (kind == 2 && (!update || !norms)) throw Error("adam_update: lamb needs update and norms scratch");
  if (t.chunks <= 0) return;
  const AdamConsts k = adam_consts(lr, beta1, beta2, eps, step);
  const unsigned grid = chunk_grid(t.chunks);
  if (kind != 2) {
    adam_chunks_kernel<<<grid, kThreads, 0, s>>>(t, m, v, k, weight_decay, kind == 1);
    SQUALL_CUDA_CHECK(cudaGetLastError());
    return;
  }
  lamb_direction_kernel<<<grid, kThreads, 0, s>>>(t, m, v, k, weight_decay, update, norms);
  SQUALL_CUDA_CHECK(cudaGetLastError());
  launch_tensor_norms(s, t, norms);
  lamb_apply_kernel<<<grid, kThreads, 0, s>>>(t, update, lr, norms + 4 * static_cast<int64_t>(t.chunks));
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void larc_scale(cudaStream_t s, const ChunkTable& t, float lr, float eta, float weight_decay, bool clip,
                float* norms) {
  if (!norms) throw Error("larc_scale: needs norms scratch");
  if (t.chunks <= 0) return;
  const unsigned grid = chunk_grid(t.chunks);
  larc_partials_kernel<<<grid, kThreads, 0, s>>>(t, norms);
  SQUALL_CUDA_CHECK(cudaGetLastError());
  launch_tensor_norms(s, t, norms);
  larc_apply_kernel<<<grid, kThreads, 0, s>>>(t, lr, eta, weight_decay, clip, norms + 4 * static_cast<int64_t>(t.chunks));
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda::kernels
