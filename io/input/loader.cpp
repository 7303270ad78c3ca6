#include "io/input/loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::input {

struct Loader::Slot {
  Batch batch;
  void* image_mem = nullptr;
  void* label_mem = nullptr;
  std::vector<size_t> bad_positions;  // skipped samples, replaced by the consumer in batch order
  std::exception_ptr error;           // the read failed: next() throws this
  bool held = false;                  // handed out by next(), not yet released
};

namespace {

constexpr size_t k_alignment = 64;

size_t round_up(size_t bytes) { return std::max(k_alignment, (bytes + k_alignment - 1) / k_alignment * k_alignment); }

}  // namespace

Loader::Loader(const data::DataSource& source, LoaderOptions options)
    : m_source(source), m_options(std::move(options)) {
  if (m_options.batch_size < 1) throw Error("loader: batch size must be >= 1, got " + std::to_string(m_options.batch_size));
  if (m_options.workers < 0) throw Error("loader: data.workers must be >= 0, got " + std::to_string(m_options.workers));
  if (m_options.prefetch < 1) throw Error("loader: data.prefetch must be >= 1, got " + std::to_string(m_options.prefetch));
  if (m_options.samples_per_read < 1) throw Error("loader: samples per read must be >= 1");
  if (static_cast<bool>(m_options.host_alloc) != static_cast<bool>(m_options.host_free))
    throw Error("loader: host_alloc and host_free must be given together");

  const data::DatasetInfo& info = m_source.info();
  // Every size below follows the sample's grid, or the window's when there is one.
  int64_t rows = info.sample.h(), cols = info.sample.w();
  if (m_options.window) {
    data::check_window(m_source, *m_options.window);
    rows = m_options.window->rows;
    cols = m_options.window->cols;
  }
  m_sample_floats = info.sample.c() * rows * cols;
  m_sample_labels = info.per_pixel_labels ? rows * cols : 1;

  const auto batch = static_cast<size_t>(m_options.batch_size);
  const size_t image_bytes = round_up(batch * static_cast<size_t>(m_sample_floats) * sizeof(float));
  const size_t label_bytes = round_up(batch * static_cast<size_t>(m_sample_labels) * sizeof(int32_t));
  // One buffer per batch read ahead, plus the one the consumer works on; allocated once.
  for (int i = 0; i < m_options.prefetch + 1; ++i) {
    auto slot = std::make_unique<Slot>();
    for (auto [mem, bytes] : {std::pair{&slot->image_mem, image_bytes}, std::pair{&slot->label_mem, label_bytes}}) {
      *mem = m_options.host_alloc ? m_options.host_alloc(bytes) : std::aligned_alloc(k_alignment, bytes);
      if (*mem == nullptr) throw Error("loader: cannot allocate " + std::to_string(bytes) + " bytes for a batch");
    }
    slot->batch.size = m_options.batch_size;
    slot->batch.images = static_cast<float*>(slot->image_mem);
    slot->batch.labels = static_cast<int32_t*>(slot->label_mem);
    m_free.push_back(slot.get());
    m_slots.push_back(std::move(slot));
  }
  for (int i = 0; i < m_options.workers; ++i) m_threads.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
    m_cancel = true;
  }
  m_work_cv.notify_all();
  for (std::thread& t : m_threads) t.join();
  for (auto& slot : m_slots) {
    for (void* mem : {slot->image_mem, slot->label_mem}) {
      if (mem == nullptr) continue;
      if (m_options.host_free)
        m_options.host_free(mem);
      else
        std::free(mem);
    }
  }
}

void Loader::reset_locked() {
  m_free.clear();
  m_done.clear();
  for (auto& slot : m_slots) {
    slot->held = false;
    m_free.push_back(slot.get());
  }
  m_next_claim = m_next_deliver = 0;
  m_stop_after = -1;
  m_failed = nullptr;
}

void Loader::start_epoch(std::vector<int64_t> indices, int64_t batches) {
  if (batches < 0) throw Error("loader: negative number of batches");
  if (static_cast<int64_t>(indices.size()) < batches * m_options.batch_size)
    throw Error("loader: " + std::to_string(batches) + " batches of " + std::to_string(m_options.batch_size) +
                " need " + std::to_string(batches * m_options.batch_size) + " indices, got " +
                std::to_string(indices.size()));
  for (const int64_t i : indices)
    if (i < 0 || i >= m_source.size())
      throw Error("loader: sample index " + std::to_string(i) + " out of range [0, " +
                  std::to_string(m_source.size()) + ")");
  {
    std::unique_lock lock(m_mutex);
    // Reads of the abandoned epoch give up at their next read call; wait until they have.
    m_cancel = true;
    m_ready_cv.wait(lock, [this] { return m_busy == 0; });
    reset_locked();
    m_indices = std::move(indices);
    m_batches = batches;
    m_spare_pos = batches * m_options.batch_size;
    m_cancel = false;
  }
  m_work_cv.notify_all();
}

bool Loader::claimable() const {
  return !m_stop && m_stop_after < 0 && m_next_claim < m_batches && !m_free.empty() &&
         m_next_claim < m_next_deliver + m_options.prefetch;
}

void Loader::worker_loop() {
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_work_cv.wait(lock, [this] { return m_stop || claimable(); });
    if (m_stop) return;
    Slot* slot = m_free.back();
    m_free.pop_back();
    const int64_t number = m_next_claim++;
    const auto first = m_indices.begin() + number * m_options.batch_size;
    slot->batch.number = number;
    slot->batch.indices.assign(first, first + m_options.batch_size);
    ++m_busy;
    lock.unlock();
    std::exception_ptr error = read_batch(*slot);
    lock.lock();
    --m_busy;
    slot->error = error;
    if (error && (m_stop_after < 0 || number < m_stop_after)) m_stop_after = number;
    m_done.push_back(slot);
    m_ready_cv.notify_all();
  }
}

std::exception_ptr Loader::read_batch(Slot& slot) {
  slot.bad_positions.clear();
  slot.error = nullptr;
  const size_t batch = slot.batch.indices.size();
  const auto per_read = static_cast<size_t>(m_options.samples_per_read);
  try {
    for (size_t pos = 0; pos < batch; pos += per_read) {
      if (m_cancel) return nullptr;  // the epoch was abandoned or the loader is going away
      const size_t n = std::min(per_read, batch - pos);
      const std::span<const int64_t> chunk(slot.batch.indices.data() + pos, n);
      try {
        read_into(slot, pos, chunk);
      } catch (const data::BadSample& bad) {
        if (!m_options.skip_bad) throw;
        if (n == 1) {
          note_bad(bad, chunk[0]);
          slot.bad_positions.push_back(pos);
        } else {
          // The exception names one sample; find every bad one of the chunk.
          for (size_t j = 0; j < n; ++j)
            if (!read_one(slot, pos + j, chunk[j])) slot.bad_positions.push_back(pos + j);
        }
      }
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Loader::read_into(Slot& slot, size_t pos, std::span<const int64_t> indices) const {
  float* images = slot.batch.images + pos * static_cast<size_t>(m_sample_floats);
  int32_t* labels = slot.batch.labels + pos * static_cast<size_t>(m_sample_labels);
  if (m_options.window)
    m_source.read_window(indices, *m_options.window, images, labels);
  else
    m_source.read(indices, images, labels);
}

bool Loader::read_one(Slot& slot, size_t pos, int64_t index) {
  try {
    read_into(slot, pos, std::span<const int64_t>(&index, 1));
    return true;
  } catch (const data::BadSample& bad) {
    note_bad(bad, index);
    return false;
  }
}

void Loader::note_bad(const data::BadSample& bad, int64_t index) {
  std::lock_guard lock(m_bad_mutex);
  if (m_bad.insert(index).second)
    log::warn("skipping bad sample " + std::to_string(index) + " of '" + bad.file() + "': " + bad.what());
}

void Loader::fill_bad_positions(Slot& slot) {
  const auto list = static_cast<int64_t>(m_indices.size());
  for (const size_t pos : slot.bad_positions) {
    for (int64_t tried = 0;; ++tried) {
      if (tried >= list)
        throw Error("loader: no usable sample left to replace bad ones (" + std::to_string(bad_samples()) +
                    " bad samples among this rank's " + std::to_string(list) + ")");
      if (m_spare_pos >= list) m_spare_pos = 0;  // used up: wrap to the start of the list
      const int64_t index = m_indices[static_cast<size_t>(m_spare_pos++)];
      {
        std::lock_guard lock(m_bad_mutex);
        if (m_bad.count(index)) continue;
      }
      if (read_one(slot, pos, index)) {
        slot.batch.indices[pos] = index;
        break;
      }
    }
  }
  slot.bad_positions.clear();
}

const Batch* Loader::next() {
  if (m_failed) std::rethrow_exception(m_failed);
  const Stopwatch waited;
  Slot* slot = nullptr;
  {
    std::unique_lock lock(m_mutex);
    if (m_next_deliver >= m_batches) return nullptr;
    const int64_t number = m_next_deliver;
    auto find_done = [&] {
      return std::find_if(m_done.begin(), m_done.end(), [&](Slot* s) { return s->batch.number == number; });
    };
    if (m_options.workers == 0) {
      if (m_free.empty())
        throw Error("loader: all " + std::to_string(m_slots.size()) +
                    " batch buffers are held by the caller; release() one before asking for the next");
      slot = m_free.back();
      m_free.pop_back();
      ++m_next_claim;
      lock.unlock();
      const auto first = m_indices.begin() + number * m_options.batch_size;
      slot->batch.number = number;
      slot->batch.indices.assign(first, first + m_options.batch_size);
      slot->error = read_batch(*slot);
      lock.lock();
    } else {
      for (;;) {
        const auto it = find_done();
        if (it != m_done.end()) {
          slot = *it;
          m_done.erase(it);
          break;
        }
        // Batches are claimed in order, so an unclaimed next batch with no free buffer and no
        // busy worker can only mean the caller holds every buffer: say so instead of waiting.
        if (m_busy == 0 && m_free.empty() && m_next_claim <= number)
          throw Error("loader: all " + std::to_string(m_slots.size()) +
                      " batch buffers are held by the caller; release() one before asking for the next");
        m_ready_cv.wait(lock);
      }
    }
    ++m_next_deliver;
    slot->held = true;
  }
  m_work_cv.notify_all();  // the read-ahead window moved

  try {
    if (slot->error) std::rethrow_exception(slot->error);
    fill_bad_positions(*slot);
  } catch (...) {
    m_failed = std::current_exception();
    std::lock_guard lock(m_mutex);
    m_stop_after = std::min(m_stop_after < 0 ? slot->batch.number : m_stop_after, slot->batch.number);
    slot->held = false;
    slot->error = nullptr;
    m_free.push_back(slot);
    m_io_wait += waited.seconds();
    throw;
  }
  std::lock_guard lock(m_mutex);
  m_io_wait += waited.seconds();
  m_delivered_samples += slot->batch.size;
  return &slot->batch;
}

void Loader::release(const Batch* batch) {
  if (batch == nullptr) return;
  {
    std::lock_guard lock(m_mutex);
    for (auto& slot : m_slots) {
      // A batch of an abandoned epoch was already taken back by start_epoch.
      if (&slot->batch == batch && slot->held) {
        slot->held = false;
        m_free.push_back(slot.get());
      }
    }
  }
  m_work_cv.notify_all();
  m_ready_cv.notify_all();
}

double Loader::io_wait_s() const {
  std::lock_guard lock(m_mutex);
  return m_io_wait;
}

int64_t Loader::samples() const {
  std::lock_guard lock(m_mutex);
  return m_delivered_samples;
}

int64_t Loader::bad_samples() const {
  std::lock_guard lock(m_bad_mutex);
  return static_cast<int64_t>(m_bad.size());
}

}  // namespace squall::input
