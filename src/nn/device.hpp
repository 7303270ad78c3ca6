#pragma once
// A Device: where work runs and what it runs on. Streams, events, capture, threads, memory
// and copies; what it can do is one Capabilities value. The operations that run on it are
// nn::Kernels (kernels.hpp); a Backend (backend.hpp) is a device with its kernels.
//
// Execution model (docs/design.md, "Backends"):
//  - every operation takes the Stream it runs on; a learner owns one stream. Operations on
//    one stream run in order. A CUDA stream enqueues them and returns at once. A CPU stream
//    runs each operation's whole body either on the calling thread (inline: the default, with
//    a thread team inside each operation, so every call has completed when it returns) or
//    queued on the stream's own worker thread (run.cpu_streams = async, a checking mode that
//    keeps a device's ordering rules on the CPU: src/cpu/cpu_stream.hpp);
//  - ordering across streams is by events: record(event, s1) then wait(s2, event) makes
//    s2's later work wait for s1's earlier work, without the host waiting. The host waits
//    only where it must read a result: synchronize(stream) or synchronize(event);
//  - pointers are device memory (GPU memory for CUDA); the host touches it only through the
//    copy calls, unless Capabilities::host_accessible. Results the host needs (losses,
//    norms, metrics) are written to device memory and read with one copy when they are
//    wanted, not one wait per value;
//  - host memory that a copy reads or writes asynchronously comes from allocate_host
//    (pinned on CUDA); other host memory is copied before the call returns.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/core/error.hpp"
#include "src/nn/tensor.hpp"

namespace squall::nn {

// An ordered queue of work (a cudaStream_t with its library handles; on the CPU, the calling
// thread or a worker thread of its own).
class Stream {
 public:
  virtual ~Stream() = default;
  // The library's own handle (a cudaStream_t on CUDA; null on the CPU), for code that orders
  // its own device work after this stream's without naming the library here (the device
  // allreduce, mpi/device_allreduce.hpp).
  virtual void* native_handle() const { return nullptr; }
};

// A point in a stream's work (a cudaEvent_t; on the CPU a marker in a worker's queue, or
// always complete for an inline stream).
class Event {
 public:
  virtual ~Event() = default;
};

// Which device it is.
struct DeviceInfo {
  std::string backend;      // "cpu" | "cuda"
  int index = -1;           // CUDA ordinal as this process sees it (CUDA_VISIBLE_DEVICES); -1 on the CPU
  std::string name;         // "NVIDIA H100 80GB HBM3", or the CPU's model name
  std::string bus_id;       // PCI bus id of a GPU ("0000:3b:00.0"), empty on the CPU
  size_t memory_bytes = 0;  // device memory (0 on the CPU)
  // How the CPU's streams run (run.cpu_streams): "inline" or "async", with the random delay
  // before each queued operation (SQUALL_CPU_STREAM_JITTER); empty and 0 on CUDA.
  std::string cpu_streams;
  int cpu_stream_jitter_us = 0;
};

// What a device and its kernels can do, read once by whoever decides by it.
struct Capabilities {
  // Whether the host (and a plain, not CUDA-aware, MPI) may read and write device memory
  // directly. False on CUDA: such callers stage through allocate_host buffers.
  bool host_accessible = true;
  // Whether begin_capture/end_capture/replay work (false on the CPU, where there is no launch
  // cost to save).
  bool can_capture = false;
  // Compute threads the device may use in all (the CPU's OpenMP team size; 1 on CUDA).
  int threads = 1;
  // Whether Kernels::softmax_cross_entropy takes a null dlogits (evaluation reads the loss only).
  bool loss_without_gradient = false;

  // Per activation type (f32, bf16, f16):
  struct ForType {
    // Plans compute in the type with the hardware's own arithmetic (f32 everywhere; bf16 and
    // f16 on CUDA's tensor cores; bf16 on a CPU with AVX512-BF16 or AMX); false: the reference
    // emulation, f32 arithmetic rounded to the type after every operation (docs/design.md,
    // "Precision"; Kernels::set_reference_precision turns it on where the hardware has the type).
    bool native = true;
    // Plans take what a graph fuses into them: forward-only convolutions a folded batch norm
    // (ConvDesc::fold_batch_norm), convolutions the ReLU after them (ConvDesc::relu), batch
    // norm the ReLU after it (BatchNormDesc::relu); the last two in training too.
    bool fuses = false;
    // The channel-blocked layout (Layout::nchw8c or nchw16c) the convolutions compute in, which
    // a graph built with Layout::blocked keeps its tensors in; nchw where there is none (its
    // plans then never see a blocked layout).
    Layout blocked = Layout::nchw;
  };
  ForType f32, bf16, f16;
  // The entry of activation type t (f32, bf16 or f16; throws squall::Error for another type).
  const ForType& of(DType t) const;
  ForType& of(DType t);
  bool native_precision(DType t) const { return of(t).native; }
  bool fuses(DType t) const { return of(t).fuses; }
  Layout blocked_layout_for(DType t) const { return of(t).blocked; }
};

// An owning allocation of device (or pinned host) memory, returned to the device's pool when
// the last copy is destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t count, DType dtype, std::shared_ptr<void> owner)
      : m_data(data), m_count(count), m_dtype(dtype), m_owner(std::move(owner)) {}
  Buffer(float* data, size_t count, std::shared_ptr<void> owner)
      : Buffer(static_cast<void*>(data), count, DType::f32, std::move(owner)) {}
  // The f32 view (most buffers); as<T>() for the others.
  float* data() const { return static_cast<float*>(m_data); }
  template <class T>
  T* as() const { return static_cast<T*>(m_data); }
  void* raw() const { return m_data; }
  size_t count() const { return m_count; }  // elements
  DType dtype() const { return m_dtype; }
  size_t bytes() const { return m_count * dtype_size(m_dtype); }
  // A tensor of this buffer's type, `offset` elements from its start.
  Tensor view(const Shape& s, size_t offset = 0) const {
    return Tensor{static_cast<char*>(m_data) + offset * dtype_size(m_dtype), s, m_dtype};
  }
  explicit operator bool() const { return m_data != nullptr; }

 private:
  void* m_data = nullptr;
  size_t m_count = 0;
  DType m_dtype = DType::f32;
  std::shared_ptr<void> m_owner;
};

// One stream's work captured once and replayed as a single launch (a CUDA graph). Replay
// repeats the captured operations with the same pointers and scalar arguments: what
// changes between replays must change in memory (the batch copied into the same staging
// buffer), not in arguments.
class Captured {
 public:
  virtual ~Captured() = default;
};

// What a device throws when work cannot be captured: a buffer or workspace that would have
// to grow, a library handle that would have to be made, or a call the capture refused. Not a
// failure of the run: the caller abandons the capture (abandon_capture) and runs the work
// eagerly, where a real error shows as itself.
class CaptureError : public Error {
 public:
  using Error::Error;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DeviceInfo info() const = 0;
  virtual Capabilities capabilities() const = 0;
  // Binds the calling thread to `threads` compute threads (CPU: sets its own OpenMP team
  // size, so that several learners on their own threads share the cores instead of each
  // taking all of them). Call on the thread before it builds plans. On CUDA it makes the
  // device current on the calling thread.
  virtual void bind_calling_thread(int threads) = 0;

  // ---- streams and events ----
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void record(Event&, Stream&) = 0;  // the event marks the stream's work so far
  virtual void wait(Stream&, Event&) = 0;    // the stream's later work waits for the event
  virtual void synchronize(Stream&) = 0;     // the host waits for the stream's work
  virtual void synchronize(Event&) = 0;      // the host waits for the event
  virtual bool ready(Event&) = 0;            // has the event's work completed?
  virtual void synchronize_all() = 0;        // the host waits for every stream (tests, shutdown)

  // ---- capture (CUDA graphs) ----
  // Where Capabilities::can_capture. Between begin_capture and end_capture the stream's work
  // is recorded, not run; it must not allocate, grow a workspace, make a library handle or
  // wait on the host: a device refuses such a call with CaptureError. end_capture returns
  // nullptr (after a warning) when it could not capture the work; after a CaptureError the
  // caller calls abandon_capture, which ends the capture and drops what was recorded, so
  // that the stream runs eagerly again. Work captured once must have run eagerly on the same
  // stream before (the first pass sizes workspaces and makes handles). A device that cannot
  // capture throws squall::Error from begin_capture, end_capture and replay.
  virtual void begin_capture(Stream&) = 0;
  virtual std::unique_ptr<Captured> end_capture(Stream&) = 0;
  virtual void abandon_capture(Stream&) = 0;
  virtual void replay(Captured&, Stream&) = 0;

  // ---- memory and copies ----
  // count elements of dtype, 256-byte aligned, uninitialised; from a pool (no system
  // allocation once a training step's sizes have been seen).
  Buffer allocate(size_t count, DType dtype = DType::f32) { return allocate_memory(count, dtype); }
  virtual Buffer allocate_memory(size_t count, DType dtype) = 0;
  // Host memory the device copies to and from asynchronously (pinned on CUDA).
  virtual Buffer allocate_host(size_t count, DType dtype) = 0;
  // Byte copies; direction by name. Host pointers not from allocate_host are copied before
  // the call returns (the host memory may be reused at once).
  virtual void copy_bytes_from_host(Stream&, void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_bytes_to_host(Stream&, void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_bytes(Stream&, void* dst, const void* src, size_t bytes) = 0;

  // Typed forms of the copies (no device overrides them: their names are their own).
  void copy_from_host(Stream& s, float* dst, const float* src, size_t count) {
    copy_bytes_from_host(s, dst, src, count * sizeof(float));
  }
  void copy_to_host(Stream& s, float* dst, const float* src, size_t count) {
    copy_bytes_to_host(s, dst, src, count * sizeof(float));
  }
  void copy(Stream& s, float* dst, const float* src, size_t count) {
    if (dst != src) copy_bytes(s, dst, src, count * sizeof(float));
  }
  int32_t* allocate_labels(size_t count, Buffer& owner) {
    owner = allocate(count, DType::i32);
    return owner.as<int32_t>();
  }
  void copy_labels_from_host(Stream& s, int32_t* dst, const int32_t* src, size_t count) {
    copy_bytes_from_host(s, dst, src, count * sizeof(int32_t));
  }
  void copy_labels_to_host(Stream& s, int32_t* dst, const int32_t* src, size_t count) {
    copy_bytes_to_host(s, dst, src, count * sizeof(int32_t));
  }
};

}  // namespace squall::nn
