#pragma once
// How the host sums put elements on the wire (for sources in mpi/ only): the MPI datatype and
// sum operation of each DType (bf16 is a user-defined operation), the per-call element limit,
// and the clocks and polite waiting that every host sum shares. The plain MPI_Allreduce, which
// callers outside mpi/ use, is wire.hpp's, free of <mpi.h>.
#include <mpi.h>

#include <chrono>
#include <cstddef>

#include "mpi/sum.hpp"

namespace squall::mpi::wire {

using Clock = std::chrono::steady_clock;

// One MPI call moves at most this many elements (MPI counts are int).
constexpr size_t k_max_call_elements = size_t{1} << 30;

// The MPI datatype of an element type (bf16: 2-byte elements); throws squall::Error for f16,
// which no host sum takes.
MPI_Datatype mpi_type(DType type);
// The sum for a type: MPI_SUM, or bf16's (widened to f32, added, rounded to nearest even).
// Created on first use, after MPI_Init, and kept for the process.
MPI_Op sum_op(DType type);

inline double clock_seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// Waiting on MPI_Test without taking a core from the ranks that share it: spin for a few
// microseconds (a stage often ends that soon), then yield, and sleep (1 ms steps) only once
// the wait passes a second (a late rank, not a slow transfer). A transfer over a slow link
// takes tens of milliseconds and moves only while MPI_Test is called: sleeping in 0.1 ms
// steps after 10 ms made the 1 Gbit/s allreduce 2-3x slower (bench/RESULTS.md).
class Waiter {
 public:
  void progressed() { m_waiting = false; }
  void idle();

 private:
  bool m_waiting = false;
  Clock::time_point m_since;
};

// Adds the wall time of one public call to `total`.
class CallTimer {
 public:
  explicit CallTimer(double& total) : m_total(total), m_begin(Clock::now()) {}
  ~CallTimer() { m_total += std::chrono::duration<double>(Clock::now() - m_begin).count(); }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  double& m_total;
  Clock::time_point m_begin;
};

}  // namespace squall::mpi::wire
