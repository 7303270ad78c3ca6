// The sum check (mpi/sum_check.hpp).
#include "mpi/sum_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "mpi/runtime.hpp"
#include "mpi/wire_native.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {
namespace {

// What a rank says about the sum it starts: 128 bytes, the same layout on every rank.
struct Record {
  int64_t number = 0;      // the sum's number on this communicator (1, 2, ...)
  uint64_t count = 0;      // elements
  uint64_t what_hash = 0;  // of the whole name
  int32_t type = 0;        // DType
  int32_t rank = 0;        // the world rank, for the message
  uint32_t what_size = 0;  // bytes of the whole name
  char what[92] = {};      // its first bytes, for the message
};
static_assert(sizeof(Record) == 128, "the record travels as bytes: no padding may differ");

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

bool same_sum(const Record& a, const Record& b) {
  return a.number == b.number && a.count == b.count && a.type == b.type && a.what_hash == b.what_hash &&
         a.what_size == b.what_size;
}

// "sum 7 'gradients step 3 bucket 2' (4096 f32)"
std::string describe(const Record& r) {
  const size_t shown = std::min<size_t>(r.what_size, sizeof(r.what));
  std::string name(r.what, shown);
  if (shown < r.what_size) name += "...";
  return "sum " + std::to_string(r.number) + " '" + name + "' (" + std::to_string(r.count) + " " +
         dtype_name(static_cast<DType>(r.type)) + ")";
}

std::string format_seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), s >= 100 ? "%.0f" : "%.3g", s);
  return text;
}

}  // namespace

bool sum_check_from_environment() {
  const char* v = std::getenv("SQUALL_CHECK_SUMS");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") == 0) return true;
  throw UsageError(std::string("SQUALL_CHECK_SUMS must be 0 or 1, got '") + v + "'");
}

struct CheckedAllreduce::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // the duplicate: records only
  int rank = 0, size = 1;
  int world_rank = 0;
  std::string scope;
  double warn_s = 60, abort_s = 1800;
  OnMismatch on_mismatch = OnMismatch::abort_job;
  std::vector<Record> all;
};

CheckedAllreduce::CheckedAllreduce(std::unique_ptr<Allreduce> inner, const Communicator& comm, std::string scope,
                                   double warn_s, double abort_s, OnMismatch on_mismatch)
    : m_inner(std::move(inner)), m_impl(std::make_unique<Impl>()) {
  Impl& s = *m_impl;
  SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(comm), &s.comm));
  SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  s.rank = comm.rank();
  s.size = comm.size();
  s.world_rank = process_rank() >= 0 ? process_rank() : s.rank;
  s.scope = std::move(scope);
  s.warn_s = warn_s;
  s.abort_s = abort_s;
  s.on_mismatch = on_mismatch;
  s.all.resize(static_cast<size_t>(s.size));
}

CheckedAllreduce::~CheckedAllreduce() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && m_impl->comm != MPI_COMM_NULL) MPI_Comm_free(&m_impl->comm);
}

Allreduce::Ticket CheckedAllreduce::start(void* data, size_t count, DType type, std::string_view what,
                                          void* after_stream) {
  // The records of two threads would interleave on one communicator: one thread starts sums.
  if (m_thread == std::thread::id{}) m_thread = std::this_thread::get_id();
  SQUALL_CHECK(m_thread == std::this_thread::get_id(),
               "sum '" + std::string(what) + "' started from another thread than the sums before it");
  compare(count, type, what);
  const Ticket t = m_inner->start(data, count, type, what, after_stream);
  m_open.insert(t);
  return t;
}

bool CheckedAllreduce::test(Ticket ticket) {
  const bool done = m_inner->test(ticket);
  if (done) m_open.erase(ticket);
  return done;
}

void CheckedAllreduce::wait(Ticket ticket) {
  m_inner->wait(ticket);
  m_open.erase(ticket);
}

void CheckedAllreduce::compare(size_t count, DType type, std::string_view what) {
  Impl& s = *m_impl;
  Record mine;
  mine.number = ++m_checked;
  mine.count = count;
  mine.what_hash = fnv1a(what);
  mine.type = static_cast<int32_t>(type);
  mine.rank = s.world_rank;
  mine.what_size = static_cast<uint32_t>(what.size());
  std::memcpy(mine.what, what.data(), std::min(what.size(), sizeof(mine.what)));

  MPI_Request request = MPI_REQUEST_NULL;
  SQUALL_MPI_CHECK(MPI_Iallgather(&mine, sizeof(Record), MPI_BYTE, s.all.data(), sizeof(Record), MPI_BYTE, s.comm,
                                  &request));
  const auto begin = wire::Clock::now();
  wire::Waiter waiter;
  bool warned = false;
  for (;;) {
    int done = 0;
    SQUALL_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    // The sums in flight move on meanwhile: a rank that waits here must not hold back a sum
    // that another rank waits in before it starts this one.
    bool moved = false;
    if (!m_open.empty() && m_inner->test(*m_open.begin())) {
      m_open.erase(m_open.begin());
      moved = true;
    }
    const double waited = std::chrono::duration<double>(wire::Clock::now() - begin).count();
    auto waiting = [&] {
      return "sum check" + (s.scope.empty() ? std::string() : " (" + s.scope + ")") + ": " + describe(mine) +
             " has waited " + format_seconds(waited) + " s for the other ranks to start their sum " +
             std::to_string(mine.number);
    };
    if (waited > s.abort_s) {
      log::error(waiting() + "; a rank has stopped starting sums: ending the job (--stall-abort " +
                 format_seconds(s.abort_s) + " s)");
      abort_job(1);
    }
    if (waited > s.warn_s && !warned) {
      warned = true;
      log::warn(waiting());
    }
    if (moved)
      waiter.progressed();
    else
      waiter.idle();
  }

  size_t other = 0;
  for (size_t r = 1; r < s.all.size() && other == 0; ++r)
    if (!same_sum(s.all[0], s.all[r])) other = r;
  if (other == 0) return;
  const std::string message = "sum check" + (s.scope.empty() ? std::string() : " (" + s.scope + ")") + ": rank " +
                              std::to_string(s.all[0].rank) + " started " + describe(s.all[0]) + " where rank " +
                              std::to_string(s.all[other].rank) + " started " + describe(s.all[other]);
  if (s.on_mismatch == OnMismatch::throw_error) throw Error(message);
  // Every rank of the communicator found the same mismatch: the first of the two speaks for
  // the job, the others give it time to, then end the job themselves.
  if (s.rank == 0) {
    log::error(message + "; ending the job (every rank must start the same sums in the same order)");
    abort_job(1);
  }
  std::this_thread::sleep_for(std::chrono::seconds(10));
  log::error("sum check: ending the job (rank " + std::to_string(s.all[0].rank) + " reports a mismatch)");
  abort_job(1);
}

std::unique_ptr<Allreduce> with_sum_check(std::unique_ptr<Allreduce> made, const Communicator& comm,
                                          const AllreduceOptions& options, std::string scope) {
  if (comm.size() == 1) return made;
  // 0 off, 1 on, 2 a malformed SQUALL_CHECK_SUMS: every rank decides alike.
  int mine = options.check_sums ? 1 : 0;
  std::string why;
  try {
    if (sum_check_from_environment()) mine = 1;
  } catch (const UsageError& e) {
    mine = 2;
    why = e.what();
  }
  const int64_t agreed = comm.allreduce_max(mine);
  if (agreed == 2) throw UsageError(why.empty() ? "SQUALL_CHECK_SUMS is malformed on another rank (it must be 0 or 1)" : why);
  if (agreed == 0) return made;
  return std::make_unique<CheckedAllreduce>(std::move(made), comm, std::move(scope), options.stall_warn_s,
                                            options.stall_abort_s);
}

}  // namespace squall::mpi
