#pragma once
// One sample across ranks (docs/design.md, "One sample across ranks"): a group of rows x cols
// ranks holds each sample, one tile each. This header has what a graph needs to run on a
// tile, below any communication library:
//  - where the tiles lie (tile_spans, SpatialPlace): the sample's rows and columns are cut on
//    multiples of the model's total stride, so that every pooling and strided layer stays
//    aligned and each tensor of the model is cut at the same places, scaled to its size;
//  - the communication a tile needs from its group (TileComm): a layer's halo exchange with
//    its neighbours (point to point, started, then waited for), and the sums over the group of
//    batch norm's statistics and the loss's weights (gathered, then added in group-rank order,
//    so that every rank of the group has the same bits);
//  - what the graph hands each layer before it is set up on its tile (TileContext).
// The communicators themselves are above: MPI's in src/parallel, threads' in the tests.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace squall::nn {

class Stream;  // src/nn/device.hpp

// parallel.spatial: the ranks that hold one sample, rows x cols of them.
struct SpatialSplit {
  int64_t rows = 1, cols = 1;
  int64_t ranks() const { return rows * cols; }
  bool split() const { return ranks() > 1; }
  std::string str() const;  // "[2, 1]"
  bool operator==(const SpatialSplit&) const = default;
};

// A half-open range [begin, end) of rows or columns.
struct Span {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Span&) const = default;
};

// `extent` rows cut into `parts` tiles whose edges fall on multiples of `multiple`: the
// extent's blocks of `multiple` are dealt out evenly, the first tiles taking one block more
// where they do not divide (768 rows in blocks of 8 over 5 ranks: 20, 19, 19, 19, 19 blocks).
// Throws squall::Error when the extent is not a multiple of `multiple` or has fewer blocks than
// parts (the message names both).
std::vector<Span> tile_spans(int64_t extent, int64_t parts, int64_t multiple);

// A rank's place in its group and where every tile of the group lies on the model's input.
struct SpatialPlace {
  SpatialSplit split;
  int64_t row = 0, col = 0;      // this rank's tile; its group rank is row * split.cols + col
  int64_t height = 0, width = 0; // the whole sample (the model's input)
  int64_t multiple = 1;          // tile edges fall on multiples of this (the model's total stride)
  std::vector<Span> row_spans, col_spans;  // of every tile row and column, at the input
  // model.padding = "periodic_longitude": the columns wrap (a global field's west edge
  // continues its east edge), so the westernmost tile's western halo is the easternmost
  // tile's east (its own, unsplit), as for every other pair of neighbours.
  bool wrap_columns = false;

  // The place of group rank `rank` in a split of a height x width sample.
  static SpatialPlace make(SpatialSplit split, int64_t rank, int64_t height, int64_t width, int64_t multiple,
                           bool wrap_columns = false);
  int64_t group_rank() const { return row * split.cols + col; }
  int64_t rank_at(int64_t r, int64_t c) const { return r * split.cols + c; }
  Span rows() const { return row_spans[static_cast<size_t>(row)]; }
  Span cols() const { return col_spans[static_cast<size_t>(col)]; }
  // The tiles of a tensor of h x w (a layer's input or output: the input scaled by a power of
  // two in each direction) as its own rows and columns; throws when an edge does not scale to
  // a whole row (the model's stride is finer than `multiple`).
  std::vector<Span> row_spans_at(int64_t h) const;
  std::vector<Span> col_spans_at(int64_t w) const;
};

// Time spent on halos, per rank, as the allreduce's: exposed (the rank waited for them) and
// hidden (they travelled while the rank computed).
struct HaloTimes {
  double exposed = 0, hidden = 0;
  int64_t exchanges = 0;
  double bytes = 0;  // sent
};

// The communication of one rank with the rest of its group. Not thread-safe: the graph's
// layers call it in graph order from the thread that runs their stream's work (the host, or
// the stream's worker under run.cpu_streams = async), so that every rank of the group makes
// the same calls in the same order; a caller of its own (the loss's sum) synchronizes the
// stream first.
class TileComm {
 public:
  virtual ~TileComm() = default;
  virtual int64_t group_rank() const = 0;
  virtual int64_t group_size() const = 0;

  // One buffer of a halo exchange: sent to or received from group rank `peer`, matched by
  // `tag` (a layer's node and pass, and the shift of the sender's tile across the wrapped edge).
  struct Message {
    int64_t peer = 0;
    int64_t tag = 0;
    void* data = nullptr;
    size_t bytes = 0;
  };
  class Exchange {
   public:
    virtual ~Exchange() = default;
    // Returns when every receive buffer is written and every send buffer may be reused.
    virtual void wait() = 0;
    // The later work of stream `s` comes after the exchange: the receive buffers written, the
    // send buffers free. An exchange of device memory orders the stream by an event, without
    // the host waiting; one of host memory waits (wait()).
    virtual void order(Stream& s) {
      (void)s;
      wait();
    }
  };
  // Posts the sends and receives of one exchange and returns at once; the buffers belong to
  // the exchange until its wait() returns (host memory).
  virtual std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) = 0;

  // Whether the exchanges take the backend's device memory (start_on): NCCL's send and receive
  // on a GPU's buffers, where halos need no copy through the host. False: host memory only
  // (start), which a device backend stages through pinned buffers.
  virtual bool device_memory() const { return false; }
  // device_memory() only: posts one exchange of device buffers after the work of stream
  // `after` so far and returns at once, neither the host nor `after` waiting; the exchange's
  // order(s) then puts it before s's later work. The buffers belong to the exchange until then.
  // Messages between a pair of ranks are matched by the order both post them in (pair_order),
  // not by their tags.
  virtual std::unique_ptr<Exchange> start_on(Stream& after, const std::vector<Message>& sends,
                                             const std::vector<Message>& receives);
  // The order in which a transport that matches a pair's messages by their order, not by tags
  // (NCCL), posts an exchange's messages: by peer, then tag, then position. A sender's
  // messages to a peer and the peer's receives from it then pair up one by one where their
  // tags do, since an exchange has at most one message per peer, tag and direction. The
  // indices of `messages` in that order.
  static std::vector<size_t> pair_order(const std::vector<Message>& messages);
  // all[r * n + i] = rank r's mine[i], for every rank r of the group (blocks until all have
  // called it).
  virtual void gather(const double* mine, size_t n, double* all) = 0;
  virtual HaloTimes halo_times() const = 0;

  // values[i] summed over the group in group-rank order (the same bits on every rank).
  void sum(double* values, size_t n);
  // Per channel, (count, mean, m2) with m2 the sum of squared deviations from the mean: this
  // rank's in, the whole group's out, merged pairwise in group-rank order (Chan, Golub and
  // LeVeque), which stays exact where the ranks' means differ widely.
  void merge_moments(double* triples, size_t channels);

 private:
  std::vector<double> m_gathered;  // sum's and merge_moments' gather, kept: no allocation per call
};

// The group of one rank: an unsplit graph whose columns wrap (model.padding =
// "periodic_longitude") runs as the one tile of a [1, 1] split, its halos its own columns,
// copied without messages. Nothing reaches start(); gather() copies.
class SoloTileComm final : public TileComm {
 public:
  int64_t group_rank() const override { return 0; }
  int64_t group_size() const override { return 1; }
  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) override;
  void gather(const double* mine, size_t n, double* all) override;
  HaloTimes halo_times() const override { return {}; }
};

// The weight of a tile's pixels in the weighted mean loss (Kernels::softmax_cross_entropy):
// the sum of class_weights[label] over its labels >= 0 (1 each when class_weights is null),
// read on the host. A split sample's loss is its tiles' losses weighted by these over their sum.
double label_weight_sum(const int32_t* labels, size_t n, const float* class_weights, int64_t classes);

// What the graph hands a layer before setting it up on its tile: its tensors' tiles (each
// input's and the output's rows and columns on this rank, and the tile edges of every rank at
// that size), the group's communication, and the node's id (which tags its messages).
// A tensor of no pixels ([n, f]: DeepLab's pooled image features) is no image: every rank of
// the group holds all of it, computed alike (`image` false, no spans). Its gradient on a rank
// is that rank's tiles' share, so the layer that made it from an image (the global average
// pool) sums its gradient over the group, and weights that read it get the tile's share of
// their gradient, as every weight of a split model does.
struct TensorTile {
  bool image = true;
  int64_t height = 0, width = 0;          // the whole tensor
  std::vector<Span> row_spans, col_spans;  // every tile's
  int64_t row = 0, col = 0;               // this rank's tile
  bool wrap_columns = false;              // SpatialPlace::wrap_columns
  Span rows() const { return row_spans[static_cast<size_t>(row)]; }
  Span cols() const { return col_spans[static_cast<size_t>(col)]; }
  int64_t tile_rows() const { return static_cast<int64_t>(row_spans.size()); }
  int64_t tile_cols() const { return static_cast<int64_t>(col_spans.size()); }
};

// A tensor of the whole sample's height x width on the tiles of `place` (its spans scaled to
// the tensor: SpatialPlace::row_spans_at), as the graph hands it to its layers.
TensorTile tensor_tile(const SpatialPlace& place, int64_t height, int64_t width);

// A tensor of the whole sample's that is no image (TensorTile::image false).
TensorTile whole_tensor();

struct TileContext {
  const SpatialPlace* place = nullptr;
  TileComm* comm = nullptr;
  int node = 0;
  std::vector<TensorTile> inputs;
  TensorTile output;
};

}  // namespace squall::nn
