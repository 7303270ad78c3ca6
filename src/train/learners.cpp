#include "src/train/learners.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/buckets.hpp"
#include "src/train/learner_pool.hpp"
#include "src/train/learner_state.hpp"

namespace squall::train {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

nn::DType precision_dtype(std::string_view name) {
  if (name == "fp32") return nn::DType::f32;
  if (name == "bf16") return nn::DType::bf16;
  if (name == "fp16") return nn::DType::f16;
  throw Error("train.precision: unknown precision '" + std::string(name) + "' (fp32, bf16 or fp16)");
}

nn::Layout resolve_layout(std::string_view name, std::string_view backend, nn::DType precision) {
  if (name == "nchw") return nn::Layout::nchw;
  if (name == "nhwc") return nn::Layout::nhwc;
  if (name == "auto") return backend == "cuda" && precision != nn::DType::f32 ? nn::Layout::nhwc : nn::Layout::nchw;
  throw Error("model.layout: unknown layout '" + std::string(name) + "' (auto, nchw or nhwc)");
}

Algorithm parse_algorithm(std::string_view name) {
  if (name == "ssgd") return Algorithm::ssgd;
  if (name == "sma") return Algorithm::sma;
  if (name == "local-sgd") return Algorithm::local_sgd;
  throw Error("parallel.algorithm: unknown algorithm '" + std::string(name) + "' (ssgd, sma, local-sgd)");
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::ssgd: return "ssgd";
    case Algorithm::sma: return "sma";
    case Algorithm::local_sgd: return "local-sgd";
  }
  return "?";
}

LearnerGroup::LearnerGroup(nn::Backend& backend, std::function<std::unique_ptr<nn::Graph>()> make_graph,
                           int64_t batch, int64_t label_count, const OptimizerConfig& optimizer,
                           std::vector<float> class_weights, LearnerGroupOptions options, mpi::Allreduce& reducer)
    : m_backend(backend),
      m_make_graph(std::move(make_graph)),
      m_batch(batch),
      m_label_count(label_count),
      m_optimizer_config(optimizer),
      m_class_weights_host(std::move(class_weights)),
      m_options(options),
      m_reducer(reducer),
      m_pool(std::make_unique<Pool>()),
      m_stream(backend.create_stream()),
      m_group_event(backend.create_event()) {
  if (options.learners < 1) throw Error("parallel.replicas_per_device must be >= 1, got " + std::to_string(options.learners));
  if (options.period < 1) throw Error("parallel.period must be >= 1, got " + std::to_string(options.period));
  if (options.algorithm == Algorithm::sma)
    if (const std::string why = sma_instability(options.alpha, options.centre_rate, options.momentum); !why.empty())
      throw UsageError(why);
  if (options.ranks < 1) throw Error("learner group: the job needs at least one rank");
  if (options.graphs && !backend.can_capture())
    throw Error("learner group: the " + backend.name() + " backend cannot capture a learner's pass");
  if (m_options.threads <= 0) m_options.threads = backend.threads();
  m_scaler = std::make_unique<LossScaler>(backend, *m_stream, options.loss_scaling);
  // Every step checks that the gradients are finite (train.nonfinite, loss scaling).
  m_norm_dev = backend.allocate(1);
  m_norm_host = backend.allocate_host(1, nn::DType::f32);
  if (!m_class_weights_host.empty()) {
    m_class_weights = backend.allocate(m_class_weights_host.size());
    backend.copy_from_host(*m_stream, m_class_weights.data(), m_class_weights_host.data(), m_class_weights_host.size());
  }
  // Learners run on worker threads when there are several, or when the job has several
  // ranks (the caller's thread then drives the allreduce while they compute); a lone
  // learner of a one-rank job runs on the caller's thread.
  const bool threaded = options.learners > 1 || options.ranks > 1;
  for (int j = 0; j < options.learners; ++j) {
    if (threaded) m_pool->resize(static_cast<size_t>(j + 1));
    m_learners.push_back(make_learner(j));
  }
  m_param_count = m_learners[0]->graph->param_count();
  m_state_count = m_learners[0]->graph->state_count();
  plan_buckets();
  m_fused = backend.allocate(m_param_count + m_state_count);
  // A device backend whose memory a plain MPI cannot read stages the sums through pinned host
  // memory (part 2 of the GPU path puts them on NCCL and CUDA-aware MPI instead).
  if (!backend.host_accessible() && options.ranks > 1 && reducer.memory() != mpi::Memory::device)
    m_fused_host = backend.allocate_host(m_param_count + m_state_count, nn::DType::f32);
  if (options.bf16_gradients && options.ranks > 1) {
    m_fused16 = backend.allocate(m_param_count, nn::DType::bf16);
    if (m_fused_host) m_fused16_host = backend.allocate_host(m_param_count, nn::DType::bf16);
  }
  if (options.algorithm != Algorithm::ssgd) {
    m_z = backend.allocate(m_param_count);
    m_z_prev = backend.allocate(m_param_count);
    m_central_state = backend.allocate(m_state_count);
    backend.copy(*m_stream, m_z.data(), m_learners[0]->graph->params(), m_param_count);
    backend.copy(*m_stream, m_z_prev.data(), m_learners[0]->graph->params(), m_param_count);
    backend.copy(*m_stream, m_central_state.data(), m_learners[0]->graph->state(), m_state_count);
  }
  backend.synchronize(*m_stream);
}

LearnerGroup::~LearnerGroup() = default;

int LearnerGroup::threads_per_learner() const {
  return std::max(1, m_options.threads / std::max(1, learners()));
}

std::unique_ptr<LearnerGroup::Learner> LearnerGroup::make_learner(int index) {
  auto l = std::make_unique<Learner>();
  l->index = index;
  auto build = [&] {
    // Built on the thread that will run it, with its share of the cores: CPU kernels size
    // their thread teams when their plans are made.
    m_backend.bind_calling_thread(m_pool->size() > 0 ? threads_per_learner() : m_options.threads);
    l->graph = m_make_graph();
    l->graph->set_dtype(m_options.precision);
    l->graph->set_layout(m_options.layout);
    l->graph->build(m_backend, m_batch, m_options.seed);
    l->stream = m_backend.create_stream();
    l->labels = m_backend.allocate_labels(static_cast<size_t>(m_label_count), l->labels_owner);
    l->loss_dev = m_backend.allocate(1);
    l->loss_host = m_backend.allocate_host(1, nn::DType::f32);
    l->norm_dev = m_backend.allocate(1);
    l->norm_host = m_backend.allocate_host(1, nn::DType::f32);
    if (!m_backend.host_accessible()) {
      l->copy_stream = m_backend.create_stream();
      l->in_images = m_backend.allocate(static_cast<size_t>(l->graph->input().numel()));
      l->in_labels = m_backend.allocate_labels(static_cast<size_t>(m_label_count), l->in_labels_owner);
      l->staged = m_backend.create_event();
      l->consumed = m_backend.create_event();
    }
    for (int i = 0; i <= l->graph->size(); ++i) {
      l->mark_offset.push_back(0);
      l->mark_event.push_back(m_backend.create_event());
    }
    std::vector<ParamGroup> groups;
    for (const auto& p : l->graph->param_info())
      groups.push_back({l->graph->params() + p.offset, l->graph->grads() + p.offset, p.count,
                        p.weight_decay || m_optimizer_config.decay_bias_and_norm, p.name});
    l->optimizer = make_optimizer(m_optimizer_config, m_backend, std::move(groups));
  };
  if (m_pool->size() > static_cast<size_t>(index)) {
    std::vector<std::function<void()>> tasks(static_cast<size_t>(index + 1), [] {});
    tasks[static_cast<size_t>(index)] = build;
    m_pool->run(tasks);
  } else {
    build();
  }
  l->mode.train = true;
  l->mode.seed = splitmix64(m_options.seed ^ splitmix64((static_cast<uint64_t>(m_options.rank) << 20) |
                                                       static_cast<uint64_t>(index)));
  return l;
}

std::vector<std::function<void()>> LearnerGroup::tasks_for(const std::function<void(Learner&)>& work) {
  const int threads = threads_per_learner();
  std::vector<std::function<void()>> tasks;
  for (auto& l : m_learners) {
    Learner* raw = l.get();
    tasks.emplace_back([this, raw, threads, &work] {
      m_backend.bind_calling_thread(threads);
      work(*raw);
    });
  }
  return tasks;
}

void LearnerGroup::run_learners(const std::function<void(Learner&)>& work) {
  if (m_pool->size() == 0) {
    work(*m_learners[0]);
    return;
  }
  m_pool->run(tasks_for(work));
}

void LearnerGroup::copy_optimizer_state(const Learner& from, Learner& to) {
  const auto source = from.optimizer->state();
  const auto target = to.optimizer->state();
  for (size_t i = 0; i < source.size() && i < target.size(); ++i)
    m_backend.copy(*m_stream, target[i].data, source[i].data, source[i].count);
  to.optimizer->set_steps(from.optimizer->steps());
}

std::string LearnerGroup::sma_sum_name(int64_t step) { return "model sum step " + std::to_string(step + 1); }

void LearnerGroup::phase(const char* name, int learner, double t0, double t1) const {
  if (m_hook) m_hook(name, learner, t0, t1);
}

std::string LearnerGroup::optimizer_name() const { return m_learners[0]->optimizer->name(); }

bool LearnerGroup::is_sync_step(int64_t step) const {
  const int64_t since = m_options.algorithm == Algorithm::local_sgd ? step - m_options.start_step : step;
  return (since + 1) % m_options.period == 0;
}

std::vector<float> LearnerGroup::step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
                                      const std::vector<LearnerBatch>* next) {
  if (batches.size() != m_learners.size())
    throw Error("learner group: " + std::to_string(batches.size()) + " batches for " +
                std::to_string(m_learners.size()) + " learners");
  if (next != nullptr && next->size() != m_learners.size())
    throw Error("learner group: " + std::to_string(next->size()) + " next batches for " +
                std::to_string(m_learners.size()) + " learners");
  const double t_start = now_s();
  const double reduce_before = m_reduce_s;
  const float* weights = m_class_weights.data();

  // ssgd across ranks: gradients are reduced bucket by bucket while the backward passes
  // still compute the earlier layers' (see reduce_gradients_overlapped).
  const bool grads_overlapped = syncs_gradients(step) && m_options.ranks > 1 && m_pool->size() > 0;
  const std::function<void(Learner&)> pass = [&](Learner& l) {  // outlives the tasks
    const LearnerBatch& in = batches[static_cast<size_t>(l.index)];
    nn::Graph& g = *l.graph;
    const double t0 = now_s();
    m_backend.wait(*l.stream, *m_group_event);  // the group's last work on this replica
    if (l.in_images) {
      take_input(l, in, step);
      // The next step's batch goes on its way now, while this pass computes.
      if (next != nullptr) stage_input(l, (*next)[static_cast<size_t>(l.index)], step + 1);
    }
    l.mode.step = static_cast<uint64_t>(step);
    // parallel.cuda_graphs: a plain pass (no timeline, no per-layer buckets) is captured at
    // the learner's second pass (its first, eager, has grown every workspace, made every
    // handle and chosen every algorithm) and replayed from then on. It starts at the graph's
    // input, which take_input has just filled. A pass that could not be captured runs
    // eagerly below, this step and later.
    const bool plain = m_options.graphs && l.in_images && !m_hook && !grads_overlapped && !l.capture_failed;
    if (plain && !l.captured && l.eager_passes > 0) {
      l.captured = capture_pass(l, in, weights);
      l.capture_failed = !l.captured;
    }
    if (plain && l.captured) {
      m_backend.replay(*l.captured, *l.stream);
      m_backend.synchronize(*l.stream);
      l.loss = l.loss_host.data()[0];
      l.pass_end = now_s();
      phase("backward", l.index, t0, l.pass_end);  // forward and backward are one launch
      return;
    }
    enqueue_forward(l, in, weights);
    // The forward/backward split of the timeline needs the forward pass complete; without a
    // timeline a device learner does not wait here.
    if (m_hook) m_backend.synchronize(*l.stream);
    const double t1 = now_s();
    phase("forward", l.index, t0, t1);
    if (grads_overlapped) {
      l.marks_done.store(0, std::memory_order_relaxed);
      g.backward(*l.stream, [&](size_t offset) {
        const int i = l.marks_done.load(std::memory_order_relaxed);
        l.mark_offset[static_cast<size_t>(i)] = offset;
        m_backend.record(*l.mark_event[static_cast<size_t>(i)], *l.stream);
        l.marks_done.store(i + 1, std::memory_order_release);
      });
    } else {
      g.backward(*l.stream);
    }
    // The learner's own thread waits for its own stream: the other learners go on.
    m_backend.synchronize(*l.stream);
    ++l.eager_passes;
    l.loss = l.loss_host.data()[0];
    l.pass_end = now_s();
    phase("backward", l.index, t1, l.pass_end);
  };
  // SMA sums the replicas as they were before this step's update, so that sum can run over
  // the job while the learners compute (Crossbow overlaps synchronisation with the passes).
  // Forward passes write the BatchNorm statistics, so those are summed before they start.
  const bool overlapped = m_options.algorithm == Algorithm::sma && m_options.ranks > 1 && is_sync_step(step) &&
                          m_pool->size() > 0;
  if (overlapped) {
    const double t0 = now_s();
    device_sum(false, false, true);
    m_backend.record(*m_group_event, *m_stream);  // the passes write the state just read
    m_pool->start(tasks_for(pass));
    device_sum(false, true, false);  // the learners only read their parameters now
    const double t1 = now_s();
    phase("device_sum", -1, t0, t1);
    const double reduced = reduce(sma_sum_name(step));
    m_pool->wait();
    double passes_end = 0;
    for (const auto& l : m_learners) passes_end = std::max(passes_end, l->pass_end);
    const double exposed = std::max(0.0, reduced - std::max(passes_end, t1));
    m_reduce_s += exposed;
    m_overlapped_s += (reduced - t1) - exposed;
  } else if (grads_overlapped) {
    reduce_gradients_overlapped(step, pass);
  } else {
    run_learners(pass);
  }
  std::vector<float> losses;
  for (const auto& l : m_learners) losses.push_back(l->loss);

  m_step_overflow = false;
  for (auto& l : m_learners) l->overflow = false;
  auto local_updates = [&] {
    const double t0 = now_s();
    run_learners([&](Learner& l) {
      m_backend.wait(*l.stream, *m_group_event);
      local_update(l, lr, step);
      m_backend.synchronize(*l.stream);
    });
    phase("update", -1, t0, now_s());
  };

  switch (m_options.algorithm) {
    case Algorithm::ssgd:
      sync_gradients(step, lr, grads_overlapped);
      break;
    case Algorithm::sma:
      if (is_sync_step(step)) {
        sync_sma(step, lr, overlapped);
      } else {
        local_updates();
      }
      break;
    case Algorithm::local_sgd:
      if (step < m_options.start_step) {
        sync_gradients(step, lr, grads_overlapped);
        break;
      }
      if (!m_local_started) start_local_phase();
      local_updates();
      if (is_sync_step(step)) sync_average_replicas(step);
      break;
  }
  for (const auto& l : m_learners) m_step_overflow = m_step_overflow || l->overflow;
  m_scaler->end_step(m_step_overflow, *m_stream);
  // One wait per step for the group's stream: the caller may read the central model now, and
  // the learners' next work is ordered after the group's updates of their replicas.
  m_backend.record(*m_group_event, *m_stream);
  m_backend.synchronize(*m_stream);
  m_eval_current = false;
  m_compute_s += (now_s() - t_start) - (m_reduce_s - reduce_before);
  return losses;
}

int LearnerGroup::captured_learners() const {
  int n = 0;
  for (const auto& l : m_learners) n += l->captured ? 1 : 0;
  return n;
}

// Level 1 of the allreduce: fused[0:P] = sum over learners of their gradients or
// parameters, fused[P:] = sum of their state (BatchNorm statistics).
void LearnerGroup::device_sum(bool gradients, bool params_part, bool state_part) {
  float* fused = m_fused.data();
  auto source = [&](const Learner& l) { return gradients ? l.graph->grads() : l.graph->params(); };
  if (params_part) {
    m_backend.copy(*m_stream, fused, source(*m_learners[0]), m_param_count);
    for (size_t j = 1; j < m_learners.size(); ++j)
      m_backend.add(*m_stream, fused, source(*m_learners[j]), fused, m_param_count);
  }
  if (state_part) {
    m_backend.copy(*m_stream, fused + m_param_count, m_learners[0]->graph->state(), m_state_count);
    for (size_t j = 1; j < m_learners.size(); ++j)
      m_backend.add(*m_stream, fused + m_param_count, m_learners[j]->graph->state(), fused + m_param_count,
                    m_state_count);
  }
}

// Hands fused[lo, hi) to the allreduce once the group stream's work on it is done; through
// the pinned mirror when the allreduce cannot read backend memory.
mpi::Allreduce::Ticket LearnerGroup::start_reduce(size_t lo, size_t hi, const std::string& what) {
  if (bf16_range(lo, hi)) {  // gradients in bf16 on the wire
    auto* g16 = m_fused16.as<uint16_t>() + lo;
    m_backend.convert(*m_stream, m_fused.data() + lo, nn::DType::f32, g16, nn::DType::bf16, hi - lo);
    if (m_fused16_host) {
      auto* h16 = m_fused16_host.as<uint16_t>() + lo;
      m_backend.copy_bytes_to_host(*m_stream, h16, g16, (hi - lo) * sizeof(uint16_t));
      g16 = h16;
    }
    m_backend.synchronize(*m_stream);
    return m_reducer.start(g16, hi - lo, mpi::DType::bf16, what);
  }
  if (!m_fused_host) {
    // A device reducer orders its sum after the group stream by an event; the others read
    // the buffer at once, so the group stream's work on it must be done (inline CPU streams
    // are done already; async ones are not).
    if (!m_reducer.orders_after_stream()) m_backend.synchronize(*m_stream);
    return m_reducer.start(m_fused.data() + lo, hi - lo, mpi::DType::f32, what, m_stream->native_handle());
  }
  m_backend.copy_to_host(*m_stream, m_fused_host.data() + lo, m_fused.data() + lo, hi - lo);
  m_backend.synchronize(*m_stream);
  return m_reducer.start(m_fused_host.data() + lo, hi - lo, what);
}

// After the sum of fused[lo, hi) has completed: back into backend memory (when staged).
void LearnerGroup::finish_reduce(size_t lo, size_t hi) {
  if (bf16_range(lo, hi)) {
    auto* g16 = m_fused16.as<uint16_t>() + lo;
    if (m_fused16_host)
      m_backend.copy_bytes_from_host(*m_stream, g16, m_fused16_host.as<uint16_t>() + lo, (hi - lo) * sizeof(uint16_t));
    m_backend.convert(*m_stream, g16, nn::DType::bf16, m_fused.data() + lo, nn::DType::f32, hi - lo);
    return;
  }
  if (m_fused_host) m_backend.copy_from_host(*m_stream, m_fused.data() + lo, m_fused_host.data() + lo, hi - lo);
}

// Levels 2-4: the allreduce sums the fused buffer over the job. Returns when it ended.
double LearnerGroup::reduce(const std::string& what, bool gradients) {
  const double t0 = now_s();
  const size_t all = m_param_count + m_state_count;
  if (gradients && m_fused16) {  // two sums: the gradients in bf16, the state in f32
    const mpi::Allreduce::Ticket g = start_reduce(0, m_param_count, what);
    const mpi::Allreduce::Ticket s = start_reduce(m_param_count, all, what + " state");
    m_reducer.wait(g);
    m_reducer.wait(s);
    finish_reduce(0, m_param_count);
    finish_reduce(m_param_count, all);
  } else {
    m_reducer.wait(start_reduce(0, all, what));
    finish_reduce(0, all);
  }
  const double t1 = now_s();
  phase("allreduce", -1, t0, t1);
  return t1;
}

void LearnerGroup::sum_learners_and_reduce(bool gradients, const std::string& what) {
  const double t0 = now_s();
  device_sum(gradients, true, true);
  const double t1 = now_s();
  phase("device_sum", -1, t0, t1);
  m_reduce_s += reduce(what, gradients) - t1;
}

bool LearnerGroup::syncs_gradients(int64_t step) const {
  return m_options.algorithm == Algorithm::ssgd ||
         (m_options.algorithm == Algorithm::local_sgd && step < m_options.start_step);
}

// The gradient buckets of this model (src/train/buckets.hpp).
void LearnerGroup::plan_buckets() {
  std::vector<size_t> offsets;
  for (const auto& p : m_learners[0]->graph->param_info()) offsets.push_back(p.offset);
  m_buckets = train::plan_buckets(offsets, m_param_count, m_options.bucket_floats);
}

// ssgd across ranks. The learners' passes run on the workers; this thread hands each bucket
// to the allreduce as soon as every learner's backward pass has finished its tensors (the
// backward hook publishes a mark, an offset and an event, after every node with parameters), and
// drives the sums in flight meanwhile, without waiting for one before starting the next.
void LearnerGroup::reduce_gradients_overlapped(int64_t step, const std::function<void(Learner&)>& pass) {
  for (auto& l : m_learners) l->marks_done.store(0, std::memory_order_relaxed);
  m_pool->start(tasks_for(pass));
  float* fused = m_fused.data();
  const std::string name = "gradients step " + std::to_string(step + 1);
  struct Flight {
    mpi::Allreduce::Ticket ticket;
    size_t lo, hi;
    double begin, end;  // handed over; seen complete (0: not yet)
  };
  std::vector<Flight> flights;
  // Every learner has published a mark at or below lo whose work has completed.
  auto ready = [&](size_t lo) {
    for (const auto& l : m_learners) {
      const int done = l->marks_done.load(std::memory_order_acquire);
      int i = 0;
      while (i < done && l->mark_offset[static_cast<size_t>(i)] > lo) ++i;
      if (i == done || !m_backend.ready(*l->mark_event[static_cast<size_t>(i)])) return false;
    }
    return true;
  };
  auto hand_over = [&](size_t lo, size_t hi, const std::string& what) {
    const double t0 = now_s();
    m_backend.copy(*m_stream, fused + lo, m_learners[0]->graph->grads() + lo, hi - lo);
    for (size_t j = 1; j < m_learners.size(); ++j)
      m_backend.add(*m_stream, fused + lo, m_learners[j]->graph->grads() + lo, fused + lo, hi - lo);
    const mpi::Allreduce::Ticket ticket = start_reduce(lo, hi, what);
    const double t1 = now_s();
    phase("device_sum", -1, t0, t1);
    flights.push_back({ticket, lo, hi, t1, 0});
  };
  // Drives the sums in flight; true when one completed.
  auto drive = [&] {
    bool moved = false;
    for (auto& f : flights)
      if (f.end == 0 && m_reducer.test(f.ticket)) {
        f.end = now_s();
        finish_reduce(f.lo, f.hi);
        phase("allreduce", -1, f.begin, f.end);
        moved = true;
      }
    return moved;
  };
  auto note_in_flight = [&] {
    const auto open = std::count_if(flights.begin(), flights.end(), [](const Flight& f) { return f.end == 0; });
    m_max_buckets_in_flight = std::max(m_max_buckets_in_flight, static_cast<int>(open));
  };

  size_t next = 0;
  for (int idle = 0; next < m_buckets.size();) {
    bool moved = false;
    while (next < m_buckets.size() && ready(m_buckets[next].first)) {
      const auto [lo, hi] = m_buckets[next];
      hand_over(lo, hi, name + " bucket " + std::to_string(++next));
      note_in_flight();
      moved = true;
    }
    if (next == m_buckets.size()) break;
    moved = drive() || moved;
    if (m_pool->finished() && !ready(m_buckets[next].first)) break;  // a learner failed: wait() rethrows
    if (moved) {
      idle = 0;
    } else if (++idle < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  while (!m_pool->finished()) {  // keep the sums moving while the passes end
    if (!drive()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  m_pool->wait();
  double passes_end = 0;
  for (const auto& l : m_learners) passes_end = std::max(passes_end, l->pass_end);
  device_sum(true, false, true);
  const size_t all = m_param_count + m_state_count;
  flights.push_back({start_reduce(m_param_count, all, name + " state"), m_param_count, all, now_s(), 0});
  note_in_flight();
  for (auto& f : flights)
    if (f.end == 0) {
      m_reducer.wait(f.ticket);
      f.end = now_s();
      finish_reduce(f.lo, f.hi);
      phase("allreduce", -1, f.begin, f.end);
    }
  // The part of each sum that ran after the passes had ended was exposed; the rest was hidden.
  for (const auto& f : flights) {
    const double exposed = std::max(0.0, f.end - std::max(f.begin, passes_end));
    m_reduce_s += exposed;
    m_overlapped_s += (f.end - f.begin) - exposed;
  }
}

void LearnerGroup::sync_gradients(int64_t step, float lr, bool reduced) {
  if (!reduced) sum_learners_and_reduce(true, "gradients step " + std::to_string(step + 1));
  const double t0 = now_s();
  float* fused = m_fused.data();
  const float inv = 1.0f / static_cast<float>(job_learners());
  // The gradients' mean, unscaled by the loss scale (1 without loss scaling); the state's mean.
  m_backend.scale(*m_stream, inv / m_scaler->scale(), fused, m_param_count);
  m_backend.scale(*m_stream, inv, fused + m_param_count, m_state_count);
  // The sum over the job carries any learner's overflow (or NaN) to every rank, so that every
  // rank takes the same decision.
  const bool finite = gradients_finite(*m_stream, fused, m_param_count, m_norm_dev.data(), m_norm_host.data());
  if (!finite && !skips_nonfinite()) {
    std::string culprit;
    for (auto& l : m_learners)
      if (const std::string where = locate_nonfinite(*l); !where.empty()) {
        culprit = "rank " + std::to_string(m_options.rank) + " learner " + std::to_string(l->index) + ": " + where;
        break;
      }
    throw NonFiniteStep("the gradient sum over the job is not finite at step " + std::to_string(step + 1), culprit,
                        true);
  }
  const bool skip = !finite;
  m_step_overflow = skip;
  Learner& first = *m_learners[0];
  if (!skip) {
    m_backend.copy(*m_stream, first.graph->grads(), fused, m_param_count);
    first.optimizer->step(m_backend, *m_stream, lr);
  }
  for (auto& l : m_learners) {
    if (l->index != 0 && !skip) m_backend.copy(*m_stream, l->graph->params(), first.graph->params(), m_param_count);
    m_backend.copy(*m_stream, l->graph->state(), fused + m_param_count, m_state_count);
  }
  phase("update", -1, t0, now_s());
}

void LearnerGroup::sync_sma(int64_t step, float lr, bool reduced) {
  // W and the state sum are taken before the update: c_j = alpha (w_j - z) uses the
  // weights the gradients were computed at. (step() may have summed them already, while the
  // learners computed.)
  if (!reduced) sum_learners_and_reduce(false, sma_sum_name(step));
  const double t0 = now_s();
  const SmaCoefficients c = sma();
  const float alpha = static_cast<float>(c.alpha);
  const float beta = static_cast<float>(c.beta);
  const float mu = static_cast<float>(c.mu);
  const float n = static_cast<float>(job_learners());
  const float* z = m_z.data();
  m_backend.record(*m_group_event, *m_stream);  // the sum has read the replicas
  run_learners([&](Learner& l) {
    float* w = l.graph->params();
    m_backend.wait(*l.stream, *m_group_event);
    m_backend.axpby(*l.stream, alpha, z, 1.0f - alpha, w, m_param_count);  // w - alpha (w - z)
    local_update(l, lr, step);
    m_backend.synchronize(*l.stream);
  });
  // z_new = z + beta (W / n - z) + mu (z - z_prev), built in z_prev's buffer, then swapped.
  float* zp = m_z_prev.data();
  m_backend.axpby(*m_stream, 1.0f - beta + mu, z, -mu, zp, m_param_count);
  m_backend.axpy(*m_stream, beta / n, m_fused.data(), zp, m_param_count);
  std::swap(m_z, m_z_prev);
  average_state_into_central();
  phase("update", -1, t0, now_s());
}

bool LearnerGroup::gradients_finite(nn::Stream& stream, const float* g, size_t n, float* dev, float* host) {
  m_backend.sum_squares(stream, g, n, dev);
  m_backend.copy_to_host(stream, host, dev, 1);
  m_backend.synchronize(stream);
  if (std::isfinite(host[0])) return true;
  // The sum of squares also overflows for large but finite gradients (|g| > 1e19): only then,
  // rarely, look at the values themselves.
  std::vector<float> values(n);
  m_backend.copy_to_host(stream, values.data(), g, n);
  m_backend.synchronize(stream);
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

bool LearnerGroup::local_update(Learner& l, float lr, int64_t step) {
  float* g = l.graph->grads();
  if (!gradients_finite(*l.stream, g, m_param_count, l.norm_dev.data(), l.norm_host.data())) {
    if (!skips_nonfinite()) {
      const std::string where = locate_nonfinite(l);
      const std::string culprit = "rank " + std::to_string(m_options.rank) + " learner " + std::to_string(l.index) +
                                  ": " + (where.empty() ? "its gradients are not finite" : where);
      throw NonFiniteStep("step " + std::to_string(step + 1) + ": " + culprit, culprit, false);
    }
    l.overflow = true;
    return false;
  }
  if (m_scaler->dynamic()) m_backend.scale(*l.stream, 1.0f / m_scaler->scale(), g, m_param_count);
  l.optimizer->step(m_backend, *l.stream, lr);
  return true;
}

namespace {

// "NaN" or "infinite" for the first non-finite value of x, "" when all are finite.
std::string nonfinite_kind(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : "infinite";
  return {};
}

}  // namespace

std::string LearnerGroup::locate_nonfinite(Learner& l) {
  nn::Graph& g = *l.graph;
  nn::Stream& stream = *l.stream;
  m_backend.synchronize(stream);
  auto host = [&](const float* data, size_t n) {
    std::vector<float> out(n);
    m_backend.copy_to_host(stream, out.data(), data, n);
    m_backend.synchronize(stream);
    return out;
  };
  if (!std::isfinite(l.loss)) {
    for (int i = 1; i < g.size(); ++i) {
      const nn::Tensor v = g.node_value(i);
      const auto n = static_cast<size_t>(v.numel());
      std::vector<float> values;
      if (v.dtype == nn::DType::f32) {
        values = host(v.f32(), n);
      } else {
        nn::Buffer wide = m_backend.allocate(n);
        m_backend.convert(stream, v.data, v.dtype, wide.data(), nn::DType::f32, n);
        values = host(wide.data(), n);
      }
      if (const std::string kind = nonfinite_kind(values); !kind.empty())
        return "the output of layer '" + g.node_name(i) + "' is " + kind + " (the loss is " +
               (std::isnan(l.loss) ? "NaN" : "infinite") + ")";
    }
    return std::string("the loss is ") + (std::isnan(l.loss) ? "NaN" : "infinite");
  }
  const auto& info = g.param_info();
  for (size_t i = info.size(); i-- > 0;)  // backward order: where the backward pass went wrong first
    if (const std::string kind = nonfinite_kind(host(g.grads() + info[i].offset, info[i].count)); !kind.empty())
      return "the gradient of " + info[i].name + " is " + kind;
  return {};
}

void LearnerGroup::start_local_phase() {
  // Leaving the synchronous warm-up: every learner continues from learner 0's optimizer
  // state (the others' was never used) and the central model is the common replica.
  Learner& first = *m_learners[0];
  for (auto& l : m_learners)
    if (l->index != 0) copy_optimizer_state(first, *l);
  m_backend.copy(*m_stream, m_z.data(), first.graph->params(), m_param_count);
  m_backend.copy(*m_stream, m_central_state.data(), first.graph->state(), m_state_count);
  m_backend.record(*m_group_event, *m_stream);
  m_local_started = true;
}

void LearnerGroup::sync_average_replicas(int64_t step) {
  sum_learners_and_reduce(false, "model average step " + std::to_string(step + 1));
  const double t0 = now_s();
  float* fused = m_fused.data();
  m_backend.scale(*m_stream, 1.0f / static_cast<float>(job_learners()), fused, m_param_count + m_state_count);
  for (auto& l : m_learners) {
    m_backend.copy(*m_stream, l->graph->params(), fused, m_param_count);
    m_backend.copy(*m_stream, l->graph->state(), fused + m_param_count, m_state_count);
  }
  m_backend.copy(*m_stream, m_z.data(), fused, m_param_count);
  m_backend.copy(*m_stream, m_central_state.data(), fused + m_param_count, m_state_count);
  phase("update", -1, t0, now_s());
}

void LearnerGroup::average_state_into_central() {
  m_backend.copy(*m_stream, m_central_state.data(), m_fused.data() + m_param_count, m_state_count);
  m_backend.scale(*m_stream, 1.0f / static_cast<float>(job_learners()), m_central_state.data(), m_state_count);
}

bool LearnerGroup::central_is_replica0() const {
  return m_options.algorithm == Algorithm::ssgd || (m_options.algorithm == Algorithm::local_sgd && !m_local_started);
}

const float* LearnerGroup::central_params() const {
  return central_is_replica0() ? m_learners[0]->graph->params() : m_z.data();
}

const float* LearnerGroup::central_state() const {
  return central_is_replica0() ? m_learners[0]->graph->state() : m_central_state.data();
}

const float* LearnerGroup::replica_params(int learner) const {
  SQUALL_CHECK(learner >= 0 && learner < learners(), "replica_params: no such learner");
  return m_learners[static_cast<size_t>(learner)]->graph->params();
}

nn::Graph& LearnerGroup::replica_graph(int learner) {
  SQUALL_CHECK(learner >= 0 && learner < learners(), "replica_graph: no such learner");
  return *m_learners[static_cast<size_t>(learner)]->graph;
}

nn::Graph& LearnerGroup::eval_graph() {
  if (!m_eval) {
    m_backend.bind_calling_thread(m_options.threads);
    m_eval = m_make_graph();
    m_eval->set_dtype(m_options.precision);
    m_eval->set_layout(m_options.layout);
    m_eval->build(m_backend, m_batch, m_options.seed);
  }
  if (!m_eval_current) {
    m_backend.copy(*m_stream, m_eval->params(), central_params(), m_param_count);
    m_backend.copy(*m_stream, m_eval->state(), central_state(), m_state_count);
    m_backend.synchronize(*m_stream);
    m_eval_current = true;
  }
  return *m_eval;
}

void LearnerGroup::add_learner() {
  const int index = learners();
  if (m_pool->size() == 0) m_pool->resize(1);  // learner 0 moves from the caller to a worker
  m_pool->resize(static_cast<size_t>(index + 1));
  auto l = make_learner(index);
  m_backend.copy(*m_stream, l->graph->params(), central_params(), m_param_count);
  m_backend.copy(*m_stream, l->graph->state(), central_state(), m_state_count);
  if (central_is_replica0()) {
    // Synchronous phase: every replica must take the same steps, optimizer state included.
    copy_optimizer_state(*m_learners[0], *l);
  }
  m_backend.synchronize(*m_stream);
  m_learners.push_back(std::move(l));
}

void LearnerGroup::remove_learner() {
  if (learners() <= 1) throw Error("learner group: cannot remove the last learner");
  m_learners.pop_back();
  m_pool->resize(static_cast<size_t>(learners()));
}

}  // namespace squall::train

// ---- checkpoints ------------------------------------------------------------------------------

namespace squall::train {
namespace {

std::vector<float> to_host(nn::Backend& backend, nn::Stream& stream, const float* data, size_t n) {
  std::vector<float> out(n);
  if (n > 0) backend.copy_to_host(stream, out.data(), data, n);
  return out;
}

}  // namespace

void LearnerGroup::save_shared(io::CheckpointData& out) {
  nn::Stream& s = *m_stream;
  out.ints["learners"] = learners();
  out.ints["local_started"] = m_local_started ? 1 : 0;
  out.arrays["central/params"] = to_host(m_backend, s, central_params(), m_param_count);
  out.arrays["central/state"] = to_host(m_backend, s, central_state(), m_state_count);
  if (m_options.algorithm != Algorithm::ssgd) {
    out.arrays["central/z"] = to_host(m_backend, s, m_z.data(), m_param_count);
    out.arrays["central/z_prev"] = to_host(m_backend, s, m_z_prev.data(), m_param_count);
    out.arrays["central/averaged_state"] = to_host(m_backend, s, m_central_state.data(), m_state_count);
  }
  if (!replicas_differ()) {  // one model: learner 0's optimizer state is every learner's
    Learner& first = *m_learners[0];
    for (const OptimizerState& st : first.optimizer->state())
      out.arrays["replica/optimizer/" + st.name] = to_host(m_backend, s, st.data, st.count);
    out.ints["replica/optimizer_steps"] = first.optimizer->steps();
    m_scaler->save(out);
  }
  m_backend.synchronize(s);
}

void LearnerGroup::save_own(io::CheckpointData& out) {
  nn::Stream& s = *m_stream;
  out.ints["rank"] = m_options.rank;
  out.ints["learners"] = learners();
  for (const auto& l : m_learners) {
    const std::string prefix = "learner_" + std::to_string(l->index) + "/";
    out.arrays[prefix + "params"] = to_host(m_backend, s, l->graph->params(), m_param_count);
    out.arrays[prefix + "state"] = to_host(m_backend, s, l->graph->state(), m_state_count);
    for (const OptimizerState& st : l->optimizer->state())
      out.arrays[prefix + "optimizer/" + st.name] = to_host(m_backend, s, st.data, st.count);
    out.ints[prefix + "optimizer_steps"] = l->optimizer->steps();
  }
  m_scaler->save(out);
  m_backend.synchronize(s);
}

void LearnerGroup::restore(const io::CheckpointData& shared, const io::CheckpointData* own) {
  nn::Stream& s = *m_stream;
  const auto put = [&](float* dst, const io::CheckpointData& from, const std::string& name, size_t n) {
    const std::vector<float>& v = from.array(name, n);
    if (n > 0) m_backend.copy_from_host(s, dst, v.data(), n);
  };
  if (shared.integer("learners") != learners())
    throw Error(shared.origin + ": holds " + std::to_string(shared.integer("learners")) +
                " learner(s) per rank, this group has " + std::to_string(learners()));
  m_local_started = shared.integer("local_started") != 0;
  if (m_options.algorithm != Algorithm::ssgd) {
    put(m_z.data(), shared, "central/z", m_param_count);
    put(m_z_prev.data(), shared, "central/z_prev", m_param_count);
    put(m_central_state.data(), shared, "central/averaged_state", m_state_count);
  }
  if (own != nullptr) {
    if (own->integer("learners") != learners() || own->integer("rank") != m_options.rank)
      throw Error(own->origin + ": the part of rank " + std::to_string(own->integer("rank")) + " with " +
                  std::to_string(own->integer("learners")) + " learner(s), not of rank " +
                  std::to_string(m_options.rank) + " with " + std::to_string(learners()));
    for (auto& l : m_learners) {
      const std::string prefix = "learner_" + std::to_string(l->index) + "/";
      put(l->graph->params(), *own, prefix + "params", m_param_count);
      put(l->graph->state(), *own, prefix + "state", m_state_count);
      for (const OptimizerState& st : l->optimizer->state()) put(st.data, *own, prefix + "optimizer/" + st.name, st.count);
      l->optimizer->set_steps(own->integer(prefix + "optimizer_steps"));
    }
    m_scaler->restore(*own, s);
  } else {
    if (replicas_differ())
      throw Error(shared.origin + ": has no per-rank part, but the replicas of " +
                  std::string(algorithm_name(m_options.algorithm)) + " differ at this point of the run");
    for (auto& l : m_learners) {
      put(l->graph->params(), shared, "central/params", m_param_count);
      put(l->graph->state(), shared, "central/state", m_state_count);
      for (const OptimizerState& st : l->optimizer->state()) put(st.data, shared, "replica/optimizer/" + st.name, st.count);
      l->optimizer->set_steps(shared.integer("replica/optimizer_steps"));
    }
    m_scaler->restore(shared, s);
  }
  m_backend.record(*m_group_event, s);
  m_backend.synchronize(s);
  m_eval_current = false;
}

}  // namespace squall::train
