// Checkpoint files in HDF5 (checkpoint_file.hpp).
#include "io/checkpoint/checkpoint_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "io/formats/h5_util.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"

namespace squall::checkpoint {
namespace {

constexpr const char* k_format = "squall-checkpoint";
// Version 2 added tensor shapes (multi-dimensional datasets, the "shaped" list); version 1
// files read as before.
constexpr int64_t k_format_version = 2;
// A file of several checkpoints, one per group (a node's part file, checkpoint.hpp).
constexpr const char* k_groups_format = "squall-checkpoint-groups";
constexpr int64_t k_groups_format_version = 1;
constexpr hsize_t k_chunk_floats = hsize_t{1} << 20;  // 4 MiB chunks: one checksum each

// A failed HDF5 write: the library's innermost message, and errno's when the system refused
// (ENOSPC, EIO, EROFS), which is what a user acts on.
std::string write_failure(const std::string& path, const std::string& what, int saved_errno) {
  std::string message = path + ": cannot write " + what;
  if (saved_errno != 0) message += ": " + std::string(std::strerror(saved_errno));
  return formats::h5_with_cause(message);
}

void write_real_attr(hid_t obj, const std::string& name, double value) {
  auto lock = formats::h5_lock();
  formats::H5Handle space(H5Screate(H5S_SCALAR));
  formats::H5Handle attr(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    throw Error(formats::h5_with_cause("cannot write attribute " + name));
}

double read_real_attr(hid_t obj, const std::string& name, const std::string& what) {
  auto lock = formats::h5_lock();
  if (H5Aexists(obj, name.c_str()) <= 0) throw Error(what + ": attribute " + name + " is missing");
  formats::H5Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  double value = 0;
  if (!attr || H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    throw Error(formats::h5_with_cause(what + ": attribute " + name + " unreadable"));
  return value;
}

// `dims`: the dataset's shape (empty: a vector of values.size()).
void write_array(hid_t file, const std::string& path, const std::string& name, const std::vector<float>& values,
                 const std::vector<int64_t>& shape) {
  auto lock = formats::h5_lock();
  std::vector<hsize_t> dims;
  hsize_t product = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw Error(path + ": dataset " + name + ": negative dimension in its shape");
    dims.push_back(static_cast<hsize_t>(d));
    product *= static_cast<hsize_t>(d);
  }
  if (dims.empty()) dims.push_back(product = values.size());
  if (product != values.size())
    throw Error(path + ": dataset " + name + " holds " + std::to_string(values.size()) +
                " values, but its shape has " + std::to_string(product));
  const hsize_t n = values.size();
  formats::H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  formats::H5Handle create(H5Pcreate(H5P_DATASET_CREATE));
  if (n > 0) {
    // Chunks of whole rows of the leading dimension, about k_chunk_floats each.
    std::vector<hsize_t> chunk = dims;
    const hsize_t row = n / dims[0];
    chunk[0] = std::max<hsize_t>(1, std::min(dims[0], k_chunk_floats / std::max<hsize_t>(1, row)));
    H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_fletcher32(create.get());
  }
  formats::H5Handle links(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(links.get(), 1);
  errno = 0;
  formats::H5Handle ds(
      H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space.get(), links.get(), create.get(), H5P_DEFAULT));
  if (!ds) throw Error(write_failure(path, "dataset " + name, errno));
  if (n > 0 && H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw Error(write_failure(path, "dataset " + name, errno));
  // Closing writes the chunks still in HDF5's cache: its failure must not go unnoticed.
  if (H5Dclose(ds.release()) < 0) throw Error(write_failure(path, "dataset " + name, errno));
}

std::vector<std::string> names_of(const auto& map) {
  std::vector<std::string> out;
  for (const auto& [name, value] : map) out.push_back(name);
  return out;
}

void write_all(hid_t file, const std::string& path, const CheckpointData& data) {
  formats::h5_write_attr_string(file, "format", k_format);
  formats::h5_write_attr_int(file, "format_version", k_format_version);
  // The names of each kind of entry (an empty kind has no list).
  if (!data.arrays.empty()) formats::h5_write_attr_strings(file, "arrays", names_of(data.arrays));
  if (!data.ints.empty()) formats::h5_write_attr_strings(file, "ints", names_of(data.ints));
  if (!data.reals.empty()) formats::h5_write_attr_strings(file, "reals", names_of(data.reals));
  if (!data.texts.empty()) formats::h5_write_attr_strings(file, "texts", names_of(data.texts));
  std::vector<std::string> shaped;
  for (const auto& [name, dims] : data.shapes) {
    if (!data.arrays.contains(name)) throw Error(path + ": a shape for " + name + ", which is no array");
    shaped.push_back(name);
  }
  if (!shaped.empty()) formats::h5_write_attr_strings(file, "shaped", shaped);
  for (const auto& [name, value] : data.ints) formats::h5_write_attr_int(file, "i:" + name, value);
  for (const auto& [name, value] : data.reals) write_real_attr(file, "r:" + name, value);
  for (const auto& [name, value] : data.texts) formats::h5_write_attr_string(file, "t:" + name, value);
  static const std::vector<int64_t> k_vector;
  for (const auto& [name, values] : data.arrays) {
    const auto it = data.shapes.find(name);
    write_array(file, path, name, values, it == data.shapes.end() ? k_vector : it->second);
  }
}

}  // namespace

const std::vector<float>& CheckpointData::array(const std::string& name, size_t count) const {
  const auto it = arrays.find(name);
  if (it == arrays.end()) throw Error(origin + ": dataset " + name + " is missing");
  if (it->second.size() != count)
    throw Error(origin + ": dataset " + name + " holds " + std::to_string(it->second.size()) + " values, expected " +
                std::to_string(count));
  return it->second;
}

int64_t CheckpointData::integer(const std::string& name) const {
  const auto it = ints.find(name);
  if (it == ints.end()) throw Error(origin + ": entry " + name + " is missing");
  return it->second;
}

double CheckpointData::real(const std::string& name) const {
  const auto it = reals.find(name);
  if (it == reals.end()) throw Error(origin + ": entry " + name + " is missing");
  return it->second;
}

const std::string& CheckpointData::text(const std::string& name) const {
  const auto it = texts.find(name);
  if (it == texts.end()) throw Error(origin + ": entry " + name + " is missing");
  return it->second;
}

std::vector<int64_t> CheckpointData::shape(const std::string& name) const {
  const auto it = shapes.find(name);
  if (it != shapes.end()) return it->second;
  const auto a = arrays.find(name);
  if (a == arrays.end()) throw Error(origin + ": dataset " + name + " is missing");
  return {static_cast<int64_t>(a->second.size())};
}

// A flat byte layout: for each map, a count, then (name length, name, payload) per entry.
std::string CheckpointData::serialize() const {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  auto put_u64 = [&](uint64_t v) { put(&v, sizeof(v)); };
  auto put_str = [&](const std::string& s) {
    put_u64(s.size());
    put(s.data(), s.size());
  };
  put_u64(arrays.size());
  for (const auto& [name, v] : arrays) {
    put_str(name);
    put_u64(v.size());
    put(v.data(), v.size() * sizeof(float));
  }
  put_u64(ints.size());
  for (const auto& [name, v] : ints) {
    put_str(name);
    put(&v, sizeof(v));
  }
  put_u64(reals.size());
  for (const auto& [name, v] : reals) {
    put_str(name);
    put(&v, sizeof(v));
  }
  put_u64(texts.size());
  for (const auto& [name, v] : texts) {
    put_str(name);
    put_str(v);
  }
  put_u64(shapes.size());
  for (const auto& [name, v] : shapes) {
    put_str(name);
    put_u64(v.size());
    put(v.data(), v.size() * sizeof(int64_t));
  }
  return out;
}

CheckpointData CheckpointData::deserialize(const std::string& bytes, const std::string& origin) {
  CheckpointData d;
  d.origin = origin;
  size_t at = 0;
  auto take = [&](void* p, size_t n) {
    if (n > bytes.size() - at) throw Error(origin + ": checkpoint data cut short in transfer");
    std::memcpy(p, bytes.data() + at, n);
    at += n;
  };
  auto u64 = [&] {
    uint64_t v = 0;
    take(&v, sizeof(v));
    return v;
  };
  auto str = [&] {
    std::string s(u64(), '\0');
    take(s.data(), s.size());
    return s;
  };
  for (uint64_t k = u64(); k > 0; --k) {
    std::string name = str();
    std::vector<float> v(u64());
    take(v.data(), v.size() * sizeof(float));
    d.arrays.emplace(std::move(name), std::move(v));
  }
  for (uint64_t k = u64(); k > 0; --k) {
    std::string name = str();
    take(&d.ints[name], sizeof(int64_t));
  }
  for (uint64_t k = u64(); k > 0; --k) {
    std::string name = str();
    take(&d.reals[name], sizeof(double));
  }
  for (uint64_t k = u64(); k > 0; --k) {
    std::string name = str();
    d.texts[name] = str();
  }
  for (uint64_t k = u64(); k > 0; --k) {
    std::string name = str();
    std::vector<int64_t> v(u64());
    take(v.data(), v.size() * sizeof(int64_t));
    d.shapes.emplace(std::move(name), std::move(v));
  }
  return d;
}

namespace {

// Bob Jenkins' lookup3 hash (hashlittle, initial value 0): the checksum of HDF5's 1.8+ metadata.
uint32_t lookup3(const unsigned char* k, size_t length) {
  auto rot = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  auto word = [](const unsigned char* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  };
  uint32_t a = 0xdeadbeefu + static_cast<uint32_t>(length), b = a, c = a;
  for (; length > 12; length -= 12, k += 12) {
    a += word(k), b += word(k + 4), c += word(k + 8);
    a -= c, a ^= rot(c, 4), c += b;
    b -= a, b ^= rot(a, 6), a += c;
    c -= b, c ^= rot(b, 8), b += a;
    a -= c, a ^= rot(c, 16), c += b;
    b -= a, b ^= rot(a, 19), a += c;
    c -= b, c ^= rot(b, 4), b += a;
  }
  if (length == 0) return c;
  unsigned char tail[12] = {};
  std::memcpy(tail, k, length);
  a += word(tail), b += word(tail + 4), c += word(tail + 8);
  c ^= b, c -= rot(b, 14);
  a ^= c, a -= rot(c, 11);
  b ^= a, b -= rot(a, 25);
  c ^= b, c -= rot(b, 16);
  a ^= c, a -= rot(c, 4);
  b ^= a, b -= rot(a, 14);
  c ^= b, c -= rot(b, 24);
  return c;
}

// HDF5 1.10's H5Fget_file_image clears the superblock's status flags in the image it returns but
// keeps the checksum computed with them set, so that HDF5 itself refuses the image ("incorrect
// metadata checksum"). The superblock (version 2 or 3, at the start: signature, version, the
// sizes of offsets and lengths, the flags, four addresses) gets the checksum HDF5 writes on
// closing a file; a correct one is left as it is.
void fix_superblock_checksum(std::string& image) {
  static constexpr unsigned char k_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  auto* bytes = reinterpret_cast<unsigned char*>(image.data());
  if (image.size() < 12 || std::memcmp(bytes, k_signature, 8) != 0 || (bytes[8] != 2 && bytes[8] != 3)) return;
  const size_t covered = 12 + 4 * size_t{bytes[9]};
  if (image.size() < covered + 4) return;
  const uint32_t sum = lookup3(bytes, covered);
  for (int i = 0; i < 4; ++i) bytes[covered + i] = static_cast<unsigned char>(sum >> (8 * i));
}

// Makes the file in memory (HDF5's core driver, no backing store) in the 1.8+ format, lets
// `fill` write into it, then writes its image to `path` and fsyncs it; any failure removes the
// file. HDF5 never writes the disk itself: a full disk is a failed write() here, reported with
// its errno, and no HDF5 file is left open half-closed (HDF5 1.10 crashes at exit closing a
// file whose close failed on a full disk).
template <typename Fill>
void write_durably(const std::string& path, Fill&& fill) {
  std::string image;
  {
    auto lock = formats::h5_lock();
    formats::H5Handle access(H5Pcreate(H5P_FILE_ACCESS));
    // The 1.8+ format: checksummed object headers and superblock.
    H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5Pset_fapl_core(access.get(), size_t{1} << 20, false);
    formats::H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()));
    if (!file) throw Error(write_failure(path, "the file (in memory)", 0));
    fill(file.get());
    const ssize_t size = H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0 ? -1 : H5Fget_file_image(file.get(), nullptr, 0);
    if (size < 0) throw Error(write_failure(path, "the file (its image in memory)", 0));
    image.resize(static_cast<size_t>(size));
    if (H5Fget_file_image(file.get(), image.data(), image.size()) != size)
      throw Error(write_failure(path, "the file (its image in memory)", 0));
  }
  fix_superblock_checksum(image);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(write_failure(path, "the file", errno));
  auto fail = [&path](const char* what, int saved) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw Error(write_failure(path, what, saved));
  };
  try {
    squall::write_all(fd, image, path);
  } catch (...) {
    ::close(fd);
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    fail("the file (fsync)", saved);
  }
  if (::close(fd) != 0) fail("the file (close)", errno);
}

// A group name of a groups file: one path component, no "." or "..".
void check_group_name(const std::string& path, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error(path + ": '" + name + "' cannot name a checkpoint group");
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointData& data) {
  write_durably(path, [&](hid_t file) { write_all(file, path, data); });
}

void write_checkpoint_groups(const std::string& path, const std::vector<CheckpointGroup>& groups) {
  write_durably(path, [&](hid_t file) {
    std::vector<std::string> names;
    for (const CheckpointGroup& g : groups) {
      check_group_name(path, g.name);
      names.push_back(g.name);
    }
    formats::h5_write_attr_string(file, "format", k_groups_format);
    formats::h5_write_attr_int(file, "format_version", k_groups_format_version);
    if (!names.empty()) formats::h5_write_attr_strings(file, "groups", names);
    for (const CheckpointGroup& g : groups) {
      auto lock = formats::h5_lock();
      errno = 0;
      formats::H5Handle group(H5Gcreate2(file, g.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!group) throw Error(write_failure(path, "group " + g.name, errno));
      write_all(group.get(), path + ":/" + g.name, *g.data);
      if (H5Gclose(group.release()) < 0) throw Error(write_failure(path, "group " + g.name, errno));
    }
  });
}

namespace {

// The entries of the checkpoint at `loc` (a file's root or a group of a groups file);
// `path` names it in messages and becomes the data's origin.
CheckpointData read_entries(hid_t loc, const std::string& path, bool with_arrays) {
  CheckpointData d;
  d.origin = path;
  std::string format;
  if (!formats::h5_read_attr_string(loc, "format", format, path) || format != k_format)
    throw Error(path + ": not a squall checkpoint (no format = \"" + k_format + "\" attribute)");
  int64_t version = 0;
  if (!formats::h5_read_attr_int(loc, "format_version", version, path) || version < 1 || version > k_format_version)
    throw Error(path + ": checkpoint format version " + std::to_string(version) + ", this squall reads versions 1 to " +
                std::to_string(k_format_version));
  std::vector<std::string> arrays, ints, reals, texts, shaped;
  for (auto [key, list] : {std::pair{"arrays", &arrays}, {"ints", &ints}, {"reals", &reals}, {"texts", &texts},
                           {"shaped", &shaped}})
    formats::h5_read_attr_strings(loc, key, *list, path);
  for (const std::string& name : ints) {
    int64_t v = 0;
    if (!formats::h5_read_attr_int(loc, "i:" + name, v, path)) throw Error(path + ": entry " + name + " is missing");
    d.ints[name] = v;
  }
  for (const std::string& name : reals) d.reals[name] = read_real_attr(loc, "r:" + name, path);
  for (const std::string& name : texts) {
    std::string v;
    if (!formats::h5_read_attr_string(loc, "t:" + name, v, path)) throw Error(path + ": entry " + name + " is missing");
    d.texts[name] = std::move(v);
  }
  if (!with_arrays) return d;
  for (const std::string& name : arrays) {
    formats::H5Handle ds = formats::h5_open_dataset(loc, path, name);
    const formats::H5DatasetDesc desc = formats::h5_describe(ds.get());
    const bool is_shaped = std::find(shaped.begin(), shaped.end(), name) != shaped.end();
    if (desc.type_class != H5T_FLOAT || desc.type_size != 4 || desc.dims.empty() ||
        (!is_shaped && desc.dims.size() != 1))
      throw Error(path + ": dataset " + name + " is " + desc.dtype + " " + formats::h5_dims_text(desc.dims) +
                  ", expected a float32 " + (is_shaped ? "tensor" : "vector"));
    size_t count = 1;
    for (const auto dim : desc.dims) count *= static_cast<size_t>(dim);
    if (is_shaped) d.shapes[name] = std::vector<int64_t>(desc.dims.begin(), desc.dims.end());
    std::vector<float> v(count);
    // The Fletcher-32 filter verifies each chunk as it is read.
    if (!v.empty() && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
      throw Error(formats::h5_with_cause(path + ": dataset " + name + " is corrupt or unreadable"));
    d.arrays[name] = std::move(v);
  }
  return d;
}

CheckpointData read_file(const std::string& path, bool with_arrays) {
  auto lock = formats::h5_lock();
  formats::H5Handle file = formats::h5_open_file(path);
  return read_entries(file.get(), path, with_arrays);
}

// A groups file opened, its root's format checked; its group names.
formats::H5Handle open_groups_file(const std::string& path, std::vector<std::string>& names) {
  formats::H5Handle file = formats::h5_open_file(path);
  std::string format;
  if (!formats::h5_read_attr_string(file.get(), "format", format, path) || format != k_groups_format)
    throw Error(path + ": not a squall checkpoint part file (no format = \"" + k_groups_format + "\" attribute)");
  int64_t version = 0;
  if (!formats::h5_read_attr_int(file.get(), "format_version", version, path) || version < 1 ||
      version > k_groups_format_version)
    throw Error(path + ": part file format version " + std::to_string(version) + ", this squall reads versions 1 to " +
                std::to_string(k_groups_format_version));
  names.clear();
  formats::h5_read_attr_strings(file.get(), "groups", names, path);
  return file;
}

}  // namespace

CheckpointData read_checkpoint_file(const std::string& path) { return read_file(path, true); }

CheckpointData read_checkpoint_metadata(const std::string& path) { return read_file(path, false); }

std::vector<std::string> read_checkpoint_group_names(const std::string& path) {
  auto lock = formats::h5_lock();
  std::vector<std::string> names;
  open_groups_file(path, names);
  return names;
}

std::vector<CheckpointData> read_checkpoint_groups(const std::string& path, const std::vector<std::string>& wanted) {
  auto lock = formats::h5_lock();
  std::vector<std::string> names;
  formats::H5Handle file = open_groups_file(path, names);
  std::vector<CheckpointData> out;
  for (const std::string& name : wanted) {
    if (std::find(names.begin(), names.end(), name) == names.end() || !formats::h5_exists(file.get(), name))
      throw Error(path + ": group " + name + " is missing");
    formats::H5Handle group(H5Gopen2(file.get(), name.c_str(), H5P_DEFAULT));
    if (!group) throw Error(formats::h5_with_cause(path + ": group " + name + " cannot be opened"));
    out.push_back(read_entries(group.get(), path + ":/" + name, true));
  }
  return out;
}

}  // namespace squall::checkpoint
