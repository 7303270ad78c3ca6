#pragma once
// TensorBoard event files (docs/formats.md, "TensorBoard event files"): the scalars a run logs,
// and what the run is as text, in the files TensorBoard reads while the run goes on.
//
// A file is a sequence of TFRecords (length, CRC of the length, data, CRC of the data), each
// holding one Event message serialised by protobuf from io/records/tensorboard_event.proto. The first
// record names the format version; every later one holds one scalar or one text. Files are append-only and
// never reopened: a resumed run makes a new file in the same directory, and TensorBoard merges
// all the files of a directory into one run.
//
// The protobuf classes stay inside tensorboard.cpp: including this header needs no protobuf.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace squall::records {

// CRC-32C (Castagnoli polynomial, reflected), the checksum TFRecord framing uses. `crc` carries
// on a running checksum: crc32c(b, nb, crc32c(a, na)) is the CRC of a followed by b.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The CRC as a TFRecord stores it: rotated right by 15 bits plus a constant, so that a CRC of
// data that itself holds CRCs is not degenerate.
uint32_t masked_crc32c(const void* data, size_t n);

// Writes one event file. Not thread-safe: one writer per process (rank 0), used by one thread.
//
// Each scalar() is one Event (TensorBoard's own writers do the same), buffered in memory and
// written by flush(), or once the buffer holds 64 KiB; the destructor flushes. Every write is
// whole records, so what a crashed process had flushed reads back record for record. After a
// failed write the file may end in part of a record (readers stop there, as at the tail of a
// file being written) and the writer refuses every later call, naming the file.
class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new file in it, `events.out.tfevents.<unix seconds>.<host>`
  // (`.<suffix>` added when given). An existing file is never opened: when the name is taken
  // (a run restarted within the same second) the seconds count up until it is free, so that the
  // names still sort in the order the files were made, which is the order TensorBoard reads
  // them in. Writes the version record at once. Throws squall::Error naming the path.
  explicit TensorBoardWriter(const std::filesystem::path& dir, const std::string& suffix = "");
  ~TensorBoardWriter();  // flushes; a failure here is logged as a warning, not thrown
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event { wall_time, step, summary { value { tag, simple_value } } }. The value is stored
  // as float32, TensorBoard's type (a double beyond float's range becomes infinite; NaN stays
  // NaN). `wall_time_s` is seconds since the Unix epoch (TensorBoard's relative time axis).
  void scalar(const std::string& tag, int64_t step, double value, double wall_time_s);
  // One Event whose value is a text for TensorBoard's Text tab: a scalar string tensor, its
  // metadata naming the "text" plugin. TensorBoard renders it as Markdown.
  void text(const std::string& tag, int64_t step, const std::string& markdown, double wall_time_s);

  // Hands everything buffered to the operating system, so that it survives this process
  // (not a crash of the node: no fsync). Throws squall::Error naming the file.
  void flush();

  const std::filesystem::path& path() const { return m_path; }

 private:
  void append_event(const std::string& event);  // a record, flushed once the buffer is full
  void append_record(const std::string& data);
  void check_usable() const;

  std::filesystem::path m_path;
  int m_fd = -1;
  std::string m_pending;   // whole framed records not yet written
  std::string m_failure;   // why an earlier write failed; empty while the file is good
};

}  // namespace squall::records
