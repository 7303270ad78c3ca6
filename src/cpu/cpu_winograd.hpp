#pragma once
// squall's own Winograd F(2x2, 3x3) forward convolution for AVX2 + FMA CPUs, where oneDNN 2.6
// has Winograd kernels for AVX-512 only (cpu_conv.cpp uses this one in forward-only plans when
// oneDNN offers none; docs/inference.md, "Speed").
//
// Each 2x2 block of outputs comes from the 4x4 block of inputs under it as
//   Y = A^T [ sum_c (G g_kc G^T) .* (B^T d_c B) ] A,
// 16 multiplications per input channel where the direct form has 36. The 16 element-wise
// products become 16 small matrix products over the channels (tiles x C times C x K), the
// part that runs at the FMA units' speed; the transforms are additions only.
//
// Activations in and out are nChw8c with whole blocks of 8 channels; the weights [k, c, 3, 3]
// (oihw) are transformed once per set of weights (set_weights), the bias and a ReLU are
// applied in the output transform.
#include <cstdint>
#include <vector>

#include "src/nn/backend.hpp"

namespace squall::cpu::winograd {

// The implementation's name as a plan reports it (ConvForwardInfo::impl).
inline constexpr const char* k_impl_name = "squall_wino_2x3:avx2";

// Whether this CPU runs the kernels (AVX2 and FMA).
bool cpu_supported();

// The convolutions this forward computes: f32, 3x3, stride 1, dilation 1, padding 0 or 1 on
// each side, not transposed, input and output in nChw8c with c and k multiples of 8.
bool eligible(const nn::ConvDesc& d);

class Forward {
 public:
  explicit Forward(const nn::ConvDesc& d);  // d must be eligible(); the CPU cpu_supported()

  // Transforms w ([k, c, 3, 3]) into the packed matrices the products read; w may be
  // released afterwards.
  void set_weights(const float* w);
  // y = conv(x, w) + bias (when not null), then max(., 0) when relu. x and y in nChw8c.
  void run(const float* x, const float* bias, bool relu, float* y);

 private:
  int64_t m_n, m_c, m_h, m_w, m_k, m_pad_h, m_pad_w;
  int64_t m_p, m_q;             // output height, width
  int64_t m_tiles_h, m_tiles_w; // 2x2 output tiles per column, per row
  std::vector<float> m_u;       // transformed weights: [16][k panels][c][panel width]
  std::vector<float> m_scratch; // per thread: V [16][6][c], then M [16][6][k]
  int64_t m_scratch_per_thread = 0;
};

}  // namespace squall::cpu::winograd
