#pragma once
// A convolution on one tile of a sample split across ranks (docs/design.md, "One sample
// across ranks"). The layer's own plan convolves the whole tile with its usual zero padding,
// which is exact everywhere but in the output rows and columns next to a neighbour's tile
// (the edges), whose receptive field reaches into that tile (the halo). Around it:
//  - forward: this rank's rows that its neighbours need are packed and sent, the halos
//    received, while the plan convolves the tile; then each edge strip is convolved again
//    from a small window of halo and own rows (a plan of its own, no padding) and written
//    over the plan's edge;
//  - backward: the strips' input gradients in the halo are the neighbours' (the adjoint of
//    the exchange): they are sent back first, and travel while the plan computes the weight
//    gradients and this tile's input gradient; the halos' share of the weight gradients is the
//    strips' weight gradients with the tile's own values masked to zero; what the neighbours
//    send back is added into the input gradient.
// Every tile of a tensor starts on a multiple of the layer's stride (the graph's tile edges
// fall on multiples of the model's total stride), so halo and edge widths are the same on
// every rank and each halo comes from the next tile alone (a tile thinner than a halo is
// refused).
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/spatial.hpp"

namespace squall::nn {

// One axis of a convolution on a tile: the tile's size in input and output, the halo rows it
// needs before and after it (0 where it has no neighbour there) and the output rows at each
// end that read them (its edges).
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
  // tiles of `t`, else why not (a tile thinner than the halo, a stride the tiles do not keep).
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

  // Around the layer's plan: start_forward before its forward (packs and sends this tile's
  // rows), finish_forward after (waits for the halos, convolves the edge strips over y).
  void start_forward(Stream& s, const void* x);
  void finish_forward(Stream& s, const void* x, const float* w, const float* b, void* y);
  // start_backward before the plan's backward (the strips' gradients: the halos' part sent
  // to their owners; want_dx false: nobody needs this layer's input gradient, nothing is
  // sent); add_halo_weight_gradients after the plan's backward_weights (dw += the halos'
  // share); finish_backward after its backward_data (adds what the neighbours sent into dx).
  void start_backward(Stream& s, const void* dy, const float* w, bool want_dx);
  void add_halo_weight_gradients(Stream& s, float* dw);
  void finish_backward(Stream& s, void* dx);

 private:
  struct Rect {
    int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // rows [y0, y1), columns [x0, x1)
    int64_t rows() const { return y1 - y0; }
    int64_t cols() const { return x1 - x0; }
    bool empty() const { return y1 <= y0 || x1 <= x0; }
  };
  struct Strip {
    Rect out, in;  // its output rows and columns, and the input window they read
    std::unique_ptr<ConvPlan> plan;
    Buffer window, masked, y, dy, dwindow;
  };
  struct Halo {  // one side with a neighbour
    Side side{};
    int64_t peer = 0;
    Rect recv, send;         // in this tile's input coordinates: the halo, and the own rows sent
    int64_t recv_count = 0, send_count = 0;  // their elements (0: nothing goes that way)
    Buffer recv_buf, send_buf, grad_buf, grad_back;  // grad_back: the neighbour's gradient of `send`
    Buffer host_recv, host_send, host_grad, host_grad_back;  // staging where the host cannot read
  };

  // Where the halos and edge strips lie (the constructor's and buffer_bytes' one source): the
  // axes on this tile, the sides with a neighbour and what travels each way (in this tile's
  // input coordinates), and each edge strip's output and the input window it reads.
  struct Neighbour {
    Side side{};
    Rect recv, send;
  };
  struct Geometry {
    HaloAxis rows, cols;
    std::vector<Neighbour> sides;
    std::vector<std::pair<Rect, Rect>> strips;  // (output, input window)
  };
  static Geometry geometry(const ConvDesc& d, const TileContext& t);

  // A copy between two rectangles of the same size in tensors of the given sizes (in this
  // layout and channel count).
  void copy_rect(Stream& s, void* dst, int64_t dst_h, int64_t dst_w, int64_t dst_y, int64_t dst_x, const void* src,
                 int64_t src_h, int64_t src_w, int64_t src_y, int64_t src_x, int64_t rows, int64_t cols,
                 bool accumulate);
  // The window of input cells `r` into `dst` (r's size): own cells from x (when `own`), halo
  // cells from the halos received; cells of neither (beyond the sample) are left as they are.
  void gather(Stream& s, const Rect& r, void* dst, const void* x, bool own);
  void exchange(Stream& s, bool backward);
  void wait(Stream& s, bool backward);
  Rect own_rect() const { return {0, m_rows.in, 0, m_cols.in}; }
  static Rect halo_rect(const HaloAxis& rows, const HaloAxis& cols, Side side);
  void zero(Stream& s, const Buffer& b);
  BlockCopy output_block(const Rect& r, bool to_strip) const;

  Backend& m_backend;
  ConvDesc m_desc;
  TileComm* m_comm;
  int m_node;
  HaloAxis m_rows, m_cols;
  // The input's and the output's layouts as [outer][h][w][inner].
  int64_t m_outer_in = 1, m_inner = 1, m_outer_out = 1, m_inner_out = 1;
  bool m_host = true;  // the host reads backend memory (no staging)
  std::vector<Strip> m_strips;
  std::vector<Halo> m_halos;
  Buffer m_zeros, m_dw, m_db;
  std::unique_ptr<TileComm::Exchange> m_exchange;
  bool m_send_grads = false;
};

}  // namespace squall::nn
