// Tiles of a split sample and the sums over a group (src/nn/spatial.hpp).
#include "src/nn/spatial.hpp"

#include <algorithm>
#include <vector>

#include "src/core/error.hpp"

namespace squall::nn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The spans scaled from the input's `full` rows to a tensor's `size` rows (a power of two
// apart either way); throws when an edge would fall between rows.
std::vector<Span> scaled(const std::vector<Span>& spans, int64_t full, int64_t size, const char* what) {
  std::vector<Span> out;
  for (const Span& s : spans) {
    if ((s.begin * size) % full != 0 || (s.end * size) % full != 0)
      throw Error(std::string("spatial split: a tile edge at input ") + what + " " + str(s.begin) + " or " +
                  str(s.end) + " falls between " + what + "s of a tensor of " + str(size) + " " + what +
                  "s (input " + str(full) + "): the model's stride is finer than the tile edges");
    out.push_back({s.begin * size / full, s.end * size / full});
  }
  return out;
}

}  // namespace

std::string SpatialSplit::str() const {
  std::string s = "[";
  s += std::to_string(rows);
  s += ", ";
  s += std::to_string(cols);
  s += "]";
  return s;
}

std::vector<Span> tile_spans(int64_t extent, int64_t parts, int64_t multiple) {
  if (parts < 1 || multiple < 1) throw Error("spatial split: parts and multiple must be positive");
  if (extent % multiple != 0)
    throw Error("spatial split: " + str(extent) + " is not a multiple of " + str(multiple) +
                " (the model's total stride, on which tile edges fall)");
  const int64_t blocks = extent / multiple;
  if (blocks < parts)
    throw Error("spatial split: " + str(extent) + " cannot be cut into " + str(parts) + " tiles on multiples of " +
                str(multiple) + " (at most " + str(blocks) + ")");
  std::vector<Span> spans;
  int64_t at = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t b = blocks / parts + (p < blocks % parts ? 1 : 0);
    spans.push_back({at, at + b * multiple});
    at += b * multiple;
  }
  return spans;
}

SpatialPlace SpatialPlace::make(SpatialSplit split, int64_t rank, int64_t height, int64_t width, int64_t multiple,
                                bool wrap_columns) {
  if (split.rows < 1 || split.cols < 1) throw Error("spatial split: " + split.str() + " must be positive");
  if (rank < 0 || rank >= split.ranks())
    throw Error("spatial split: group rank " + str(rank) + " outside a split of " + str(split.ranks()));
  SpatialPlace p;
  p.split = split;
  p.row = rank / split.cols;
  p.col = rank % split.cols;
  p.height = height;
  p.width = width;
  p.multiple = multiple;
  p.row_spans = tile_spans(height, split.rows, multiple);
  p.col_spans = tile_spans(width, split.cols, multiple);
  p.wrap_columns = wrap_columns;
  return p;
}

std::vector<Span> SpatialPlace::row_spans_at(int64_t h) const { return scaled(row_spans, height, h, "row"); }
std::vector<Span> SpatialPlace::col_spans_at(int64_t w) const { return scaled(col_spans, width, w, "column"); }

std::unique_ptr<TileComm::Exchange> SoloTileComm::start(const std::vector<Message>& sends,
                                                        const std::vector<Message>& receives) {
  SQUALL_CHECK(sends.empty() && receives.empty(), "a group of one rank was asked to send a halo");
  struct Done final : Exchange {
    void wait() override {}
  };
  return std::make_unique<Done>();
}

void SoloTileComm::gather(const double* mine, size_t n, double* all) { std::copy(mine, mine + n, all); }

TensorTile whole_tensor() {
  TensorTile t;
  t.image = false;
  return t;
}

double label_weight_sum(const int32_t* labels, size_t n, const float* class_weights, int64_t classes) {
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t l = labels[i];
    if (l < 0 || l >= classes) continue;
    total += class_weights != nullptr ? static_cast<double>(class_weights[l]) : 1.0;
  }
  return total;
}

std::unique_ptr<TileComm::Exchange> TileComm::start_on(Stream&, const std::vector<Message>&,
                                                      const std::vector<Message>&) {
  throw Error("spatial split: this group's communication exchanges host memory only (start_on was called)");
}

std::vector<size_t> TileComm::pair_order(const std::vector<Message>& messages) {
  std::vector<size_t> order(messages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Message& x = messages[a];
    const Message& y = messages[b];
    return x.peer != y.peer ? x.peer < y.peer : x.tag < y.tag;
  });
  return order;
}

void TileComm::sum(double* values, size_t n) {
  const auto size = static_cast<size_t>(group_size());
  std::vector<double>& all = m_gathered;
  all.resize(n * size);
  gather(values, n, all.data());
  for (size_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (size_t r = 0; r < size; ++r) s += all[r * n + i];
    values[i] = s;
  }
}

void TileComm::merge_moments(double* triples, size_t channels) {
  const auto size = static_cast<size_t>(group_size());
  const size_t n = 3 * channels;
  std::vector<double>& all = m_gathered;
  all.resize(n * size);
  gather(triples, n, all.data());
  for (size_t c = 0; c < channels; ++c) {
    double count = 0.0, mean = 0.0, m2 = 0.0;
    for (size_t r = 0; r < size; ++r) {
      const double* t = all.data() + r * n + 3 * c;
      const double nb = t[0];
      if (nb <= 0.0) continue;
      const double total = count + nb;
      const double delta = t[1] - mean;
      mean += delta * nb / total;
      m2 += t[2] + delta * delta * count * nb / total;
      count = total;
    }
    triples[3 * c] = count;
    triples[3 * c + 1] = mean;
    triples[3 * c + 2] = m2;
  }
}

TensorTile tensor_tile(const SpatialPlace& place, int64_t height, int64_t width) {
  TensorTile t;
  t.height = height;
  t.width = width;
  t.row_spans = place.row_spans_at(height);
  t.col_spans = place.col_spans_at(width);
  t.row = place.row;
  t.col = place.col;
  t.wrap_columns = place.wrap_columns;
  return t;
}

}  // namespace squall::nn
