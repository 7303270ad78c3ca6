#pragma once
// Layers on one tile of a sample split across ranks (docs/design.md, "One sample across
// ranks").
//
// TileHalos moves the cells a layer reads beyond its tile (its halo) between the ranks of the
// group. Each tile's reach is given in the tensor's own coordinates (NeededCells), so every
// rank computes every other's, and each pair of tiles exchanges exactly the cells where one's
// reach meets the other's tile: a reach wider than a neighbour's tile takes cells from the
// tiles beyond it (a dilated convolution on thin tiles), and where the columns wrap (a global
// field's longitude) the westernmost tile's reach continues from the easternmost one's east
// edge, its own columns when the columns are not split (copied, no message).
//
// ConvTile is a convolution on a tile. The layer's own plan convolves the whole tile with its
// usual zero padding, which is exact everywhere but in the output rows and columns whose
// window reaches beyond the tile (the edges). Around it:
//  - forward: the cells its neighbours read are packed and sent, the halos received, while
//    the plan convolves the tile; then each edge strip is convolved again from a window of
//    halo and own cells (a plan of its own, no padding) and written over the plan's edge;
//  - backward: the strips' input gradients in the halo are the neighbours' (the adjoint of
//    the exchange): they are sent back first, and travel while the plan computes the weight
//    gradients and this tile's input gradient; the halos' share of the weight gradients is the
//    strips' weight gradients with the tile's own values masked to zero; what the neighbours
//    send back is added into the input gradient.
// Every tile of a tensor starts on a multiple of the layer's stride (the graph's tile edges
// fall on multiples of the model's total stride), so the strips' windows line up with the
// whole sample's.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/spatial.hpp"

namespace squall::nn {

// Cells of a tensor: rows [y0, y1), columns [x0, x1).
struct CellRect {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  int64_t rows() const { return y1 - y0; }
  int64_t cols() const { return x1 - x0; }
  bool empty() const { return y1 <= y0 || x1 <= x0; }
  CellRect operator&(const CellRect& o) const;  // the intersection
  CellRect moved(int64_t dy, int64_t dx) const { return {y0 + dy, y1 + dy, x0 + dx, x1 + dx}; }
};

// The cells tile (row, col) of a tensor reads, in the tensor's coordinates: within its rows
// and, unless its columns wrap, its columns (columns beyond them, at most one width away,
// are the wrapped ones).
using NeededCells = std::function<CellRect(int64_t row, int64_t col)>;
// Cells a reach may read: within the tensor's rows and, unless its columns wrap, its columns.
CellRect within_tensor(CellRect cells, int64_t height, int64_t width, bool wrap_columns);

// A tensor of layout l as [outer][h][w][inner].
void outer_inner(Layout l, int64_t n, int64_t c, int64_t& outer, int64_t& inner);

class TileHalos {
 public:
  // One block of cells between this tile and group rank `peer`: received (`cells` in this
  // tile's coordinates, its halo) or sent (`cells` of this tile, in its coordinates), with
  // `shift` the number of widths the sender's tile is moved by in the receiver's coordinates
  // (-1, 0 or 1: across the wrapped edge or not).
  struct Block {
    int64_t peer = 0;
    int shift = 0;
    CellRect cells;
  };
  struct Plan {
    std::vector<Block> receives, sends;
    CellRect own;   // this tile, in its coordinates: rows [0, h), columns [0, w)
    CellRect need;  // what it reads, in its coordinates
  };
  // The blocks of tile t on its group for a layer that reads `needed`. Throws squall::Error
  // when a wrapped reach is wider than the tensor.
  static Plan plan(const TensorTile& t, const NeededCells& needed);
  // The elements of the buffers the constructor allocates (each block's, each way and for
  // its gradient), for planning memory.
  static int64_t buffer_elements(const Plan& p, int64_t outer, int64_t inner);
  // The cells this tile receives from other ranks (its own wrap is copied, not received).
  static int64_t received_cells(const Plan& p, int64_t me);

  // outer and inner: the tensor's layout as [outer][h][w][inner] (outer_inner).
  TileHalos(Backend& backend, const TensorTile& t, const NeededCells& needed, TileComm* comm, int node,
            int64_t outer, int64_t inner, DType dtype);
  ~TileHalos();
  TileHalos(const TileHalos&) = delete;
  TileHalos& operator=(const TileHalos&) = delete;

  const Plan& plan() const { return m_plan; }
  bool empty() const { return m_plan.receives.empty() && m_plan.sends.empty(); }

  // Forward: packs and posts this tile's cells that others read (x: this tile); then waits
  // for the halos.
  void start_forward(Stream& s, const void* x);
  void finish_forward(Stream& s);
  // The window r (this tile's coordinates) into dst (r's size, this layout): own cells from x
  // (when `own`), halo cells from those received; cells of neither (beyond the tensor) are
  // left as they are.
  void gather(Stream& s, const CellRect& r, void* dst, const void* x, bool own);
  // The own cells of window `src` (r's size) into x (this tile), overwriting them.
  void scatter_own(Stream& s, const CellRect& r, const void* src, void* x);

  // Backward: zero the halos' gradients, add each window's gradient in them, send them to
  // their owners (want: someone needs this tensor's gradient; else nothing is sent), then
  // wait for this tile's cells' gradients from the others and add them into dx.
  void zero_gradients(Stream& s);
  void add_gradient(Stream& s, const CellRect& r, const void* dwindow);
  void start_backward(Stream& s);
  void finish_backward(Stream& s, void* dx);

  // Zeroes backend buffer b (synchronizing s).
  static void clear(Backend& backend, Stream& s, const Buffer& b);

  // A copy between rectangles of the same size (rows x cols) in tensors of the given sizes
  // (this layout and channel count), added into dst when `accumulate`.
  void copy_rect(Stream& s, void* dst, int64_t dst_h, int64_t dst_w, int64_t dst_y, int64_t dst_x, const void* src,
                 int64_t src_h, int64_t src_w, int64_t src_y, int64_t src_x, int64_t rows, int64_t cols,
                 bool accumulate);

 private:
  struct Buffers {
    Buffer data, grad;            // the block's cells and their gradient
    Buffer host_data, host_grad;  // staging where the host cannot read backend memory
  };
  void exchange(Stream& s, bool backward);
  void wait(Stream& s, bool backward);
  int64_t count(const Block& b) const { return m_outer * b.cells.rows() * b.cells.cols() * m_inner; }
  // Whether the halos go through pinned host copies: device memory the host cannot read, and
  // a communicator that takes host memory only.
  bool stages() const { return !m_host && !m_on_device; }
  const Buffers& self_receive(int shift) const;  // the received block of this tile's own wrap

  Backend& m_backend;
  TileComm* m_comm;
  int m_node;
  int64_t m_me = 0;
  int64_t m_outer = 1, m_inner = 1;
  DType m_dtype;
  bool m_host = true;       // the host reads the backend's memory (the CPU)
  bool m_on_device = false;  // the communicator exchanges the device's memory (NCCL)
  Plan m_plan;
  std::vector<Buffers> m_received, m_sent;  // per m_plan.receives, .sends
  Buffer m_zeros;                           // as large as the largest received block
  std::unique_ptr<TileComm::Exchange> m_exchange;
  bool m_send_grads = false;
};

// One axis of a convolution on a tile: the tile's size in input and output, the halo rows it
// needs before and after it (0 where nothing lies there) and the output rows at each end that
// read them (its edges).
struct HaloAxis {
  int64_t in = 0, out = 0;
  int64_t kernel = 1, stride = 1, pad = 0, dilation = 1;
  int64_t lo = 0, hi = 0;
  int64_t edge_lo = 0, edge_hi = 0;
  // The input rows that output rows [o0, o1) read: [o0 * stride - pad, (o1 - 1) * stride - pad + reach].
  int64_t first_read(int64_t o0) const { return o0 * stride - pad; }
  int64_t end_read(int64_t o1) const { return (o1 - 1) * stride - pad + dilation * (kernel - 1) + 1; }
};
HaloAxis halo_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                   bool before, bool after);

class ConvTile {
 public:
  // "" when the convolution `local` (the layer's description on this rank's tile) runs on the
  // tiles of `t`, else why not (a transposed kernel, a stride the tiles do not keep, a wrapped
  // reach wider than the sample).
  static std::string check(const ConvDesc& local, const TileContext& t);
  // Whether it exchanges anything (a 1x1 convolution, or a split along an axis the kernel does
  // not reach across, needs nothing around its plan).
  static bool needs_halos(const ConvDesc& local, const TileContext& t);

  ConvTile(Backend& backend, const ConvDesc& local, const TileContext& t);
  ~ConvTile();

  // For planning memory, allocating nothing: the bytes of backend memory the constructor
  // allocates for `local` on the tiles of `t` (0 where it needs no halos): the halos' buffers
  // each way, the edge strips' windows and outputs, and the copy of the weight gradients; not
  // the host copies of the halos a device backend stages through, nor the strips' plans' own
  // workspaces. strips(): how many edge strips (each a plan of its own) it makes.
  static size_t buffer_bytes(const ConvDesc& local, const TileContext& t);
  static size_t strips(const ConvDesc& local, const TileContext& t);
  // The values of its input this tile receives from other ranks per forward pass.
  static int64_t received_values(const ConvDesc& local, const TileContext& t);

  // Around the layer's plan: start_forward before its forward (packs and sends this tile's
  // cells), finish_forward after (waits for the halos, convolves the edge strips over y).
  void start_forward(Stream& s, const void* x);
  void finish_forward(Stream& s, const void* x, const float* w, const float* b, void* y);
  // start_backward before the plan's backward (the strips' gradients: the halos' part sent
  // to their owners; want_dx false: nobody needs this layer's input gradient, nothing is
  // sent); add_halo_weight_gradients after the plan's backward_weights (dw += the halos'
  // share); finish_backward after its backward_data (adds what the neighbours sent into dx).
  void start_backward(Stream& s, const void* dy, const float* w, bool want_dx);
  void add_halo_weight_gradients(Stream& s, float* dw);
  void finish_backward(Stream& s, void* dx);

  // A tile whose edges meet (as thin as its halos: a dilated convolution on thin tiles) is one
  // strip across, which computes the whole output: the layer's plan is then not run at all.
  // forward_whole and backward_whole replace the plan and the calls above: the window of own
  // and halo cells is convolved into y; backward takes the weight gradients (dw, db
  // overwritten) from the whole window and this tile's input gradient from its own cells.
  bool whole() const { return m_whole; }
  void forward_whole(Stream& s, const void* x, const float* w, const float* b, void* y);
  void backward_whole(Stream& s, const void* dy, const float* w, float* dw, float* db, void* dx);

 private:
  struct Strip {
    CellRect out, in;  // its output cells, and the input window they read
    std::unique_ptr<ConvPlan> plan;
    Buffer window, masked, y, dy, dwindow;
  };
  // Where the halos and edge strips lie (the constructor's and buffer_bytes' one source): the
  // axes on this tile, what the tiles read of each other, and each edge strip's output and
  // the input window it reads.
  struct Geometry {
    HaloAxis rows, cols;
    NeededCells needed;
    TileHalos::Plan halos;
    std::vector<std::pair<CellRect, CellRect>> strips;  // (output, input window)
  };
  static Geometry geometry(const ConvDesc& d, const TileContext& t);
  BlockCopy output_block(const CellRect& r, bool to_strip) const;

  Backend& m_backend;
  ConvDesc m_desc;
  int64_t m_outer_out = 1, m_inner_out = 1;
  std::unique_ptr<TileHalos> m_halos;
  std::vector<Strip> m_strips;
  Buffer m_dw, m_db;
  bool m_want_dx = false;
  bool m_whole = false;  // one strip covers the whole output
};

}  // namespace squall::nn
