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
#include <string>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_util.hpp"
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
    if (d.bias) {
      const std::vector<float> ones(static_cast<size_t>(d.n), 1.0f);
      m_ones = DeviceFloats(ones.size());
      SQUALL_CUDA_CHECK(cudaMemcpy(m_ones.data(), ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
  }

  void forward(nn::Stream& s, const float* x, const float* w, const float* b, float* y) override {
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

  void backward_data(nn::Stream& s, const float* dy, const float* w, float* dx) override {
    if (dx == nullptr) return;
    const cublasHandle_t h = cuda_stream(s).cublas();
    CublasModes modes(h);
    // dx^T [in, n] = w_cm [in, out] · dy_cm [out, n]
    SQUALL_CUBLAS_CHECK(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m_in, m_n, m_out, &kOne, w, m_in, dy, m_out, &kZero, dx, m_in));
  }

  void backward_weights(nn::Stream& s, const float* x, const float* dy, float* dw, float* db) override {
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

 private:
  nn::LinearDesc m_desc;
  int m_n = 1, m_in = 1, m_out = 1;
  DeviceFloats m_ones;  // n ones, for the bias broadcast and the bias gradient
};

}  // namespace

std::unique_ptr<nn::LinearPlan> make_cublas_linear(const nn::LinearDesc& d) {
  return std::make_unique<CublasLinearPlan>(d);
}

}  // namespace squall::cuda
