// The statistics file of climate data (stats_file.hpp).
#include "io/formats/stats_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/formats/h5_util.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

constexpr char k_encoding_tag[] = "squall-channel-moments-1";

// The sum of n floats in double, in four interleaved partial sums (a fixed order: the same
// bits on every run and machine, and four times the additions in flight of one chain).
double plane_sum(const float* v, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(v[i + k]);
  for (; i < n; ++i) s[0] += static_cast<double>(v[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The sum of squared deviations of n floats from `mean`, corrected by the deviations' own sum
// (the "corrected two-pass" formula: it removes the error of `mean` itself to first order).
double plane_m2(const float* v, int64_t n, double mean) {
  double q[4] = {0, 0, 0, 0}, d[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) {
      const double x = static_cast<double>(v[i + k]) - mean;
      d[k] += x;
      q[k] += x * x;
    }
  for (; i < n; ++i) {
    const double x = static_cast<double>(v[i]) - mean;
    d[0] += x;
    q[0] += x * x;
  }
  const double dev = (d[0] + d[1]) + (d[2] + d[3]);
  return std::max(0.0, (q[0] + q[1]) + (q[2] + q[3]) - dev * dev / static_cast<double>(n));
}

void merge_channel(ChannelMoments::Channel& a, const ChannelMoments::Channel& b) {
  if (b.count == 0) return;
  if (a.count == 0) {
    a = b;
    return;
  }
  const double na = static_cast<double>(a.count), nb = static_cast<double>(b.count), n = na + nb;
  const double delta = b.mean - a.mean;
  a.mean += delta * (nb / n);
  a.m2 += b.m2 + delta * delta * (na * nb / n);
  a.count += b.count;
  a.min = std::min(a.min, b.min);
  a.max = std::max(a.max, b.max);
}

template <typename T>
void put_bytes(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take_bytes(const std::string& in, size_t& at) {
  if (at + sizeof(T) > in.size()) throw Error("channel statistics: truncated encoding");
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

// Removes the temporary file unless the rename took it.
struct StatsTempFile {
  std::string path;
  bool keep = false;
  ~StatsTempFile() {
    std::error_code ec;
    if (!keep) std::filesystem::remove(path, ec);
  }
};

// An object creation property list of `cls` that records no modification times: without them
// the same statistics make the same bytes (a file that does not change when remade).
H5Handle timeless(hid_t cls) {
  H5Handle plist(H5Pcreate(cls));
  if (!plist || H5Pset_obj_track_times(plist.get(), false) < 0)
    throw Error(h5_with_cause("cannot make an HDF5 property list"));
  return plist;
}

void write_stats_dataset(hid_t group, const std::string& file, const char* name, const std::vector<double>& values) {
  const hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr));
  const H5Handle dcpl = timeless(H5P_DATASET_CREATE);
  H5Handle ds(H5Dcreate2(group, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!ds) throw Error(file + ": cannot create dataset /climate/" + name + ": " + h5_error_text());
  if (H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw Error(file + ": cannot write dataset /climate/" + name + ": " + h5_error_text());
}

std::string channel_list_text(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return "[" + s + "]";
}

}  // namespace

void ChannelMoments::add_sample(const float* chw, int64_t plane) {
  if (plane <= 0) return;
  for (size_t c = 0; c < m_channels.size(); ++c) {
    const float* v = chw + static_cast<int64_t>(c) * plane;
    Channel s;
    s.count = plane;
    s.mean = plane_sum(v, plane) / static_cast<double>(plane);
    s.m2 = plane_m2(v, plane, s.mean);
    const auto [lo, hi] = std::minmax_element(v, v + plane);
    s.min = *lo;
    s.max = *hi;
    merge_channel(m_channels[c], s);
  }
  ++m_samples;
}

void ChannelMoments::merge(const ChannelMoments& other) {
  if (other.m_channels.size() != m_channels.size())
    throw Error("channel statistics: cannot merge " + std::to_string(other.m_channels.size()) + " channels into " +
                std::to_string(m_channels.size()));
  for (size_t c = 0; c < m_channels.size(); ++c) merge_channel(m_channels[c], other.m_channels[c]);
  m_samples += other.m_samples;
}

double ChannelMoments::variance(int64_t c) const {
  const Channel& ch = channel(c);
  return ch.count > 0 ? ch.m2 / static_cast<double>(ch.count) : 0.0;
}

std::string ChannelMoments::encode() const {
  std::string out(k_encoding_tag, sizeof k_encoding_tag);
  put_bytes(out, static_cast<int64_t>(m_channels.size()));
  put_bytes(out, m_samples);
  for (const Channel& c : m_channels) {
    put_bytes(out, c.count);
    put_bytes(out, c.mean);
    put_bytes(out, c.m2);
    put_bytes(out, c.min);
    put_bytes(out, c.max);
  }
  return out;
}

ChannelMoments ChannelMoments::decode(const std::string& bytes) {
  if (bytes.compare(0, sizeof k_encoding_tag, std::string(k_encoding_tag, sizeof k_encoding_tag)) != 0)
    throw Error("channel statistics: not an encoding of ChannelMoments");
  size_t at = sizeof k_encoding_tag;
  const auto channels = take_bytes<int64_t>(bytes, at);
  if (channels < 0 || channels > (1 << 20)) throw Error("channel statistics: bad channel count in the encoding");
  ChannelMoments m(channels);
  m.m_samples = take_bytes<int64_t>(bytes, at);
  for (Channel& c : m.m_channels) {
    c.count = take_bytes<int64_t>(bytes, at);
    c.mean = take_bytes<double>(bytes, at);
    c.m2 = take_bytes<double>(bytes, at);
    c.min = take_bytes<double>(bytes, at);
    c.max = take_bytes<double>(bytes, at);
  }
  if (at != bytes.size()) throw Error("channel statistics: trailing bytes in the encoding");
  return m;
}

void write_stats_file(const std::string& path, const ChannelMoments& moments, const StatsProvenance& provenance) {
  const int64_t c = moments.channels();
  if (c == 0) throw Error(path + ": no channels to write statistics of");
  std::vector<double> count, mean, sqmean, minval, maxval;
  for (int64_t i = 0; i < c; ++i) {
    const ChannelMoments::Channel& ch = moments.channel(i);
    if (ch.count == 0) throw Error(path + ": channel " + std::to_string(i) + " has no values to write statistics of");
    count.push_back(static_cast<double>(ch.count));
    mean.push_back(ch.mean);
    sqmean.push_back(moments.variance(i) + ch.mean * ch.mean);
    minval.push_back(ch.min);
    maxval.push_back(ch.max);
  }
  const auto check_length = [&](const std::vector<std::string>& v, const char* what) {
    if (!v.empty() && static_cast<int64_t>(v.size()) != c)
      throw Error(path + ": " + std::to_string(v.size()) + " " + what + " for " + std::to_string(c) + " channels");
  };
  check_length(provenance.channel_names, "channel names");
  check_length(provenance.channel_units, "channel units");

  StatsTempFile tmp{path + ".tmp"};
  {
    auto lock = h5_lock();
    const H5Handle fcpl = timeless(H5P_FILE_CREATE), gcpl = timeless(H5P_GROUP_CREATE);
    H5Handle file(H5Fcreate(tmp.path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT));
    if (!file) throw Error(tmp.path + ": cannot create: " + h5_error_text());
    {
      H5Handle group(H5Gcreate2(file.get(), "/climate", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
      if (!group) throw Error(tmp.path + ": cannot create group /climate: " + h5_error_text());
      for (const auto& [name, v] : {std::pair{"count", &count}, {"mean", &mean}, {"sqmean", &sqmean},
                                    {"minval", &minval}, {"maxval", &maxval}})
        write_stats_dataset(group.get(), tmp.path, name, *v);
    }
    try {
      const hid_t root = file.get();
      if (!provenance.channel_names.empty()) h5_write_attr_strings(root, "channel_names", provenance.channel_names);
      if (!provenance.channel_units.empty()) h5_write_attr_strings(root, "channel_units", provenance.channel_units);
      h5_write_attr_int(root, "samples", provenance.samples);
      h5_write_attr_int(root, "skipped_samples", provenance.skipped_samples);
      h5_write_attr_string(root, "source", provenance.source);
      h5_write_attr_string(root, "squall_version", provenance.squall_version);
      h5_write_attr_string(root, "created_by", provenance.created_by);
    } catch (const Error& e) {
      throw Error(tmp.path + ": " + e.what());
    }
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(tmp.path + ": flush failed: " + h5_error_text());
    const hid_t id = file.release();
    if (H5Fclose(id) < 0) throw Error(tmp.path + ": close failed: " + h5_error_text());
  }
  sync_file(tmp.path);
  rename_durably(tmp.path, path);
  tmp.keep = true;
}

StatsProvenance read_stats_provenance(const std::string& path) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(path);
  StatsProvenance p;
  const hid_t root = file.get();
  h5_read_attr_strings(root, "channel_names", p.channel_names, path);
  h5_read_attr_strings(root, "channel_units", p.channel_units, path);
  h5_read_attr_int(root, "samples", p.samples, path);
  h5_read_attr_int(root, "skipped_samples", p.skipped_samples, path);
  h5_read_attr_string(root, "source", p.source, path);
  h5_read_attr_string(root, "squall_version", p.squall_version, path);
  h5_read_attr_string(root, "created_by", p.created_by, path);
  return p;
}

void check_stats_channels(const std::string& stats_path, const std::vector<std::string>& data_channels,
                          const std::string& data_path) {
  if (data_channels.empty()) return;
  const StatsProvenance p = read_stats_provenance(stats_path);
  if (p.channel_names.empty() || p.channel_names == data_channels) return;
  throw Error(stats_path + " holds the statistics of channels " + channel_list_text(p.channel_names) + ", but " +
              data_path + " is read as channels " + channel_list_text(data_channels) +
              ": normalising with it would scale channels by other channels' statistics. Remake it with "
              "`squall data stats --in " + data_path + " --overwrite` (with the --config training uses), "
              "or train on raw values with data.normalize = false");
}

}  // namespace squall::formats
