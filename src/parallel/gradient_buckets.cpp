// ssgd's overlapped gradient sums (src/parallel/gradient_buckets.hpp).
#include "src/parallel/gradient_buckets.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "src/parallel/buckets.hpp"

namespace squall::parallel {

GradientBuckets::GradientBuckets(GroupCore& core) : m_core(core) {
  std::vector<size_t> offsets;
  for (const auto& p : (*core.replicas)[0].graph->param_info()) offsets.push_back(p.offset);
  m_plan = plan_buckets(offsets, core.params, core.options.bucket_floats);
  for (size_t i = 0; i <= m_plan.size(); ++i) m_summed.push_back(core.backend.create_event());
}

// A bucket moves through three states: summed over the learners on the group stream (its
// event recorded), handed to the allreduce once that event has completed (or at once when
// the allreduce orders itself after the stream), and complete. The host never blocks on the
// device here: it polls the learners' marks and the buckets' events.
//
// Buckets are handed over strictly in bucket order, on every rank: a bucket goes only after
// every bucket before it has gone, whatever order the host happens to see their events
// complete in (PyTorch's reducer does the same). Handing over whichever is ready lets two
// ranks start different buckets as the same collective: sums of equal size then add the
// wrong buckets in silence, and sums of different sizes fail or hang (MPI, NCCL).
//
// An allreduce that can order the group stream after a sum on the device (NCCL) is not
// waited for on the host: the group stream waits for the last sums' events and the finite
// check is read behind them, at the step's one host wait (docs/design.md, "One host wait
// per step").
float GradientBuckets::reduce(const std::vector<LearnerBatch>& batches, int64_t step,
                              const std::vector<LearnerBatch>* next) {
  GroupCore& c = m_core;
  nn::Backend& backend = c.backend;
  ReplicaSet& replicas = *c.replicas;
  FusedSum& sum = *c.sum;
  mpi::Allreduce& reducer = sum.reducer();
  for (const auto& l : replicas) l->marks_done.store(0, std::memory_order_relaxed);
  c.run_passes(batches, step, next, true, true);
  const std::string name = "gradients step " + std::to_string(step + 1);
  struct Flight {
    size_t lo, hi;
    std::string what;
    nn::Event* summed;
    FusedSum::Ticket ticket = 0;
    bool launched = false, complete = false;
    double begin = 0, end = 0;  // handed over; seen complete
  };
  std::vector<Flight> flights;
  flights.reserve(m_plan.size() + 1);
  size_t launched = 0;  // flights [0, launched) have been handed over
  // The mark of each learner at or below lo, when it has been published and its work is done.
  auto ready = [&](size_t lo, std::vector<nn::Event*>& marks) {
    marks.clear();
    for (const auto& l : replicas) {
      const int done = l->marks_done.load(std::memory_order_acquire);
      int i = 0;
      while (i < done && l->mark_offset[static_cast<size_t>(i)] > lo) ++i;
      if (i == done || !backend.ready(*l->mark_event[static_cast<size_t>(i)])) return false;
      marks.push_back(l->mark_event[static_cast<size_t>(i)].get());
    }
    return true;
  };
  auto enqueue = [&](size_t lo, size_t hi, std::string what, nn::Event& summed) {
    sum.stage(lo, hi);
    backend.record(summed, *c.stream);
    flights.push_back({lo, hi, std::move(what), &summed});
  };
  auto complete = [&](Flight& f) {
    f.complete = true;
    f.end = steady_seconds();
    sum.finish(f.lo, f.hi);
    c.phase("allreduce", -1, f.begin, f.end);
  };
  // Drives the buckets: hands over the next ones in bucket order while their sums over the
  // learners are done, tests those in flight. True when one moved.
  auto drive = [&] {
    bool moved = false;
    for (; launched < flights.size(); ++launched) {
      Flight& f = flights[launched];
      if (sum.needs_host_wait() && !backend.ready(*f.summed)) break;  // and so must every later one
      f.ticket = sum.launch(f.lo, f.hi, f.what);
      f.launched = true;
      f.begin = steady_seconds();
      moved = true;
      const auto open = std::count_if(flights.begin(), flights.end(),
                                      [](const Flight& g) { return g.launched && !g.complete; });
      c.max_buckets_in_flight = std::max(c.max_buckets_in_flight, static_cast<int>(open));
    }
    for (size_t i = 0; i < launched; ++i) {
      Flight& f = flights[i];
      if (!f.complete && reducer.test(f.ticket)) {
        complete(f);
        moved = true;
      }
    }
    return moved;
  };

  std::vector<nn::Event*> marks;
  size_t next_bucket = 0;
  for (IdleBackoff idle; next_bucket < m_plan.size();) {
    bool moved = false;
    while (next_bucket < m_plan.size() && ready(m_plan[next_bucket].first, marks)) {
      const auto [lo, hi] = m_plan[next_bucket];
      {
        const auto span = c.phase_scope("device_sum");
        for (nn::Event* e : marks) backend.wait(*c.stream, *e);
        sum.add(replicas, FusedSum::Source::grads, lo, hi);
        enqueue(lo, hi, name + " bucket " + std::to_string(next_bucket + 1), *m_summed[next_bucket]);
      }
      ++next_bucket;
      moved = true;
    }
    if (next_bucket == m_plan.size() || replicas.finished()) break;
    idle(drive() || moved);
  }
  for (IdleBackoff idle; !replicas.finished();) idle(drive());  // keep the sums moving while the passes end
  replicas.wait();  // a learner's failure is rethrown here
  double passes_end = 0;
  for (const auto& l : replicas) passes_end = std::max(passes_end, l->pass_end);
  // Every pass is enqueued now: the buckets left, the state and the finite check follow the
  // learners' whole passes on the group stream.
  c.after_learners();
  for (; next_bucket < m_plan.size(); ++next_bucket) {
    const auto [lo, hi] = m_plan[next_bucket];
    sum.add(replicas, FusedSum::Source::grads, lo, hi);
    enqueue(lo, hi, name + " bucket " + std::to_string(next_bucket + 1), *m_summed[next_bucket]);
  }
  sum.add_state(replicas);
  sum.add_norms(replicas);
  enqueue(sum.params(), sum.check() + 1, name + " state", *m_summed.back());
  for (IdleBackoff idle; launched < flights.size();) idle(drive());
  // The sums still in flight: the group stream waits for them on the device where the
  // allreduce can order it so, and the host waits for the others.
  std::vector<Flight*> ordered;
  for (auto& f : flights) {
    if (f.complete) continue;
    if (sum.order_after(f.ticket)) {
      sum.finish(f.lo, f.hi);
      ordered.push_back(&f);
    } else {
      reducer.wait(f.ticket);
      complete(f);
    }
  }
  const float check = sum.read_check();  // the step's host wait, behind every sum
  // The ordered sums have completed with the group stream's work: retired without waiting.
  for (Flight* f : ordered) {
    if (!reducer.test(f->ticket)) reducer.wait(f->ticket);
    f->complete = true;
    f->end = steady_seconds();
    c.phase("allreduce", -1, f->begin, f->end);
  }
  // The sums ran after the passes had ended (exposed: the step waited) or under them (hidden),
  // as wall time: several were in flight at once, and each counted in full would make the
  // step's allreduce longer than the step.
  std::vector<std::pair<double, double>> after, under;
  for (const auto& f : flights) {
    after.emplace_back(std::max(f.begin, passes_end), f.end);
    under.emplace_back(f.begin, std::min(f.end, passes_end));
  }
  c.reduce_s += covered_seconds(after);
  c.overlapped_s += covered_seconds(under);
  return check;
}

}  // namespace squall::parallel
