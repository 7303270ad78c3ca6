#pragma once
// Small HDF5 helpers for io/: RAII handles, the process-wide HDF5 lock, attribute and
// string-array I/O, and the text of the innermost HDF5 error for our own messages.
// Includes <hdf5.h>: only io/*.cpp include this header.
//
// Debian's parallel HDF5 1.10 is built without the thread-safe option, so no two threads
// may be inside the library at once. Every HDF5 call in squall runs under h5_lock(). The
// lock is recursive so that a helper (or a handle's destructor) can take it again inside a
// region that already holds it; do conversions, normalisation and NaN checks outside it.
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "src/data/data_source.hpp"

namespace squall::formats {

// Holds the HDF5 lock. The first call also switches off HDF5's own error printing (users
// see squall's message, which quotes the innermost HDF5 error via h5_error_text()).
std::unique_lock<std::recursive_mutex> h5_lock();

// The innermost message of the current HDF5 error stack ("truncated file: eof = ..."), or
// "" when the stack is empty. Call with the lock held, right after the failing call.
std::string h5_error_text();

// message, then " (" + the innermost HDF5 error + ")" when the library recorded one.
std::string h5_with_cause(const std::string& message);

// One hid_t, closed with the matching H5*close under the lock. Negative ids are "none".
class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : m_id(id) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : m_id(o.m_id) { o.m_id = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      m_id = o.m_id;
      o.m_id = H5I_INVALID_HID;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return m_id; }
  bool valid() const { return m_id >= 0; }
  explicit operator bool() const { return valid(); }
  void reset();
  // Gives the id up without closing it: for a close whose result matters (a write).
  hid_t release() {
    const hid_t id = m_id;
    m_id = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t m_id = H5I_INVALID_HID;
};

// Opening, each throwing squall::Error naming the file (and dataset) on failure.
H5Handle h5_open_file(const std::string& path);                          // read-only
H5Handle h5_open_dataset(hid_t file, const std::string& file_path, const std::string& name);
bool h5_exists(hid_t loc, const std::string& name);                      // a link of that path

// A dataset's extent and element type, with a text such as "uint8", "float32", "int16".
struct H5DatasetDesc {
  std::vector<hsize_t> dims;
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t type_size = 0;
  bool is_signed = false;
  std::string dtype;  // numpy-style name
};
H5DatasetDesc h5_describe(hid_t dataset);
std::string h5_dims_text(const std::vector<hsize_t>& dims);  // "[60000,1,28,28]"

// Attributes on any object (file root, group, dataset). Readers return false when absent
// and throw squall::Error naming `what` when present but of the wrong kind.
void h5_write_attr_string(hid_t obj, const std::string& name, const std::string& value);
void h5_write_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& values);
void h5_write_attr_floats(hid_t obj, const std::string& name, const std::vector<float>& values);
void h5_write_attr_int(hid_t obj, const std::string& name, int64_t value);
bool h5_read_attr_string(hid_t obj, const std::string& name, std::string& out, const std::string& what);
bool h5_read_attr_strings(hid_t obj, const std::string& name, std::vector<std::string>& out, const std::string& what);
bool h5_read_attr_floats(hid_t obj, const std::string& name, std::vector<float>& out, const std::string& what);
bool h5_read_attr_int(hid_t obj, const std::string& name, int64_t& out, const std::string& what);

// A whole small dataset as float (any numeric type; HDF5 converts), for statistics files.
std::vector<float> h5_read_floats(hid_t file, const std::string& file_path, const std::string& name);
// A 1-d dataset read as float64, or nothing when the file has none of that name; a
// dataset of another rank is an Error naming the file.
std::vector<double> h5_read_doubles_if_present(hid_t file, const std::string& path, const std::string& name);

// The block of `dataset` from `start` of `count` elements per dimension (one entry each), as
// `mem_type` into `out` (laid out as `count`, row-major). False when HDF5 fails (h5_error_text()
// says why). Call with the lock held.
bool h5_read_block(hid_t dataset, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count, hid_t mem_type,
                   void* out);

// Raw reads: values that lie in the file as they are in memory (no filter, the host's byte
// order) read with pread() from HDF5's own descriptor, without HDF5's per-call work; the
// DeepCAM reader's whole samples and the window reads of both readers use them.

// HDF5's descriptor of `file` when it is a plain POSIX file (the sec2 driver) whose addresses
// are file offsets (no user block); else -1. Call with the lock held.
int h5_raw_descriptor(hid_t file);

// The file address of the chunk of `dataset` at `offset` (its first element's coordinates)
// when it is stored unfiltered and holds exactly `bytes` bytes; HADDR_UNDEF otherwise (missing,
// filtered, another size). Call with the lock held.
haddr_t h5_raw_chunk_address(hid_t dataset, const hsize_t* offset, hsize_t bytes);

// pread of exactly `bytes` at `offset`, retrying short reads; false on an error (errno says
// which) or at the end of the file.
bool pread_exactly(int fd, void* dst, size_t bytes, int64_t offset);

// The window `w` of `planes` planes of `height` x `width` values of `element` bytes stored
// raw, row-major, from file offset `base`, into `out` ([planes, w.rows, w.cols]): one pread per
// plane when the window spans whole rows, else one per row of each plane, so that only the
// window's bytes are read. False as pread_exactly.
bool pread_window(int fd, int64_t base, int64_t planes, int64_t height, int64_t width, size_t element,
                  const data::Window& w, void* out);

}  // namespace squall::formats
