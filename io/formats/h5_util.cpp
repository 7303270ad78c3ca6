#include "io/formats/h5_util.hpp"

#include <unistd.h>

#include <cerrno>

#include "src/core/error.hpp"

namespace squall::formats {
namespace {

herr_t take_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  // Walking upward, the last frame seen is the outermost; the first (n == 0) is the cause.
  if (n == 0 && err != nullptr && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

}  // namespace

std::unique_lock<std::recursive_mutex> h5_lock() {
  static std::recursive_mutex mutex;
  std::unique_lock<std::recursive_mutex> lock(mutex);
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
  return lock;
}

std::string h5_error_text() {
  auto lock = h5_lock();
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &text);
  return text;
}

std::string h5_with_cause(const std::string& message) {
  const std::string cause = h5_error_text();
  return cause.empty() ? message : message + " (" + cause + ")";
}

void H5Handle::reset() {
  if (m_id < 0) return;
  auto lock = h5_lock();
  switch (H5Iget_type(m_id)) {
    case H5I_FILE: H5Fclose(m_id); break;
    case H5I_GROUP: H5Gclose(m_id); break;
    case H5I_DATASET: H5Dclose(m_id); break;
    case H5I_DATASPACE: H5Sclose(m_id); break;
    case H5I_DATATYPE: H5Tclose(m_id); break;
    case H5I_ATTR: H5Aclose(m_id); break;
    case H5I_GENPROP_LST: H5Pclose(m_id); break;
    default: H5Idec_ref(m_id); break;
  }
  m_id = H5I_INVALID_HID;
}

H5Handle h5_open_file(const std::string& path) {
  auto lock = h5_lock();
  // Opened first and asked what it is only when that fails: H5Fis_hdf5 opens and reads the
  // file once more, which doubled the cost of opening the many small files of a DeepCAM folder.
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (file) return file;
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) throw Error(h5_with_cause(path + ": not an HDF5 file, or unreadable"));
  // Open again, so that the error quoted is the open's (H5Fis_hdf5 said it is HDF5).
  H5Handle again(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (again) return again;
  throw Error(h5_with_cause(path + ": cannot open as HDF5 (truncated or corrupt?)"));
}

bool h5_exists(hid_t loc, const std::string& name) {
  auto lock = h5_lock();
  // H5Lexists needs every intermediate group to exist: check each prefix.
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

H5Handle h5_open_dataset(hid_t file, const std::string& file_path, const std::string& name) {
  auto lock = h5_lock();
  if (!h5_exists(file, name)) throw Error(file_path + ": dataset " + name + " is missing");
  H5Handle ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!ds) throw Error(h5_with_cause(file_path + ": dataset " + name + ": cannot open"));
  return ds;
}

H5DatasetDesc h5_describe(hid_t dataset) {
  auto lock = h5_lock();
  H5DatasetDesc d;
  H5Handle space(H5Dget_space(dataset));
  const int rank = space ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank > 0) {
    d.dims.resize(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), d.dims.data(), nullptr);
  }
  H5Handle type(H5Dget_type(dataset));
  if (!type) return d;
  d.type_class = H5Tget_class(type.get());
  d.type_size = H5Tget_size(type.get());
  const std::string bits = std::to_string(d.type_size * 8);
  if (d.type_class == H5T_INTEGER) {
    d.is_signed = H5Tget_sign(type.get()) == H5T_SGN_2;
    d.dtype = (d.is_signed ? "int" : "uint") + bits;
  } else if (d.type_class == H5T_FLOAT) {
    d.is_signed = true;
    d.dtype = "float" + bits;
  } else if (d.type_class == H5T_STRING) {
    d.dtype = "string";
  } else {
    d.dtype = "other (HDF5 class " + std::to_string(static_cast<int>(d.type_class)) + ")";
  }
  return d;
}

std::string h5_dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

void h5_write_attr_string(hid_t obj, const std::string& name, const std::string& value) {
  h5_write_attr_strings(obj, name, {value});
}

void h5_write_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
  auto lock = h5_lock();
  // Variable-length UTF-8 strings: h5py reads them as a list of str.
  H5Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr));
  H5Handle attr(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::vector<const char*> ptrs;
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  if (!attr || H5Awrite(attr.get(), type.get(), ptrs.data()) < 0)
    throw Error(h5_with_cause("cannot write attribute " + name));
}

void h5_write_attr_floats(hid_t obj, const std::string& name, const std::vector<float>& values) {
  auto lock = h5_lock();
  const hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr));
  H5Handle attr(H5Acreate2(obj, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), H5T_NATIVE_FLOAT, values.data()) < 0)
    throw Error(h5_with_cause("cannot write attribute " + name));
}

void h5_write_attr_int(hid_t obj, const std::string& name, int64_t value) {
  auto lock = h5_lock();
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    throw Error(h5_with_cause("cannot write attribute " + name));
}

namespace {

// Opens attribute `name` and returns its element count, or -1 when absent.
int64_t open_attr(hid_t obj, const std::string& name, H5Handle& attr, const std::string& what) {
  if (H5Aexists(obj, name.c_str()) <= 0) return -1;
  attr = H5Handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  if (!attr) throw Error(h5_with_cause(what + ": attribute " + name + " unreadable"));
  H5Handle space(H5Aget_space(attr.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw Error(what + ": attribute " + name + " unreadable");
  return n;
}

}  // namespace

bool h5_read_attr_strings(hid_t obj, const std::string& name, std::vector<std::string>& out, const std::string& what) {
  auto lock = h5_lock();
  H5Handle attr;
  const int64_t n = open_attr(obj, name, attr, what);
  if (n < 0) return false;
  H5Handle file_type(H5Aget_type(attr.get()));
  if (H5Tget_class(file_type.get()) != H5T_STRING) throw Error(what + ": attribute " + name + " is not a string");
  out.clear();
  if (H5Tis_variable_str(file_type.get()) > 0) {
    H5Handle mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(file_type.get()));
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    if (H5Aread(attr.get(), mem.get(), ptrs.data()) < 0) throw Error(h5_with_cause(what + ": attribute " + name + " unreadable"));
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Handle space(H5Aget_space(attr.get()));
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t len = H5Tget_size(file_type.get());
    std::vector<char> buf(len * static_cast<size_t>(n));
    if (H5Aread(attr.get(), file_type.get(), buf.data()) < 0)
      throw Error(h5_with_cause(what + ": attribute " + name + " unreadable"));
    for (int64_t i = 0; i < n; ++i) {
      const char* s = buf.data() + static_cast<size_t>(i) * len;
      size_t l = 0;
      while (l < len && s[l] != '\0') ++l;
      out.emplace_back(s, l);
    }
  }
  return true;
}

bool h5_read_attr_string(hid_t obj, const std::string& name, std::string& out, const std::string& what) {
  std::vector<std::string> v;
  if (!h5_read_attr_strings(obj, name, v, what)) return false;
  if (v.size() != 1) throw Error(what + ": attribute " + name + " holds " + std::to_string(v.size()) + " strings, expected 1");
  out = v[0];
  return true;
}

bool h5_read_attr_floats(hid_t obj, const std::string& name, std::vector<float>& out, const std::string& what) {
  auto lock = h5_lock();
  H5Handle attr;
  const int64_t n = open_attr(obj, name, attr, what);
  if (n < 0) return false;
  H5Handle type(H5Aget_type(attr.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) throw Error(what + ": attribute " + name + " is not numeric");
  out.assign(static_cast<size_t>(n), 0.0f);
  if (H5Aread(attr.get(), H5T_NATIVE_FLOAT, out.data()) < 0)
    throw Error(h5_with_cause(what + ": attribute " + name + " unreadable"));
  return true;
}

bool h5_read_attr_int(hid_t obj, const std::string& name, int64_t& out, const std::string& what) {
  auto lock = h5_lock();
  H5Handle attr;
  const int64_t n = open_attr(obj, name, attr, what);
  if (n < 0) return false;
  H5Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_INTEGER || n != 1)
    throw Error(what + ": attribute " + name + " is not one integer");
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &out) < 0)
    throw Error(h5_with_cause(what + ": attribute " + name + " unreadable"));
  return true;
}

std::vector<float> h5_read_floats(hid_t file, const std::string& file_path, const std::string& name) {
  auto lock = h5_lock();
  H5Handle ds = h5_open_dataset(file, file_path, name);
  const H5DatasetDesc d = h5_describe(ds.get());
  if (d.type_class != H5T_FLOAT && d.type_class != H5T_INTEGER)
    throw Error(file_path + ": dataset " + name + " has dtype " + d.dtype + ", expected numbers");
  size_t n = 1;
  for (hsize_t x : d.dims) n *= static_cast<size_t>(x);
  std::vector<float> out(n);
  if (n > 0 && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error(h5_with_cause(file_path + ": dataset " + name + ": unreadable"));
  return out;
}

std::vector<double> h5_read_doubles_if_present(hid_t file, const std::string& path, const std::string& name) {
  auto lock = h5_lock();
  if (!h5_exists(file, name)) return {};
  H5Handle ds = h5_open_dataset(file, path, name);
  const H5DatasetDesc d = h5_describe(ds.get());
  if (d.dims.size() != 1) throw Error(path + ": dataset " + name + " has shape " + h5_dims_text(d.dims) + ", expected [n]");
  std::vector<double> out(static_cast<size_t>(d.dims[0]));
  if (!out.empty() && H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error(path + ": dataset " + name + ": unreadable (" + h5_error_text() + ")");
  return out;
}

bool h5_read_block(hid_t dataset, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count, hid_t mem_type,
                   void* out) {
  H5Handle fspace(H5Dget_space(dataset));
  if (!fspace || H5Sget_simple_extent_ndims(fspace.get()) != static_cast<int>(count.size()) ||
      start.size() != count.size())
    return false;
  if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) return false;
  H5Handle mspace(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  return mspace && H5Dread(dataset, mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, out) >= 0;
}

int h5_raw_descriptor(hid_t file) {
  H5Handle fapl(H5Fget_access_plist(file));
  H5Handle fcpl(H5Fget_create_plist(file));
  hsize_t user_block = 1;
  if (!fapl || !fcpl || H5Pget_driver(fapl.get()) != H5FD_SEC2 || H5Pget_userblock(fcpl.get(), &user_block) < 0 ||
      user_block != 0)
    return -1;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, fapl.get(), &handle) < 0 || handle == nullptr) return -1;
  return *static_cast<int*>(handle);
}

haddr_t h5_raw_chunk_address(hid_t dataset, const hsize_t* offset, hsize_t bytes) {
  unsigned filter_mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(dataset, offset, &filter_mask, &address, &size) < 0 || size != bytes)
    return HADDR_UNDEF;
  H5Handle dcpl(H5Dget_create_plist(dataset));
  if (!dcpl || H5Pget_nfilters(dcpl.get()) != 0) return HADDR_UNDEF;
  return address;
}

bool pread_exactly(int fd, void* dst, size_t bytes, int64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

bool pread_window(int fd, int64_t base, int64_t planes, int64_t height, int64_t width, size_t element,
                  const data::Window& w, void* out) {
  auto* dst = static_cast<char*>(out);
  const auto el = static_cast<int64_t>(element);
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t plane_base = base + (p * height + w.row0) * width * el;
    if (w.col0 == 0 && w.cols == width) {  // whole rows: the window is one run of the plane
      const auto bytes = static_cast<size_t>(w.rows * width * el);
      if (!pread_exactly(fd, dst, bytes, plane_base)) return false;
      dst += bytes;
      continue;
    }
    const auto bytes = static_cast<size_t>(w.cols * el);
    for (int64_t y = 0; y < w.rows; ++y, dst += bytes)
      if (!pread_exactly(fd, dst, bytes, plane_base + (y * width + w.col0) * el)) return false;
  }
  return true;
}

}  // namespace squall::formats
