// Fully connected plans on cuBLAS SGEMM: x [n, in], w [out, in], b [out], y [n, out], all
// row-major. cuBLAS is column-major, and a row-major [r, c] matrix is the column-major
// [c, r] one (its transpose) with leading dimension c, so each product is written for the
// transposes:
//   forward           y^T [out, n]  = w_cm^T · x_cm          w_cm = w^T [in, out], x_cm = x^T [in, n]
//   backward_data     dx^T [in, n]  = w_cm · dy_cm           dy_cm = dy^T [out, n]
//   backward_weights  dw^T [in, out] = x_cm · dy_cm^T        (dw = dy^T · x)
//   bias              y^T += b · 1^T (a GEMM of depth 1 writing y first, then the product
//                     with beta = 1), db = dy^T · 1 (GEMV): `ones` is n floats of 1 kept in
//                     the plan.
// Math mode CUBLAS_DEFAULT_MATH (no TF32), so that f32 results agree with the CPU backend;
// alpha and beta are host values. Both are set on the stream's handle for the duration of
// each call and restored after, whatever the rest of the backend uses the handle for.
//
// bf16/f16 (docs/design.md, "Precision"): cublasGemmEx with x, w, y, dx, dy of the
// activation type and CUBLAS_COMPUTE_32F (f32 accumulation; tensor cores). forward converts
// the f32 weights into the plan's copy of that type, which backward_data uses; the weight
// gradient is written in f32 directly (GemmEx takes an f32 output); the bias is added and
// its gradient summed by squall's kernels (cuda/bias.cu), the latter rounded to the type as
// the CPU reference does.
#include <string>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_util.hpp"
#include "cuda/kernels.cuh"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"

namespace squall::cuda {

namespace {

using detail::DeviceFloats;
using detail::kOne;
using detail::kZero;
using detail::to_int;

// The handle in fp32-exact math and host pointer mode while a plan call runs.
class CublasModes {
 public:
  explicit CublasModes(cublasHandle_t h) : m_h(h) {
    SQUALL_CUBLAS_CHECK(cublasGetMathMode(h, &m_math));
    SQUALL_CUBLAS_CHECK(cublasGetPointerMode(h, &m_pointer));
    if (m_math != CUBLAS_DEFAULT_MATH) SQUALL_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    if (m_pointer != CUBLAS_POINTER_MODE_HOST) SQUALL_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  }
  ~CublasModes() {
    if (m_math != CUBLAS_DEFAULT_MATH) (void)cublasSetMathMode(m_h, m_math);
    if (m_pointer != CUBLAS_POINTER_MODE_HOST) (void)cublasSetPointerMode(m_h, m_pointer);
  }
  CublasModes(const CublasModes&) = delete;
  CublasModes& operator=(const CublasModes&) = delete;

 private:
  cublasHandle_t m_h;
  cublasMath_t m_math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t m_pointer = CUBLAS_POINTER_MODE_HOST;
};

class CublasLinearPlan final : public nn::LinearPlan {
 public:
  explicit CublasLinearPlan(const nn::LinearDesc& d) : m_desc(d) {
    if (d.n < 1 || d.in < 1 || d.out < 1)
      throw Error("linear: invalid description n=" + std::to_string(d.n) + " in=" + std::to_string(d.in) +
                  " out=" + std::to_string(d.out));
    m_n = to_int(d.n, "linear batch");
    m_in = to_int(d.in, "linear inputs");
    m_out = to_int(d.out, "linear outputs");
    m_reduced = d.dtype != nn::DType::f32;
    if (m_reduced) {
      (void)detail::cudnn_type(d.dtype, "linear");  // refuses a type that is not f32, bf16 or f16
      m_type = d.dtype == nn::DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
      m_w16 = detail::DeviceHalves(static_cast<size_t>(d.in * d.out));
    }
    if (d.bias && !m_reduced) {
      const std::vector<float> ones(static_cast<size_t>(d.n), 1.0f);
      m_ones = DeviceFloats(ones.size());
      SQUALL_CUDA_CHECK(cudaMemcpy(m_ones.data(), ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
  }

  void forward(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    if (!m_reduced) return forward_f32(s, static_cast<const float*>(x), w, b, static_cast<float*>(y));
    CudaStream& cs = cuda_stream(s);
    const cublasHandle_t h = cs.cublas();
    CublasModes modes(h);
    kernels::convert(cs.stream(), w, 0, m_w16.data(), detail::kernel_type(m_desc.dtype), m_w16.count());
    // y^T [out, n] = (w_cm [in, out])^T · x_cm [in, n]
    SQUALL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m_out, m_n, m_in, &kOne, m_w16.data(), m_type, m_in,
                                     x, m_type, m_in, &kZero, y, m_type, m_out, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
    if (m_desc.bias && b != nullptr)
      kernels::bias_add(cs.stream(), detail::kernel_type(m_desc.dtype), false, y, b, m_n, m_out, 1);
  }

  void backward_data(nn::Stream& s, const void* dy, const float* w, void* dx) override {
    if (dx == nullptr) return;
    if (!m_reduced) return backward_data_f32(s, static_cast<const float*>(dy), w, static_cast<float*>(dx));
    const cublasHandle_t h = cuda_stream(s).cublas();
    CublasModes modes(h);
    // dx^T [in, n] = w_cm [in, out] · dy_cm [out, n], with the weights of the last forward
    SQUALL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m_in, m_n, m_out, &kOne, m_w16.data(), m_type, m_in,
                                     dy, m_type, m_out, &kZero, dx, m_type, m_in, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }

  void backward_weights(nn::Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    if (!m_reduced)
      return backward_weights_f32(s, static_cast<const float*>(x), static_cast<const float*>(dy), dw, db);
    CudaStream& cs = cuda_stream(s);
    const cublasHandle_t h = cs.cublas();
    CublasModes modes(h);
    // dw^T [in, out] = x_cm [in, n] · (dy_cm [out, n])^T, written in f32
    SQUALL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m_in, m_out, m_n, &kOne, x, m_type, m_in, dy, m_type,
                                     m_out, &kZero, dw, CUDA_R_32F, m_in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (m_desc.bias && db != nullptr)
      kernels::bias_grad(
          cs.stream(), detail::kernel_type(m_desc.dtype), false, dy, db, m_n, m_out, 1, true,
          static_cast<float*>(cs.scratch(sizeof(float) * kernels::bias_grad_scratch_floats(m_n, m_out, 1))));
  }

 private:
  void forward_f32(nn::Stream& s, const float* x, const float* w, const float* b, float* y) {
    const cublasHandle_t h = cuda_stream(s).cublas();
    CublasModes modes(h);
    float beta = kZero;
    if (m_desc.bias && b != nullptr) {
      // y^T [out, n] = b [out, 1] · ones [1, n]
      SQUALL_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m_out, m_n, 1, &kOne, b, m_out, m_ones.data(), 1,
                                      &kZero, y, m_out));
      beta = kOne;
    }
    // y^T [out, n] (+)= (w_cm [in, out])^T · x_cm [in, n]
    SQUALL_CUBLAS_CHECK(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m_out, m_n, m_in, &kOne, w, m_in, x, m_in, &beta, y, m_out));
  }

  void backward_data_f32(nn::Stream& s, const float* dy, const float* w, float* dx) {
    const cublasHandle_t h = cuda_stream(s).cublas();
    CublasModes modes(h);
    // dx^T [in, n] = w_cm [in, out] · dy_cm [out, n]
    SQUALL_CUBLAS_CHECK(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m_in, m_n, m_out, &kOne, w, m_in, dy, m_out, &kZero, dx, m_in));
  }

  void backward_weights_f32(nn::Stream& s, const float* x, const float* dy, float* dw, float* db) {
    const cublasHandle_t h = cuda_stream(s).cublas();
    CublasModes modes(h);
    // dw^T [in, out] = x_cm [in, n] · (dy_cm [out, n])^T
    SQUALL_CUBLAS_CHECK(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m_in, m_out, m_n, &kOne, x, m_in, dy, m_out, &kZero, dw, m_in));
    if (m_desc.bias && db != nullptr) {
      // db [out] = dy_cm [out, n] · ones [n]
      SQUALL_CUBLAS_CHECK(
          cublasSgemv(h, CUBLAS_OP_N, m_out, m_n, &kOne, dy, m_out, m_ones.data(), 1, &kZero, db, 1));
    }
  }

  nn::LinearDesc m_desc;
  int m_n = 1, m_in = 1, m_out = 1;
  DeviceFloats m_ones;  // f32: n ones, for the bias broadcast and the bias gradient
  bool m_reduced = false;
  cudaDataType_t m_type = CUDA_R_32F;  // bf16/f16: the activations' cuBLAS type
  detail::DeviceHalves m_w16;          // bf16/f16: the weights of the last forward
};

}  // namespace

std::unique_ptr<nn::LinearPlan> make_cublas_linear(const nn::LinearDesc& d) {
  return std::make_unique<CublasLinearPlan>(d);
}

}  // namespace squall::cuda
