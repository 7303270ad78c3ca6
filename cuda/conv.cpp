// Convolution plans on cuDNN's descriptor API, NCHW or NHWC; f32, or bf16/f16 activations.
//
// A convolution is described to cuDNN as one "forward problem" in -> out with a filter
// [K, C, r, s] (cross-correlation, as PyTorch and oneDNN):
//  - ordinary:   in = x [n, c, h, w], out = y [n, k, p, q], filter = w [k, c, r, s];
//  - transposed: in = y [n, k, p, q], out = x [n, c, h, w], filter = w [c, k, r, s]
//    (PyTorch's ConvTranspose2d layout is exactly the filter of that forward problem).
// The three cuDNN calls of the problem then serve both kinds:
//                      ordinary                    transposed
//   forward            ConvolutionForward          ConvolutionBackwardData
//   backward_data      ConvolutionBackwardData     ConvolutionForward
//   backward_weights   BackwardFilter(x, dy)       BackwardFilter(dy, x)
// Bias: AddTensor forward, ConvolutionBackwardBias for db (over y's channels, both kinds).
//
// The descriptors, and the check that cuDNN's output size is squall's, come from the
// device-free description step (detail::ConvDescriptors, cuda/cudnn_describe.hpp); this file
// adds what needs the device.
//
// Algorithms are chosen once per (problem, direction, device) for the process by
// cudnnFind*Algorithm (cuDNN benchmarks every algorithm, allocating its own buffers), at
// plan creation; the fastest one that succeeded, is not a tensor-core variant and needs at
// most kWorkspaceCap of workspace is kept. The descriptor's math type is CUDNN_FMA_MATH and
// stays so (no TF32: f32 results agree with the CPU backend). Should Find fail, cuDNN's
// heuristics choose, and failing those the always-available algorithm (with a warning).
// The choices so far can be listed (detail::conv_algorithm_choices). A second plan
// of the same shape (another learner, or the same layer shape elsewhere in the model)
// reuses the choice. The workspace is the stream's (CudaStream::workspace), asked for at
// run time with the largest of the plan's three sizes.
//
// NHWC (docs/design.md, "Layout"): x, y, dx, dy and the filter in NHWC ([k, r, s, c]); the
// plan keeps its copy of the weights in that order (permuted from the f32 [k, c, r, s] by
// forward) and permutes the weight gradient back.
//
// The copy is the plan's weight mirror (docs/design.md, "Weight mirrors"): the fused
// optimizer update writes it with the weights, and forward_mirrored then runs without the
// copy. While the stream is being captured forward_mirrored copies anyway: a CUDA graph
// replays the same work whatever has written the weights since.
//
// bf16/f16 (docs/design.md, "Precision"): x, y, dx, dy, the filter and its gradient are of
// the activation type, the convolution computes in f32 (cuDNN's "pseudo" configurations),
// and the math type is CUDNN_TENSOR_OP_MATH: tensor cores, and the fastest algorithm of any
// math label. The plan keeps a copy of the f32 weights in the activation type, made by
// forward and used by backward_data, and a weight-gradient buffer of that type converted to
// the f32 gradient. The f32 bias is added, and its gradient summed, by squall's own kernels
// (cuda/bias.cu): cuDNN's AddTensor and BackwardBias do not mix the types.
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_describe.hpp"
#include "cuda/cudnn_util.hpp"
#include "cuda/kernels.cuh"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::cuda {

namespace {

using detail::kOne;
using detail::kZero;
using detail::to_int;

constexpr size_t kWorkspaceCap = size_t{512} << 20;

enum class Direction : int { forward = 0, backward_data = 1, backward_filter = 2 };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward: return "forward";
    case Direction::backward_data: return "backward-data";
    case Direction::backward_filter: return "backward-filter";
  }
  return "?";
}

// The choice for one (problem, direction), as recorded in the process-wide cache.
struct AlgoChoice {
  int algo = 0;            // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace = 0;    // bytes
  float time_ms = -1;      // cuDNN's measurement; -1 when not benchmarked
  bool deterministic = false;
  const char* how = "";    // "find", "heuristic", "default"
};

// device, in (n, c, h, w), filter (K, C, r, s), pad, stride, dilation (h, w each), direction,
// activation type, layout
using AlgoKey = std::array<int, 18>;

struct AlgoCache {
  std::mutex mutex;
  std::map<AlgoKey, AlgoChoice> choices;
  std::map<int, cudnnHandle_t> handles;  // per device, for Find (on the default stream)
};

// Never destroyed: handles must not be torn down after the CUDA runtime at exit.
AlgoCache& algo_cache() {
  static AlgoCache* cache = new AlgoCache;
  return *cache;
}

// The forward problem cuDNN sees, with its descriptors (owned by the plan).
struct Problem {
  cudnnTensorDescriptor_t in, out;
  cudnnFilterDescriptor_t filter;
  cudnnConvolutionDescriptor_t conv;
  AlgoKey key;  // without the direction (set per choice)
};

// The usable results of a Find or heuristic query, best first (cuDNN sorts them fastest
// first): succeeded, within the workspace cap, and for f32 not a tensor-core variant.
// f32: results cuDNN labels FMA come first; results labelled DEFAULT follow (the same
// kernels before Ampere; some cuDNN versions label plain fp32 kernels so). The plan runs
// every f32 algorithm with the descriptor's FMA math type, never the label's, so TF32 is
// never used. bf16/f16 (`reduced`): every label, in cuDNN's order, under the descriptor's
// tensor-op math type.
template <class Perf>
void add_candidates(const Perf* perf, int count, const char* how, bool reduced, std::vector<AlgoChoice>& out) {
  const std::vector<cudnnMathType_t> labels =
      reduced ? std::vector<cudnnMathType_t>{CUDNN_TENSOR_OP_MATH}
              : std::vector<cudnnMathType_t>{CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};
  for (const cudnnMathType_t label : labels) {
    for (int i = 0; i < count; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceCap) continue;
      if (!reduced && p.mathType != label) continue;
      if (reduced && p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      AlgoChoice c;
      c.algo = static_cast<int>(p.algo);
      c.workspace = p.memory;
      c.time_ms = how[0] == 'f' ? p.time : -1.0f;
      c.deterministic = p.determinism == CUDNN_DETERMINISTIC;
      c.how = how;
      out.push_back(c);
    }
  }
}

// Candidates for one direction: benchmarked (Find), then cuDNN's heuristics (should Find
// fail, e.g. for want of memory for its own buffers), then the always-available algorithm.
std::vector<AlgoChoice> candidates(cudnnHandle_t h, const Problem& p, Direction dir) {
  const bool reduced = p.key[16] != static_cast<int>(nn::DType::f32);
  std::vector<AlgoChoice> out;
  int count = 0;
  switch (dir) {
    case Direction::forward: {
      constexpr int kMax = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      if (cudnnFindConvolutionForwardAlgorithm(h, p.in, p.filter, p.conv, p.out, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "find", reduced, out);
      count = 0;
      if (cudnnGetConvolutionForwardAlgorithm_v7(h, p.in, p.filter, p.conv, p.out, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "heuristic", reduced, out);
      AlgoChoice c;
      c.algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
      c.deterministic = true;
      c.how = "default";
      out.push_back(c);
      break;
    }
    case Direction::backward_data: {
      constexpr int kMax = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      if (cudnnFindConvolutionBackwardDataAlgorithm(h, p.filter, p.out, p.conv, p.in, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "find", reduced, out);
      count = 0;
      if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.filter, p.out, p.conv, p.in, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "heuristic", reduced, out);
      AlgoChoice c;
      c.algo = reduced ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 : CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
      c.how = "default";
      out.push_back(c);
      break;
    }
    case Direction::backward_filter: {
      constexpr int kMax = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      if (cudnnFindConvolutionBackwardFilterAlgorithm(h, p.in, p.out, p.conv, p.filter, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "find", reduced, out);
      count = 0;
      if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.in, p.out, p.conv, p.filter, kMax, &count, perf) ==
          CUDNN_STATUS_SUCCESS)
        add_candidates(perf, count, "heuristic", reduced, out);
      AlgoChoice c;
      c.algo = reduced ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
      c.how = "default";
      out.push_back(c);
      break;
    }
  }
  return out;
}

// The workspace an algorithm needs for this problem under the descriptor's (FMA) math type,
// as cuDNN states it; the status says whether cuDNN supports the algorithm there at all.
cudnnStatus_t workspace_size(cudnnHandle_t h, const Problem& p, Direction dir, int algo, size_t* bytes) {
  *bytes = 0;
  switch (dir) {
    case Direction::forward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.in, p.filter, p.conv, p.out,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Direction::backward_data:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.filter, p.out, p.conv, p.in,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Direction::backward_filter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, p.in, p.out, p.conv, p.filter, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

std::string problem_str(const AlgoKey& k) {
  // in [n,c,h,w] filter [K,C,r,s] pad ph,pw stride sh,sw dilation dh,dw type
  static const char* const kLabels[] = {"in [", ",", ",", ",", "] filter [", ",", ",", ",",
                                        "] pad ", ",", " stride ", ",", " dilation ", ","};
  std::string s;
  for (size_t i = 0; i < 14; ++i) {
    s += kLabels[i];
    s += std::to_string(k[i + 1]);
  }
  s += " ";
  s += nn::dtype_name(static_cast<nn::DType>(k[16]));
  s += " ";
  s += nn::layout_name(static_cast<nn::Layout>(k[17]));
  return s;
}

// The algorithm for (problem, direction) on the current device: from the cache, or found
// now (benchmarked by cuDNN, host-blocking) and cached for the process.
AlgoChoice choose(const Problem& p, Direction dir) {
  AlgoKey key = p.key;
  key[15] = static_cast<int>(dir);
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);  // also serialises use of the Find handles
  if (auto it = cache.choices.find(key); it != cache.choices.end()) return it->second;
  const int device = key[0];
  cudnnHandle_t& h = cache.handles[device];
  if (h == nullptr) SQUALL_CUDNN_CHECK(cudnnCreate(&h));
  // The first candidate cuDNN accepts under the FMA descriptor, within the cap; the last
  // candidate (the always-available algorithm) is taken whatever its workspace.
  const std::vector<AlgoChoice> all = candidates(h, p, dir);
  AlgoChoice c = all.back();
  bool found = false;
  for (const AlgoChoice& cand : all) {
    size_t bytes = 0;
    if (workspace_size(h, p, dir, cand.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    if (&cand != &all.back() && bytes > kWorkspaceCap) continue;
    c = cand;
    c.workspace = std::max(bytes, cand.workspace);
    found = true;
    break;
  }
  if (!found) {  // not even the always-available algorithm: cuDNN says why, and that is fatal
    size_t bytes = 0;
    SQUALL_CUDNN_CHECK(workspace_size(h, p, dir, c.algo, &bytes));
    c.workspace = bytes;
  }
  if (std::string(c.how) != "find")
    log::warn(std::string("cuDNN convolution ") + direction_name(dir) + " " + problem_str(key) +
              ": no benchmarked algorithm of the plan's math type within the workspace cap, using the " + c.how +
              " algorithm " + std::to_string(c.algo));
  cache.choices.emplace(key, c);
  return c;
}

class CudnnConvPlan final : public nn::ConvPlan {
 public:
  // `cudnn`: the description step's descriptors (cuda/cudnn_describe.hpp); the plan adds the
  // device part: the algorithms, their workspace and the weight copies.
  explicit CudnnConvPlan(std::unique_ptr<const detail::ConvDescriptors> cudnn)
      : m_cudnn(std::move(cudnn)), m_desc(m_cudnn->desc()) {
    const nn::ConvDesc& d = m_desc;
    const char* what = "conv";
    m_reduced = m_cudnn->reduced();
    m_nhwc = m_cudnn->nhwc();
    m_copy = m_cudnn->copies_weights();
    m_x = m_cudnn->x();
    m_y = m_cudnn->y();
    m_b = m_cudnn->bias();
    m_w = m_cudnn->filter();
    m_conv = m_cudnn->conv();
    m_in = m_cudnn->problem_in();
    m_out = m_cudnn->problem_out();
    m_filter = m_cudnn->filter_shape();
    const nn::Shape& ws = m_filter;
    if (m_copy) {
      const size_t bytes = static_cast<size_t>(ws.numel()) * nn::dtype_size(d.dtype);
      m_w_copy = detail::DeviceBytes(bytes);
      m_dw_copy = detail::DeviceBytes(bytes);
    }

    int device = 0;
    SQUALL_CUDA_CHECK(cudaGetDevice(&device));
    const nn::Shape in_shape = m_cudnn->problem_in_shape();
    Problem p{m_in, m_out, m_w, m_conv, {}};
    p.key = {device,
             to_int(in_shape.n(), what),
             to_int(in_shape.c(), what),
             to_int(in_shape.h(), what),
             to_int(in_shape.w(), what),
             to_int(ws.n(), what),
             to_int(ws.c(), what),
             to_int(ws.h(), what),
             to_int(ws.w(), what),
             to_int(d.pad_h, what),
             to_int(d.pad_w, what),
             to_int(d.stride_h, what),
             to_int(d.stride_w, what),
             to_int(d.dil_h, what),
             to_int(d.dil_w, what),
             0,
             static_cast<int>(d.dtype),
             static_cast<int>(d.layout)};
    m_fwd = choose(p, Direction::forward);
    m_bwd_data = choose(p, Direction::backward_data);
    m_bwd_filter = choose(p, Direction::backward_filter);
    m_workspace = std::max({m_fwd.workspace, m_bwd_data.workspace, m_bwd_filter.workspace});
  }

  void forward(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    run_forward(cuda_stream(s), x, w, b, y, true);
  }

  void forward_mirrored(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    CudaStream& cs = cuda_stream(s);
    run_forward(cs, x, w, b, y, cs.capturing());
  }

  nn::WeightMirror weight_mirror() const override {
    if (!m_copy) return {};
    return {m_w_copy.data(), m_desc.dtype, false, m_nhwc, m_filter.n(), m_filter.c(), m_filter.h() * m_filter.w()};
  }

  void backward_data(nn::Stream& s, const void* dy, const float* w, void* dx) override {
    if (dx == nullptr) return;
    CudaStream& cs = cuda_stream(s);
    void* ws = workspace(cs);
    const void* wt = m_copy ? static_cast<const void*>(m_w_copy.data()) : w;
    if (m_desc.transposed)
      problem_forward(cs, dy, wt, dx, ws);
    else
      problem_backward_data(cs, wt, dy, dx, ws);
  }

  void backward_weights(nn::Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    CudaStream& cs = cuda_stream(s);
    void* ws = workspace(cs);
    // The forward problem's input and output gradient: (x, dy), or (dy, x) when transposed.
    const void* in = m_desc.transposed ? dy : x;
    const void* dout = m_desc.transposed ? x : dy;
    void* dfilter = m_copy ? static_cast<void*>(m_dw_copy.data()) : static_cast<void*>(dw);
    SQUALL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cs.cudnn(), &kOne, m_in, in, m_out, dout, m_conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(m_bwd_filter.algo), ws, m_workspace, &kZero, m_w, dfilter));
    if (m_copy)
      kernels::permute_convert(cs.stream(), m_dw_copy.data(), detail::kernel_type(m_desc.dtype), m_nhwc, dw, 0, false,
                               m_filter.n(), m_filter.c(), m_filter.h(), m_filter.w());
    if (!m_desc.bias || db == nullptr) return;
    if (m_copy) {
      const nn::Shape out = m_desc.output();
      const size_t scratch = kernels::bias_grad_scratch_floats(out.n(), out.c(), out.h() * out.w());
      kernels::bias_grad(cs.stream(), detail::kernel_type(m_desc.dtype), m_nhwc, dy, db, out.n(), out.c(),
                         out.h() * out.w(), m_reduced, static_cast<float*>(cs.scratch(scratch * sizeof(float))));
    } else {
      SQUALL_CUDNN_CHECK(cudnnConvolutionBackwardBias(cs.cudnn(), &kOne, m_y, dy, &kZero, m_b, db));
    }
  }

 private:
  // copy_weights: the f32 weights into the plan's copy first (else the copy holds them).
  void run_forward(CudaStream& cs, const void* x, const float* w, const float* b, void* y, bool copy_weights) {
    void* ws = workspace(cs);
    const void* wt = w;
    if (m_copy) {  // the weights in the activations' type and order, kept for backward_data
      if (copy_weights)
        kernels::permute_convert(cs.stream(), w, 0, false, m_w_copy.data(), detail::kernel_type(m_desc.dtype), m_nhwc,
                                 m_filter.n(), m_filter.c(), m_filter.h(), m_filter.w());
      wt = m_w_copy.data();
    }
    if (m_desc.transposed)
      problem_backward_data(cs, wt, x, y, ws);
    else
      problem_forward(cs, x, wt, y, ws);
    if (!m_desc.bias || b == nullptr) return;
    if (m_copy) {
      const nn::Shape out = m_desc.output();
      kernels::bias_add(cs.stream(), detail::kernel_type(m_desc.dtype), m_nhwc, y, b, out.n(), out.c(),
                        out.h() * out.w());
    } else {
      SQUALL_CUDNN_CHECK(cudnnAddTensor(cs.cudnn(), &kOne, m_b, b, &kOne, m_y, y));
    }
  }

  void* workspace(CudaStream& cs) const { return m_workspace > 0 ? cs.workspace(m_workspace) : nullptr; }

  // out = conv(in, w) of the forward problem.
  void problem_forward(CudaStream& cs, const void* in, const void* w, void* out, void* ws) {
    SQUALL_CUDNN_CHECK(cudnnConvolutionForward(cs.cudnn(), &kOne, m_in, in, m_w, w, m_conv,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(m_fwd.algo), ws,
                                               m_workspace, &kZero, m_out, out));
  }
  // d_in = conv^T(d_out, w) of the forward problem.
  void problem_backward_data(CudaStream& cs, const void* w, const void* d_out, void* d_in, void* ws) {
    SQUALL_CUDNN_CHECK(cudnnConvolutionBackwardData(cs.cudnn(), &kOne, m_w, w, m_out, d_out, m_conv,
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(m_bwd_data.algo),
                                                    ws, m_workspace, &kZero, m_in, d_in));
  }

  std::unique_ptr<const detail::ConvDescriptors> m_cudnn;  // owns the descriptors below
  nn::ConvDesc m_desc;
  cudnnTensorDescriptor_t m_x = nullptr, m_y = nullptr;  // our x and y
  cudnnTensorDescriptor_t m_b = nullptr;                 // bias [1, k, 1, 1] (f32 NCHW only)
  cudnnFilterDescriptor_t m_w = nullptr;
  cudnnConvolutionDescriptor_t m_conv = nullptr;
  cudnnTensorDescriptor_t m_in = nullptr, m_out = nullptr;  // the forward problem's (m_x / m_y)
  AlgoChoice m_fwd, m_bwd_data, m_bwd_filter;
  size_t m_workspace = 0;  // the largest of the three
  bool m_reduced = false;  // bf16/f16 activations
  bool m_nhwc = false;     // NHWC activations (and filter copies)
  bool m_copy = false;     // either: the plan keeps copies of the weights and their gradient
  nn::Shape m_filter;      // the forward problem's filter, [k, c, r, s] or [c, k, r, s]
  detail::DeviceBytes m_w_copy, m_dw_copy;  // the weights of the last forward, the weight gradient
};

}  // namespace

std::vector<std::string> detail::conv_algorithm_choices() {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::vector<std::string> lines;
  for (const auto& [key, c] : cache.choices) {
    std::string line = "device " + std::to_string(key[0]) + " " + direction_name(static_cast<Direction>(key[15])) +
                       " " + problem_str(key) + ": algorithm " + std::to_string(c.algo) + " (" + c.how;
    if (c.time_ms >= 0) line += ", " + std::to_string(c.time_ms) + " ms";
    line += ", workspace " + std::to_string(c.workspace) + " bytes";
    line += c.deterministic ? ", deterministic)" : ", not deterministic)";
    lines.push_back(std::move(line));
  }
  return lines;
}

std::unique_ptr<nn::ConvPlan> make_cudnn_conv(const nn::ConvDesc& d) {
  return std::make_unique<CudnnConvPlan>(std::make_unique<const detail::ConvDescriptors>(d));
}

}  // namespace squall::cuda
