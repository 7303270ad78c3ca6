// CudaBackend: device selection, the memory pools, streams and events, copies, and the
// dispatch of every operation to a plan (plans.hpp) or a kernel (kernels.cuh).
#include "cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/cuda_factory.hpp"
#include "cuda/kernels.cuh"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/nn/size_pool.hpp"

namespace squall::cuda {

// ---- streams and events ------------------------------------------------------------------

namespace {

// cudaMalloc'd memory of `device`, freed when its last owner (a stream, a captured graph)
// lets go. Deleters do not throw: a failure at exit is ignored.
std::shared_ptr<void> owned_device_block(int device, void* data) {
  return std::shared_ptr<void>(data, [device](void* p) {
    cudaSetDevice(device);
    cudaFree(p);
  });
}

}  // namespace

CudaStream::CudaStream(int device) : m_device(device) {
  SQUALL_CUDA_CHECK(cudaSetDevice(device));
  // Non-blocking: a learner's stream never waits for the legacy default stream.
  SQUALL_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
}

cudnnHandle_t CudaStream::cudnn() {
  if (!m_cudnn) {
    refuse_in_capture("making a cuDNN handle");
    SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
    SQUALL_CUDNN_CHECK(cudnnCreate(&m_cudnn));
    SQUALL_CUDNN_CHECK(cudnnSetStream(m_cudnn, m_stream));
  }
  return m_cudnn;
}

cublasHandle_t CudaStream::cublas() {
  if (!m_cublas) {
    refuse_in_capture("making a cuBLAS handle");
    SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
    SQUALL_CUBLAS_CHECK(cublasCreate(&m_cublas));
    SQUALL_CUBLAS_CHECK(cublasSetStream(m_cublas, m_stream));
    // A workspace of the stream's own, set explicitly: without one cuBLAS allocates its own
    // for every graph a capture records with the handle. cuBLAS's guide asks for 32 MiB on
    // Hopper and 4 MiB before it.
    int major = 0;
    SQUALL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, m_device));
    const size_t bytes = major >= 9 ? size_t{32} << 20 : size_t{4} << 20;
    void* data = nullptr;
    SQUALL_CUDA_CHECK(cudaMalloc(&data, bytes));
    m_cublas_workspace = owned_device_block(m_device, data);
    SQUALL_CUBLAS_CHECK(cublasSetWorkspace(m_cublas, data, bytes));
    // fp32 as fp32 (no TF32): results agree with the CPU reference.
    SQUALL_CUBLAS_CHECK(cublasSetMathMode(m_cublas, CUBLAS_DEFAULT_MATH));
  }
  return m_cublas;
}

CudaStream::~CudaStream() {
  // Destructors do not throw: a failure here is ignored. The device first: the destroying
  // thread need not be one that was bound to it.
  cudaSetDevice(m_device);
  if (m_stream) cudaStreamSynchronize(m_stream);
  m_workspace.block.reset();  // freed here unless a captured graph still holds it
  m_scratch.block.reset();
  if (m_cublas) cublasDestroy(m_cublas);
  m_cublas_workspace.reset();
  if (m_cudnn) cudnnDestroy(m_cudnn);
  if (m_stream) cudaStreamDestroy(m_stream);
}

void* CudaStream::workspace(size_t bytes) { return grow(m_workspace, bytes, "workspace"); }
void* CudaStream::scratch(size_t bytes) { return grow(m_scratch, bytes, "scratch"); }

std::vector<std::shared_ptr<void>> CudaStream::held_blocks() const {
  std::vector<std::shared_ptr<void>> out;
  if (m_workspace.block) out.push_back(m_workspace.block);
  if (m_scratch.block) out.push_back(m_scratch.block);
  if (m_cublas_workspace) out.push_back(m_cublas_workspace);
  return out;
}

bool CudaStream::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SQUALL_CUDA_CHECK(cudaStreamIsCapturing(m_stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void* CudaStream::grow(Growing& g, size_t bytes, const char* what) {
  if (bytes <= g.bytes) return g.block.get();
  // Plans ask for the same sizes every step, so a stream grows in its first pass only; a
  // capture comes after that pass (learners.cpp), and growing inside one would put a
  // cudaMalloc and a host wait into the graph: refused, the pass then runs eagerly.
  if (capturing_stream() == m_stream || capturing())
    throw nn::CaptureError("cuda backend: the stream's " + std::string(what) + " would grow from " +
                           std::to_string(g.bytes >> 20) + " MiB to " + std::to_string(bytes >> 20) +
                           " MiB while a CUDA graph is being captured");
  // The old block may still be in use by work on this stream: that work completes first.
  // A graph captured earlier may point into it too: then the graph keeps it (held_blocks).
  SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
  SQUALL_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  g.block.reset();
  g.bytes = 0;
  const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);  // whole MiB
  void* data = nullptr;
  if (const cudaError_t e = cudaMalloc(&data, rounded); e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cuda backend: cannot allocate a " + std::to_string(rounded >> 20) + " MiB " + what + " on GPU " +
                std::to_string(m_device) + " (" + cudaGetErrorString(e) +
                "): lower the batch or the learners per GPU");
  }
  g.block = owned_device_block(m_device, data);
  g.bytes = rounded;
  return data;
}

CudaEvent::CudaEvent() { SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming)); }

CudaEvent::~CudaEvent() {
  if (m_event) cudaEventDestroy(m_event);
}

namespace {

cudaEvent_t raw_event(Event& e) { return static_cast<CudaEvent&>(e).event(); }

// ---- memory: the size-keyed pools (src/nn/size_pool.hpp), device and pinned host ----------
//
// A Buffer is returned to its pool when its last copy is destroyed: it must outlive the work
// enqueued on it (the trainer's buffers live as long as the model; temporaries are released
// after a synchronize).
enum class MemoryKind { device, pinned };

SizePool::Source cuda_memory(MemoryKind kind, int device) {
  return SizePool::Source{
      [](size_t bytes) {
        const size_t quantum = bytes < (size_t{1} << 20) ? 512 : (size_t{1} << 20);
        return std::max(quantum, (bytes + quantum - 1) / quantum * quantum);
      },
      [kind, device](size_t bytes) -> void* {
        // A cached block is fine inside a capture (no CUDA call); a new one is not.
        refuse_in_capture(kind == MemoryKind::device ? "allocating device memory" : "allocating pinned host memory");
        void* p = nullptr;
        const cudaError_t e = kind == MemoryKind::device ? (cudaSetDevice(device), cudaMalloc(&p, bytes))
                                                       : cudaMallocHost(&p, bytes);
        if (e == cudaSuccess) return p;
        cudaGetLastError();
        return nullptr;
      },
      [kind, device](void* p) {
        cudaSetDevice(device);
        kind == MemoryKind::device ? (void)cudaFree(p) : (void)cudaFreeHost(p);
      }};
}

Buffer pooled(const std::shared_ptr<SizePool>& pool, size_t count, DType dtype, MemoryKind kind, int device) {
  return pooled_buffer(pool, count, dtype, [kind, device](size_t bytes) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(std::string("cuda backend: cannot allocate ") + std::to_string(bytes >> 20) + " MiB of " +
                (kind == MemoryKind::device ? "device" : "pinned host") + " memory on GPU " + std::to_string(device) +
                " (" + std::to_string(free_b >> 20) + " of " + std::to_string(total_b >> 20) +
                " MiB free): lower the batch or the learners per GPU");
  });
}

// ---- fused updates: the tensor table on the device ------------------------------------------

// A tensor's row of the device table; its mirror, if any, as the update kernels write it
// (cuda/optim_ops.cuh, write_mirror).
kernels::DeviceTensor device_tensor(const TensorRef& t, uint64_t state_offset) {
  kernels::DeviceTensor d{t.w, t.g, t.n, state_offset, t.decay ? 1.0f : 0.0f, 0.0f, nullptr, 0, 0, 0, 0};
  const WeightMirror& m = t.mirror;
  if (m.data == nullptr) return d;
  if (m.c > UINT32_MAX || m.rs > UINT32_MAX)
    throw Error("tensor set: a weight mirror of " + std::to_string(m.c) + " x " + std::to_string(m.rs) +
                " elements per filter is too large");
  d.mirror = m.data;
  d.mirror_type = static_cast<int32_t>(m.dtype);
  d.mirror_widened = m.widened ? 1 : 0;
  d.mirror_c = m.nhwc ? static_cast<uint32_t>(m.c) : 0;
  d.mirror_rs = m.nhwc ? static_cast<uint32_t>(m.rs) : 0;
  return d;
}

class CudaTensorSet final : public TensorSet {
 public:
  static constexpr int32_t k_chunk = 65536;  // elements per chunk of the fused kernels

  CudaTensorSet(std::vector<TensorRef> tensors, const std::shared_ptr<SizePool>& pool, int device)
      : m_tensors(std::move(tensors)), m_device(device) {
    std::vector<kernels::DeviceTensor> table;
    std::vector<int32_t> chunk_tensor;
    std::vector<uint64_t> chunk_begin;
    uint64_t offset = 0;
    for (size_t i = 0; i < m_tensors.size(); ++i) {
      const auto& t = m_tensors[i];
      table.push_back(device_tensor(t, offset));
      for (uint64_t b = 0; b < t.n; b += k_chunk) {
        chunk_tensor.push_back(static_cast<int32_t>(i));
        chunk_begin.push_back(b);
      }
      offset += t.n;
    }
    m_table_buf = device_floats(pool, std::max<size_t>(table.size() * sizeof(kernels::DeviceTensor), 1), DType::f32);
    m_chunk_tensor_buf = device_floats(pool, std::max<size_t>(chunk_tensor.size(), 1), DType::i32);
    m_chunk_begin_buf = device_floats(pool, std::max<size_t>(chunk_begin.size() * 2, 1), DType::i32);
    // Before training: plain synchronous copies.
    if (!table.empty())
      SQUALL_CUDA_CHECK(cudaMemcpy(m_table_buf.raw(), table.data(), table.size() * sizeof(table[0]), cudaMemcpyHostToDevice));
    if (!chunk_tensor.empty()) {
      SQUALL_CUDA_CHECK(cudaMemcpy(m_chunk_tensor_buf.raw(), chunk_tensor.data(), chunk_tensor.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice));
      SQUALL_CUDA_CHECK(cudaMemcpy(m_chunk_begin_buf.raw(), chunk_begin.data(), chunk_begin.size() * sizeof(uint64_t),
                                   cudaMemcpyHostToDevice));
    }
    m_chunks.tensors = static_cast<const kernels::DeviceTensor*>(m_table_buf.raw());
    m_chunks.chunk_tensor = m_chunk_tensor_buf.as<int32_t>();
    m_chunks.chunk_begin = static_cast<const uint64_t*>(m_chunk_begin_buf.raw());
    m_chunks.chunks = static_cast<int32_t>(chunk_tensor.size());
    m_chunks.tensor_count = static_cast<int32_t>(m_tensors.size());
    m_chunks.chunk_elems = k_chunk;
    m_total = offset;
    m_pool = pool;
  }

  const std::vector<TensorRef>& tensors() const override { return m_tensors; }
  const kernels::ChunkTable& chunks() const { return m_chunks; }
  // LAMB's update direction (every tensor) and the per-tensor norms: made on first use.
  float* update() {
    if (!m_update) m_update = device_floats(m_pool, std::max<uint64_t>(m_total, 1), DType::f32);
    return m_update.data();
  }
  float* norms() {
    if (!m_norms)
      m_norms = device_floats(
          m_pool, std::max<size_t>(kernels::norms_scratch_floats(m_chunks.chunks, m_chunks.tensor_count), 1), DType::f32);
    return m_norms.data();
  }

 private:
  Buffer device_floats(const std::shared_ptr<SizePool>& pool, size_t count, DType t) const {
    return pooled(pool, count, t, MemoryKind::device, m_device);
  }

  std::vector<TensorRef> m_tensors;
  int m_device;
  Buffer m_table_buf, m_chunk_tensor_buf, m_chunk_begin_buf, m_update, m_norms;
  kernels::ChunkTable m_chunks{};
  uint64_t m_total = 0;
  std::shared_ptr<SizePool> m_pool;
};

// ---- capture: a CUDA graph of one stream's work ---------------------------------------------

// The graph owns the stream's workspace and scratch blocks its nodes point into, so a later
// growth of the stream's workspace cannot free memory a replay still uses.
class CudaCaptured final : public Captured {
 public:
  CudaCaptured(cudaGraph_t graph, cudaGraphExec_t exec, std::vector<std::shared_ptr<void>> held)
      : m_graph(graph), m_exec(exec), m_held(std::move(held)) {}
  ~CudaCaptured() override {
    // A replay still in flight completes first; the executable graph is freed after it.
    if (m_exec) cudaGraphExecDestroy(m_exec);
    if (m_graph) cudaGraphDestroy(m_graph);
  }
  cudaGraphExec_t exec() const { return m_exec; }

 private:
  cudaGraph_t m_graph;
  cudaGraphExec_t m_exec;
  std::vector<std::shared_ptr<void>> m_held;  // destroyed after the graph (declared last)
};

// ---- the backend -------------------------------------------------------------------------------

// The kernels' dtype code (cuda/kernels.cuh); they refuse codes that are not a float type.
int code(DType t) { return static_cast<int>(t); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device)
      : m_device(device),
        m_pool(std::make_shared<SizePool>(cuda_memory(MemoryKind::device, device))),
        m_pinned(std::make_shared<SizePool>(cuda_memory(MemoryKind::pinned, device))) {
    SQUALL_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    SQUALL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    m_info.backend = "cuda";
    m_info.index = device;
    m_info.name = prop.name;
    m_info.memory_bytes = prop.totalGlobalMem;
    m_compute_major = prop.major;
    m_compute_minor = prop.minor;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) m_info.bus_id = bus;
  }

  std::string name() const override { return "cuda"; }
  DeviceInfo info() const override { return m_info; }
  // Native f32, bf16 and f16 (tensor cores); nothing fused yet, no blocked layout (cuDNN takes
  // NCHW and NHWC), and the loss always with its gradient.
  Capabilities capabilities() const override {
    Capabilities c;
    c.host_accessible = false;
    c.can_capture = true;
    c.threads = 1;
    c.loss_without_gradient = false;
    return c;
  }
  void bind_calling_thread(int) override { SQUALL_CUDA_CHECK(cudaSetDevice(m_device)); }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(m_device); }
  std::unique_ptr<Event> create_event() override {
    SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
    return std::make_unique<CudaEvent>();
  }
  void record(Event& e, Stream& s) override { SQUALL_CUDA_CHECK(cudaEventRecord(raw_event(e), raw(s))); }
  void wait(Stream& s, Event& e) override { SQUALL_CUDA_CHECK(cudaStreamWaitEvent(raw(s), raw_event(e), 0)); }
  void synchronize(Stream& s) override {
    refuse_in_capture("waiting for a stream on the host");
    SQUALL_CUDA_CHECK(cudaStreamSynchronize(raw(s)));
  }
  void synchronize(Event& e) override {
    refuse_in_capture("waiting for an event on the host");
    SQUALL_CUDA_CHECK(cudaEventSynchronize(raw_event(e)));
  }
  void synchronize_all() override {
    SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
    SQUALL_CUDA_CHECK(cudaDeviceSynchronize());
  }
  bool ready(Event& e) override { return SQUALL_CUDA_QUERY(cudaEventQuery(raw_event(e))); }

  void begin_capture(Stream& s) override {
    if (capturing_stream() != nullptr) throw nn::CaptureError("cuda backend: this thread is capturing already");
    // Thread-local: the other learners' threads keep enqueueing on their own streams.
    SQUALL_CUDA_CHECK(cudaStreamBeginCapture(raw(s), cudaStreamCaptureModeThreadLocal));
    set_capturing(raw(s));
  }
  std::unique_ptr<Captured> end_capture(Stream& s) override {
    set_capturing(nullptr);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(raw(s), &graph);
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      log::warn(std::string("cuda backend: capturing a learner's step failed (") + cudaGetErrorString(e) +
           "); it runs without a CUDA graph");
      return nullptr;
    }
    return std::make_unique<CudaCaptured>(graph, exec, cuda_stream(s).held_blocks());
  }
  void abandon_capture(Stream& s) override {
    set_capturing(nullptr);
    cudaGraph_t graph = nullptr;
    // Ends the capture whatever state it is in (an invalidated capture answers with an
    // error and no graph); what was recorded is dropped, and the stream runs eagerly again.
    (void)cudaStreamEndCapture(raw(s), &graph);
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
  }
  void replay(Captured& c, Stream& s) override {
    SQUALL_CUDA_CHECK(cudaGraphLaunch(static_cast<CudaCaptured&>(c).exec(), raw(s)));
  }

  Buffer allocate_memory(size_t count, DType dtype) override {
    return pooled(m_pool, count, dtype, MemoryKind::device, m_device);
  }
  Buffer allocate_host(size_t count, DType dtype) override {
    return pooled(m_pinned, count, dtype, MemoryKind::pinned, m_device);
  }
  // cudaMemcpyAsync with unified addressing: pinned host memory is copied asynchronously;
  // pageable memory is staged by the driver, and the call returns once it may be reused.
  void copy_bytes_from_host(Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes) SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, raw(s)));
  }
  void copy_bytes_to_host(Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes) SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, raw(s)));
  }
  void copy_bytes(Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, raw(s)));
  }
  void convert(Stream& s, const void* src, DType from, void* dst, DType to, size_t n) override {
    // The kernels' codes cover f32, bf16 and f16 (cuda/kernels.cuh); the integer and f64
    // types of the shared DType are not theirs.
    for (DType t : {from, to})
      if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
        throw Error(std::string("convert: ") + dtype_name(t) + " is not a float type");
    kernels::convert(raw(s), src, code(from), dst, code(to), n);
  }
  void permute_layout(Stream& s, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
                      int64_t h, int64_t w) override {
    if (n < 0 || c < 0 || h < 0 || w < 0) throw Error("permute_layout: bad shape " + Shape(n, c, h, w).str());
    check_layout(from, "permute_layout");
    check_layout(to, "permute_layout");
    kernels::permute_bits(raw(s), dtype_size(t), src, from == Layout::nhwc, dst, to == Layout::nhwc, n, c, h, w);
  }
  void permute_convert(Stream& s, const void* src, DType from, Layout from_layout, void* dst, DType to,
                       Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) override {
    for (DType t : {from, to})
      if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
        throw Error(std::string("permute_convert: ") + dtype_name(t) + " is not a float type");
    if (n < 0 || c < 0 || h < 0 || w < 0) throw Error("permute_convert: bad shape " + Shape(n, c, h, w).str());
    check_layout(from_layout, "permute_convert");
    check_layout(to_layout, "permute_convert");
    kernels::permute_convert(raw(s), src, code(from), from_layout == Layout::nhwc, dst, code(to),
                             to_layout == Layout::nhwc, n, c, h, w);
  }

  // The CPU's reference emulation has no counterpart here: the GPU computes in the type.
  void set_reference_precision(bool) override {}

  // Plans are made on this backend's device (cuDNN's algorithm search runs there).
  std::unique_ptr<ConvPlan> make_conv(const ConvDesc& d) override {
    check_type(d.dtype, "convolution");
    check_layout(d.layout, "convolution");
    check_layout(d.y_layout(), "convolution");
    if (d.y_layout() != d.layout) throw Error("convolution: the CUDA backend reads and writes one layout");
    bind_calling_thread(0);
    return make_cudnn_conv(d);
  }
  std::unique_ptr<LinearPlan> make_linear(const LinearDesc& d) override {
    check_type(d.dtype, "linear layer");
    bind_calling_thread(0);
    return make_cublas_linear(d);
  }
  std::unique_ptr<PoolPlan> make_pool(const PoolDesc& d) override {
    check_type(d.dtype, "pooling");
    check_layout(d.layout, "pooling");
    bind_calling_thread(0);
    return make_cudnn_pool(d);
  }
  std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc& d) override {
    check_type(d.dtype, "batch norm");
    check_layout(d.layout, "batch norm");
    bind_calling_thread(0);
    // Statistics over a split sample's group: the plan's own sums, merged on the host between
    // the two halves of its pass (docs/design.md, "One sample across ranks").
    if (d.group != nullptr) return make_group_batch_norm(d);
    return make_cudnn_batch_norm(d);
  }

  void fill(Stream& s, float* x, size_t n, float v) override { kernels::fill(raw(s), x, n, v); }
  void axpy(Stream& s, float alpha, const float* x, float* y, size_t n) override { kernels::axpy(raw(s), alpha, x, y, n); }
  void scale(Stream& s, float alpha, float* x, size_t n) override { kernels::scale(raw(s), alpha, x, n); }
  void axpby(Stream& s, float alpha, const float* x, float beta, float* y, size_t n) override {
    kernels::axpby(raw(s), alpha, x, beta, y, n);
  }

  // The typed calls: one kernel template per operation over f32, bf16 and f16 (kernels.cuh).
  void relu_forward(Stream& s, DType t, const void* x, void* y, size_t n) override {
    kernels::relu_forward(raw(s), code(t), x, y, n);
  }
  void relu_backward(Stream& s, DType t, const void* y, const void* dy, void* dx, size_t n) override {
    kernels::relu_backward(raw(s), code(t), y, dy, dx, n);
  }
  void add(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) override {
    kernels::add(raw(s), code(t), a, b, y, n);
  }
  void dropout_forward(Stream& s, DType t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                       uint64_t offset) override {
    kernels::dropout_forward(raw(s), code(t), x, y, mask, n, p, seed, offset);
  }
  void multiply(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) override {
    kernels::multiply(raw(s), code(t), a, b, y, n);
  }
  void copy_strided(Stream& s, DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override {
    kernels::copy_strided(raw(s), dtype_size(t), dst, dst_stride, dst_offset, src, src_stride, src_offset, rows,
                          count);
  }
  void copy_block(Stream& s, DType t, void* dst, const void* src, const BlockCopy& block, bool accumulate) override {
    kernels::copy_block(raw(s), code(t), dst, src, block, accumulate);
  }
  void global_avg_pool_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t hw) override {
    kernels::global_avg_pool_forward(raw(s), code(t), x, y, nc, hw);
  }
  void global_avg_pool_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t hw) override {
    kernels::global_avg_pool_backward(raw(s), code(t), dy, dx, nc, hw);
  }
  void bilinear_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                        int64_t ow) override {
    kernels::bilinear_forward(raw(s), code(t), x, y, nc, h, w, oh, ow);
  }
  void bilinear_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) override {
    kernels::bilinear_backward(raw(s), code(t), dy, dx, nc, h, w, oh, ow);
  }
  void softmax_cross_entropy(Stream& s, DType t, const void* logits, const int32_t* labels,
                             const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                             float* loss, const float* grad_scale) override {
    // Scratch from the stream's workspace: the work on one stream runs in order, so the
    // cuDNN calls and this loss can share it.
    auto& cs = cuda_stream(s);
    auto* scratch = static_cast<float*>(cs.workspace(kernels::loss_scratch_floats(n * hw) * sizeof(float)));
    kernels::softmax_cross_entropy(cs.stream(), code(t), logits, labels, class_weights, n, classes, hw, dlogits,
                                   loss, grad_scale, scratch);
  }
  void argmax_channels(Stream& s, DType t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) override {
    kernels::argmax_channels(raw(s), code(t), x, out, n, c, hw);
  }
  void accumulate_confusion(Stream& s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                            int32_t* confusion) override {
    kernels::accumulate_confusion(raw(s), labels, pred, n, classes, confusion);
  }

  void sum_squares(Stream& s, const float* x, size_t n, float* out) override {
    auto& cs = cuda_stream(s);
    auto* scratch = static_cast<float*>(cs.workspace(kernels::reduce_scratch_floats(n) * sizeof(float)));
    kernels::sum_squares(cs.stream(), x, n, out, scratch);
  }

  std::unique_ptr<TensorSet> make_tensor_set(std::vector<TensorRef> tensors) override {
    for (const auto& t : tensors) {
      if (t.n > 0 && (!t.w || !t.g)) throw Error("tensor set: a tensor has no parameter or gradient memory");
      check_weight_mirror(t, "tensor set");
    }
    SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
    return std::make_unique<CudaTensorSet>(std::move(tensors), m_pool, m_device);
  }
  void sgd_update(Stream& s, TensorSet& set, float* velocity, const SgdArgs& a) override {
    auto& t = static_cast<CudaTensorSet&>(set);
    if (t.chunks().chunks == 0) return;
    kernels::sgd_update(raw(s), t.chunks(), velocity, a.lr, a.momentum, a.weight_decay, a.nesterov);
  }
  void adam_update(Stream& s, TensorSet& set, float* m, float* v, const AdamArgs& a) override {
    auto& t = static_cast<CudaTensorSet&>(set);
    if (t.chunks().chunks == 0) return;
    const bool lamb = a.kind == AdamArgs::Kind::lamb;
    const int kind = a.kind == AdamArgs::Kind::adam ? 0 : a.kind == AdamArgs::Kind::adamw ? 1 : 2;
    kernels::adam_update(raw(s), t.chunks(), m, v, kind, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                         lamb ? t.update() : nullptr, lamb ? t.norms() : nullptr);
  }
  void larc_scale(Stream& s, TensorSet& set, const LarcArgs& a) override {
    auto& t = static_cast<CudaTensorSet&>(set);
    if (t.chunks().chunks == 0) return;
    kernels::larc_scale(raw(s), t.chunks(), a.lr, a.eta, a.weight_decay, a.clip, t.norms());
  }

 private:
  // bf16 arithmetic (cuDNN's bf16 convolutions, cuBLAS's bf16 GEMMs) needs compute
  // capability 8.0 (Ampere); before it cuDNN only answers "not supported" at the first call.
  void check_type(DType t, const char* what) const {
    if (t == DType::bf16 && m_compute_major < 8)
      throw Error(std::string("cuda backend: a bf16 ") + what + " needs a GPU of compute capability 8.0 or newer; " +
                  m_info.name + " is " + std::to_string(m_compute_major) + "." + std::to_string(m_compute_minor) +
                  ": use train.precision = fp16 there");
  }

  // cuDNN takes NCHW and NHWC; a channel-blocked layout is the CPU backend's alone (this
  // backend's blocked_layout_for is NCHW, so a graph never asks it for one).
  static void check_layout(Layout l, const char* what) {
    if (l != Layout::nchw && l != Layout::nhwc)
      throw Error(std::string("cuda backend: ") + what + " in layout " + layout_name(l) + ": cuDNN takes nchw or nhwc");
  }

  int m_device;
  int m_compute_major = 0, m_compute_minor = 0;
  DeviceInfo m_info;
  std::shared_ptr<SizePool> m_pool, m_pinned;
};

}  // namespace
}  // namespace squall::cuda

namespace squall::cuda {

int device_count(std::string* why_none) {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    cudaGetLastError();
    if (why_none) *why_none = "no NVIDIA driver is loaded on this machine";
    return 0;
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why_none) *why_none = std::string("CUDA reports \"") + cudaGetErrorString(e) + "\"";
    cudaGetLastError();  // not sticky: clear it
    return 0;
  }
  if (count == 0 && why_none) *why_none = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
  return count;
}

std::unique_ptr<nn::Backend> make_backend(int device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    throw Error("cuda backend: no GPU " + std::to_string(device) + " (" + std::to_string(count) + " visible)");
  return std::make_unique<CudaBackend>(device);
}

}  // namespace squall::cuda
