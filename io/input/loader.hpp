#pragma once
// Loader: reads a rank's samples ahead of the trainer. Worker threads call
// DataSource::read (which decodes and normalises) to fill whole batches into a fixed pool of
// host buffers; next() hands them out in batch order, so what a rank trains on does not
// depend on thread timing. With a window (a rank's tile under parallel.spatial) they call
// DataSource::read_window instead, and every batch holds that window of its samples.
//
//   Loader loader(source, options);
//   loader.start_epoch(sampler.indices(epoch, node, local_rank), sampler.steps_per_epoch(b));
//   while (const Batch* batch = loader.next()) { ...; loader.release(batch); }
//
// Batch k holds indices[k*B, (k+1)*B) in that order. A bad sample (BadSample) either
//  - skip_bad = true: is skipped, counted and reported once (a warning naming file and
//    index); its place in the batch is taken by the next unused index of the list, taken
//    from position batches*B onwards (the epoch's remainder) in batch order, so the result is
//    deterministic. When the list is used up the replacements wrap to its start (a sample is
//    then seen twice this epoch, which keeps every rank at the same number of steps); a list
//    with no usable sample left is an Error.
//  - skip_bad = false: next() throws it when the consumer reaches the batch that holds it
//    (earlier batches are still delivered); workers stop reading past that batch.
// Any other exception from read() is thrown from next() the same way. Nothing is swallowed
// and nothing hangs: the destructor stops and joins the workers even mid-read.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "src/data/data_source.hpp"

namespace squall::input {

struct LoaderOptions {
  int64_t batch_size = 64;
  int workers = 2;              // reader threads; 0 = read on the thread that calls next()
  int prefetch = 2;             // batches read ahead of the consumer (>= 1)
  bool skip_bad = false;        // see the header comment
  int64_t samples_per_read = 1; // samples per data::DataSource::read call (a bad one re-reads one by one)
  // This rank's window of every sample (parallel.spatial): batches are [batch_size, c,
  // window.rows, window.cols] (labels [batch_size, window.rows, window.cols] when per pixel),
  // read with DataSource::read_window. Unset: whole samples. A window outside the source's
  // samples is an Error at construction. Augmentation of whole samples (data.augment_roll,
  // data.augment_flip) cannot run on a window: train::BatchFeed refuses the two together.
  std::optional<data::Window> window;
  // Batch buffers: null = 64-byte aligned host memory. The trainer passes the backend's
  // allocate_host here when the backend cannot read host memory (pinned memory on CUDA) or
  // runs asynchronous CPU streams, so that a learner's copy of its batch is queued on its
  // stream without the host waiting (src/train/training_job.cpp). Both or neither.
  std::function<void*(size_t)> host_alloc;
  std::function<void(void*)> host_free;
};

struct Batch {
  int64_t number = 0;                 // position in the epoch, 0-based
  int64_t size = 0;                   // samples (always batch_size)
  float* images = nullptr;            // [size, c, h, w], as data::DataSource::read writes them
  int32_t* labels = nullptr;          // [size] or [size, h, w]
                                      // (h, w: the window's rows and columns when the loader has one)
  std::vector<int64_t> indices;       // the global index of each sample, in batch order
};

class Loader {
 public:
  // `source` must outlive the loader. Throws squall::Error for bad options.
  Loader(const data::DataSource& source, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts an epoch of `batches` batches from `indices` (this rank's list, in reading order;
  // needs at least batches * batch_size entries). Abandons the previous epoch if it is still
  // running: batches handed out before become invalid.
  void start_epoch(std::vector<int64_t> indices, int64_t batches);

  // The next batch in order, blocking until it is ready; nullptr at the end of the epoch.
  // Throws the error of a failed read (see above). Call release() when done with the batch;
  // holding every buffer (prefetch + 1) and asking for more is an Error, not a hang.
  const Batch* next();
  void release(const Batch* batch);

  double io_wait_s() const;       // seconds next() spent waiting, since construction
  int64_t samples() const;        // samples delivered by next(), since construction
  int64_t bad_samples() const;    // distinct bad samples skipped, since construction
  // One sample of a batch: floats of its image and labels (a window's, with a window).
  int64_t sample_floats() const { return m_sample_floats; }
  int64_t sample_labels() const { return m_sample_labels; }
  const std::optional<data::Window>& window() const { return m_options.window; }

 private:
  struct Slot;

  void worker_loop();
  bool claimable() const;  // m_mutex held
  // Reads batch `number` into `slot`; returns the exception to report, if any.
  std::exception_ptr read_batch(Slot& slot);
  // Reads one sample into position `pos` of `slot`; false (and reported) when it is bad.
  bool read_one(Slot& slot, size_t pos, int64_t index);
  // The samples `indices` (or their window) into position `pos` of `slot` onwards.
  void read_into(Slot& slot, size_t pos, std::span<const int64_t> indices) const;
  void note_bad(const data::BadSample& bad, int64_t index);
  void fill_bad_positions(Slot& slot);  // consumer thread, in batch order
  void reset_locked();                 // m_mutex held, no worker busy

  const data::DataSource& m_source;
  LoaderOptions m_options;
  int64_t m_sample_floats = 0, m_sample_labels = 0;
  std::vector<std::unique_ptr<Slot>> m_slots;

  mutable std::mutex m_mutex;
  std::condition_variable m_work_cv;   // workers: something to claim, or stop
  std::condition_variable m_ready_cv;  // consumer: a batch finished; start_epoch: a worker idle
  std::vector<int64_t> m_indices;
  int64_t m_batches = 0;
  int64_t m_next_claim = 0;       // next batch a worker may start
  int64_t m_next_deliver = 0;     // next batch next() returns
  int64_t m_stop_after = -1;      // a batch failed: workers start nothing past it (-1: none)
  int64_t m_spare_pos = 0;        // next index position used to replace a bad sample
  int m_busy = 0;                 // workers inside read_batch
  bool m_stop = false;            // destructor: workers exit
  std::atomic<bool> m_cancel{false};  // start_epoch or destructor: in-flight reads give up early
  std::exception_ptr m_failed;    // the error next() threw; thrown again until start_epoch
  std::vector<Slot*> m_free;      // buffers nobody uses
  std::vector<Slot*> m_done;      // read, waiting for next()

  mutable std::mutex m_bad_mutex;
  std::set<int64_t> m_bad;        // indices reported so far (each warned once)

  double m_io_wait = 0;
  int64_t m_delivered_samples = 0;
  std::vector<std::thread> m_threads;
};

}  // namespace squall::input
