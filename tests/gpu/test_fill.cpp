#include <catch2/catch.hpp>

#include <vector>

#include "cuda/check.cuh"
#include "cuda/fill.cuh"

TEST_CASE("fill kernel writes every element, odd sizes included", "[cuda]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000003}}) {
    float* d = nullptr;
    SQUALL_CUDA_CHECK(cudaMalloc(&d, (n + 1) * sizeof(float)));
    SQUALL_CUDA_CHECK(cudaMemset(d, 0, (n + 1) * sizeof(float)));
    squall::cuda::fill(d, n, 2.5f, nullptr);
    std::vector<float> h(n + 1);
    SQUALL_CUDA_CHECK(cudaMemcpy(h.data(), d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost));
    SQUALL_CUDA_CHECK(cudaFree(d));
    for (size_t i = 0; i < n; ++i) REQUIRE(h[i] == 2.5f);
    REQUIRE(h[n] == 0.0f);  // and nothing past the end
  }
}
