// Layers on a tile of a split sample: the halos, and a convolution's edge strips
// (src/nn/layers/halo.hpp).
#include "src/nn/layers/halo.hpp"

#include <algorithm>
#include <vector>

#include "src/core/error.hpp"

namespace squall::nn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The tag of a message: the node, the pass, and the shift of the sender's tile in the
// receiver's coordinates (a pair of tiles exchanges at most one block per shift).
int64_t tag_of(int node, bool backward, int shift) {
  return (static_cast<int64_t>(node) * 2 + (backward ? 1 : 0)) * 3 + (shift + 1);
}

}  // namespace

CellRect CellRect::operator&(const CellRect& o) const {
  return {std::max(y0, o.y0), std::min(y1, o.y1), std::max(x0, o.x0), std::min(x1, o.x1)};
}

CellRect within_tensor(CellRect n, int64_t height, int64_t width, bool wrap_columns) {
  n.y0 = std::max<int64_t>(n.y0, 0);
  n.y1 = std::min(n.y1, height);
  if (!wrap_columns) {
    n.x0 = std::max<int64_t>(n.x0, 0);
    n.x1 = std::min(n.x1, width);
  }
  return n;
}

void outer_inner(Layout l, int64_t n, int64_t c, int64_t& outer, int64_t& inner) {
  const int64_t block = channel_block(l);
  if (l == Layout::nhwc) {
    outer = n;
    inner = c;
  } else if (block > 0) {
    outer = n * (c / block);
    inner = block;
  } else {
    outer = n * c;
    inner = 1;
  }
}

// ---- TileHalos ----

TileHalos::Plan TileHalos::plan(const TensorTile& t, const NeededCells& needed) {
  const int64_t rows = t.tile_rows(), cols = t.tile_cols(), width = t.width;
  const auto own_of = [&](int64_t r, int64_t c) {
    const Span& y = t.row_spans[static_cast<size_t>(r)];
    const Span& x = t.col_spans[static_cast<size_t>(c)];
    return CellRect{y.begin, y.end, x.begin, x.end};
  };
  const CellRect mine = own_of(t.row, t.col);
  const int64_t me = t.row * cols + t.col;
  Plan p;
  p.own = mine.moved(-mine.y0, -mine.x0);
  const CellRect my_need = needed(t.row, t.col);
  SQUALL_CHECK(t.wrap_columns || (my_need.x0 >= 0 && my_need.x1 <= width),
               "tile halos: a reach beyond the sample's columns where they do not wrap");
  if (my_need.x0 < -width || my_need.x1 > 2 * width)
    throw Error("its reach of " + str(std::max(-my_need.x0, my_need.x1 - width)) +
                " columns beyond the sample's edge is wider than the sample (" + str(width) +
                " columns), which wrapped columns cannot give");
  p.need = my_need.moved(-mine.y0, -mine.x0);
  const std::vector<int> shifts = t.wrap_columns ? std::vector<int>{-1, 0, 1} : std::vector<int>{0};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t peer = r * cols + c;
      const CellRect theirs = own_of(r, c);
      const CellRect their_need = needed(r, c);
      for (int k : shifts) {
        if (peer == me && k == 0) continue;
        // What this tile reads of theirs (moved k widths), and what they read of this one.
        const CellRect in = my_need & theirs.moved(0, k * width);
        if (!in.empty()) p.receives.push_back({peer, k, in.moved(-mine.y0, -mine.x0)});
        const CellRect out = their_need & mine.moved(0, k * width);
        if (!out.empty()) p.sends.push_back({peer, k, out.moved(-mine.y0, -mine.x0 - k * width)});
      }
    }
  return p;
}

int64_t TileHalos::buffer_elements(const Plan& p, int64_t outer, int64_t inner) {
  int64_t elements = 0, largest = 1;
  for (const Block& b : p.receives) {
    elements += 2 * std::max<int64_t>(outer * b.cells.rows() * b.cells.cols() * inner, 1);
    largest = std::max(largest, outer * b.cells.rows() * b.cells.cols() * inner);
  }
  for (const Block& b : p.sends) elements += 2 * std::max<int64_t>(outer * b.cells.rows() * b.cells.cols() * inner, 1);
  return elements + largest;  // and the zeros
}

int64_t TileHalos::received_cells(const Plan& p, int64_t me) {
  int64_t cells = 0;
  for (const Block& b : p.receives)
    if (b.peer != me) cells += b.cells.rows() * b.cells.cols();
  return cells;
}

TileHalos::TileHalos(Backend& backend, const TensorTile& t, const NeededCells& needed, TileComm* comm, int node,
                     int64_t outer, int64_t inner, DType dtype)
    : m_backend(backend), m_comm(comm), m_node(node), m_outer(outer), m_inner(inner), m_dtype(dtype) {
  SQUALL_CHECK(m_comm != nullptr, "tile halos: no group communicator");
  m_plan = plan(t, needed);
  m_me = t.row * t.tile_cols() + t.col;
  m_host = backend.capabilities().host_accessible;
  m_on_device = m_comm->device_memory();
  const auto make = [&](const Block& b) {
    const auto n = static_cast<size_t>(std::max<int64_t>(count(b), 1));
    Buffers x;
    x.data = backend.allocate(n, dtype);
    x.grad = backend.allocate(n, dtype);
    if (stages() && b.peer != m_me) {
      x.host_data = backend.allocate_host(n, dtype);
      x.host_grad = backend.allocate_host(n, dtype);
    }
    return x;
  };
  for (const Block& b : m_plan.receives) m_received.push_back(make(b));
  for (const Block& b : m_plan.sends) m_sent.push_back(make(b));
  int64_t largest = 1;
  for (const Block& b : m_plan.receives) largest = std::max(largest, count(b));
  m_zeros = backend.allocate(static_cast<size_t>(largest), dtype);
  auto stream = backend.create_stream();
  clear(backend, *stream, m_zeros);
  backend.synchronize(*stream);
}

void TileHalos::clear(Backend& backend, Stream& s, const Buffer& b) {
  if (!b) return;
  const std::vector<char> zeros(b.bytes(), 0);
  backend.copy_bytes_from_host(s, b.raw(), zeros.data(), b.bytes());
  backend.synchronize(s);  // the host's zeros go when this returns
}

TileHalos::~TileHalos() {
  // An exchange still in flight (an exception between start and finish) completes before its
  // buffers go.
  if (m_exchange) {
    try {
      m_exchange->wait();
    } catch (...) {
    }
  }
}

const TileHalos::Buffers& TileHalos::self_receive(int shift) const {
  for (size_t i = 0; i < m_plan.receives.size(); ++i)
    if (m_plan.receives[i].peer == m_me && m_plan.receives[i].shift == shift) return m_received[i];
  throw Error("tile halos: a wrapped block sent to this tile has no place to land");
}

void TileHalos::copy_rect(Stream& s, void* dst, int64_t dst_h, int64_t dst_w, int64_t dst_y, int64_t dst_x,
                          const void* src, int64_t src_h, int64_t src_w, int64_t src_y, int64_t src_x, int64_t rows,
                          int64_t cols, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  BlockCopy b;
  b.outer = m_outer;
  b.rows = rows;
  b.count = cols * m_inner;
  b.src_offset = (src_y * src_w + src_x) * m_inner;
  b.src_outer = src_h * src_w * m_inner;
  b.src_row = src_w * m_inner;
  b.dst_offset = (dst_y * dst_w + dst_x) * m_inner;
  b.dst_outer = dst_h * dst_w * m_inner;
  b.dst_row = dst_w * m_inner;
  m_backend.copy_block(s, m_dtype, dst, src, b, accumulate);
}

void TileHalos::start_forward(Stream& s, const void* x) {
  const CellRect& own = m_plan.own;
  for (size_t i = 0; i < m_plan.sends.size(); ++i) {
    const Block& b = m_plan.sends[i];
    // This tile's own wrap lands straight in its received block.
    void* dst = b.peer == m_me ? self_receive(b.shift).data.raw() : m_sent[i].data.raw();
    copy_rect(s, dst, b.cells.rows(), b.cells.cols(), 0, 0, x, own.rows(), own.cols(), b.cells.y0, b.cells.x0,
              b.cells.rows(), b.cells.cols(), false);
  }
  exchange(s, false);
}

void TileHalos::finish_forward(Stream& s) { wait(s, false); }

void TileHalos::gather(Stream& s, const CellRect& r, void* dst, const void* x, bool own) {
  const auto put = [&](const CellRect& region, const void* src) {
    const CellRect c = r & region;
    if (c.empty()) return;
    copy_rect(s, dst, r.rows(), r.cols(), c.y0 - r.y0, c.x0 - r.x0, src, region.rows(), region.cols(),
              c.y0 - region.y0, c.x0 - region.x0, c.rows(), c.cols(), false);
  };
  if (own) put(m_plan.own, x);
  for (size_t i = 0; i < m_plan.receives.size(); ++i) put(m_plan.receives[i].cells, m_received[i].data.raw());
}

void TileHalos::scatter_own(Stream& s, const CellRect& r, const void* src, void* x) {
  const CellRect& own = m_plan.own;
  const CellRect c = r & own;
  if (c.empty()) return;
  copy_rect(s, x, own.rows(), own.cols(), c.y0, c.x0, src, r.rows(), r.cols(), c.y0 - r.y0, c.x0 - r.x0, c.rows(),
            c.cols(), false);
}

void TileHalos::zero_gradients(Stream& s) {
  for (size_t i = 0; i < m_plan.receives.size(); ++i)
    m_backend.copy_bytes(s, m_received[i].grad.raw(), m_zeros.raw(), static_cast<size_t>(count(m_plan.receives[i])) *
                                                                          dtype_size(m_dtype));
}

void TileHalos::add_gradient(Stream& s, const CellRect& r, const void* dwindow) {
  for (size_t i = 0; i < m_plan.receives.size(); ++i) {
    const CellRect& h = m_plan.receives[i].cells;
    const CellRect c = r & h;
    if (c.empty()) continue;
    copy_rect(s, m_received[i].grad.raw(), h.rows(), h.cols(), c.y0 - h.y0, c.x0 - h.x0, dwindow, r.rows(), r.cols(),
              c.y0 - r.y0, c.x0 - r.x0, c.rows(), c.cols(), true);
  }
}

void TileHalos::start_backward(Stream& s) {
  m_send_grads = true;
  exchange(s, true);
}

void TileHalos::finish_backward(Stream& s, void* dx) {
  if (!m_send_grads) return;
  m_send_grads = false;
  wait(s, true);
  const CellRect& own = m_plan.own;
  for (size_t i = 0; i < m_plan.sends.size(); ++i) {
    const Block& b = m_plan.sends[i];
    const void* src = b.peer == m_me ? self_receive(b.shift).grad.raw() : m_sent[i].grad.raw();
    copy_rect(s, dx, own.rows(), own.cols(), b.cells.y0, b.cells.x0, src, b.cells.rows(), b.cells.cols(), 0, 0,
              b.cells.rows(), b.cells.cols(), true);
  }
}

// Forward: this tile's cells out and the halos in; backward: the halos' gradients out to their
// owners and theirs of this tile's cells in. A tile's own wrap needs no message.
void TileHalos::exchange(Stream& s, bool backward) {
  const size_t esize = dtype_size(m_dtype);
  if (stages()) {
    const std::vector<Block>& out = backward ? m_plan.receives : m_plan.sends;
    const std::vector<Buffers>& bufs = backward ? m_received : m_sent;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].peer == m_me) continue;
      const Buffers& b = bufs[i];
      const auto bytes = static_cast<size_t>(count(out[i])) * esize;
      if (backward)
        m_backend.copy_bytes_to_host(s, b.host_grad.raw(), b.grad.raw(), bytes);
      else
        m_backend.copy_bytes_to_host(s, b.host_data.raw(), b.data.raw(), bytes);
    }
  }
  // The packed buffers must be complete before another thread reads them; an exchange of
  // device memory is ordered after them on the device instead.
  if (!m_on_device) m_backend.synchronize(s);
  // Host memory: the buffers themselves (a CPU) or their pinned copies (a device that
  // stages); device memory: the buffers.
  const bool direct = !stages();
  std::vector<TileComm::Message> sends, receives;
  for (size_t i = 0; i < m_plan.sends.size(); ++i) {
    const Block& b = m_plan.sends[i];
    if (b.peer == m_me) continue;
    const Buffers& x = m_sent[i];
    const auto bytes = static_cast<size_t>(count(b)) * esize;
    if (backward)
      receives.push_back({b.peer, tag_of(m_node, true, b.shift), (direct ? x.grad : x.host_grad).raw(), bytes});
    else
      sends.push_back({b.peer, tag_of(m_node, false, b.shift), (direct ? x.data : x.host_data).raw(), bytes});
  }
  for (size_t i = 0; i < m_plan.receives.size(); ++i) {
    const Block& b = m_plan.receives[i];
    if (b.peer == m_me) continue;
    const Buffers& x = m_received[i];
    const auto bytes = static_cast<size_t>(count(b)) * esize;
    if (backward)
      sends.push_back({b.peer, tag_of(m_node, true, b.shift), (direct ? x.grad : x.host_grad).raw(), bytes});
    else
      receives.push_back({b.peer, tag_of(m_node, false, b.shift), (direct ? x.data : x.host_data).raw(), bytes});
  }
  if (sends.empty() && receives.empty()) return;
  m_exchange = m_on_device ? m_comm->start_on(s, sends, receives) : m_comm->start(sends, receives);
}

void TileHalos::wait(Stream& s, bool backward) {
  if (!m_exchange) return;
  if (m_on_device) {  // the stream's later work (the unpacking) waits on the device
    m_exchange->order(s);
    m_exchange.reset();
    return;
  }
  m_exchange->wait();
  m_exchange.reset();
  if (!stages()) return;
  const size_t esize = dtype_size(m_dtype);
  const std::vector<Block>& in = backward ? m_plan.sends : m_plan.receives;
  const std::vector<Buffers>& bufs = backward ? m_sent : m_received;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].peer == m_me) continue;
    const Buffers& b = bufs[i];
    const auto bytes = static_cast<size_t>(count(in[i])) * esize;
    if (backward)
      m_backend.copy_bytes_from_host(s, b.grad.raw(), b.host_grad.raw(), bytes);
    else
      m_backend.copy_bytes_from_host(s, b.data.raw(), b.host_data.raw(), bytes);
  }
}

// ---- ConvTile ----

HaloAxis halo_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                   bool before, bool after) {
  HaloAxis a;
  a.in = in;
  a.out = out;
  a.kernel = kernel;
  a.stride = stride;
  a.pad = pad;
  a.dilation = dilation;
  if (before && pad > 0) {
    a.lo = pad;
    a.edge_lo = std::min(out, (pad + stride - 1) / stride);  // rows o with o * stride - pad < 0
  }
  const int64_t beyond = a.end_read(out) - in;  // rows past the tile the last output row reads
  if (after && beyond > 0) {
    a.hi = beyond;
    // The first output row whose window passes the tile's end.
    int64_t first = (in + pad - dilation * (kernel - 1) + stride - 1) / stride;
    first = std::clamp<int64_t>(first, 0, out);
    a.edge_hi = out - first;
  }
  return a;
}

ConvTile::Geometry ConvTile::geometry(const ConvDesc& d, const TileContext& t) {
  const TensorTile& x = t.inputs.at(0);
  const TensorTile& yt = t.output;
  const int64_t height = x.height, width = x.width;
  const bool wrap = x.wrap_columns;
  Geometry g;
  // What tile (r, c) reads: its output's windows, within the sample's rows (zero padding at
  // the poles) and, unless they wrap, its columns.
  g.needed = [=](int64_t r, int64_t c) {
    const Span oy = yt.row_spans[static_cast<size_t>(r)], ox = yt.col_spans[static_cast<size_t>(c)];
    return within_tensor({oy.begin * d.stride_h - d.pad_h, (oy.end - 1) * d.stride_h - d.pad_h + d.dil_h * (d.r - 1) + 1,
                          ox.begin * d.stride_w - d.pad_w, (ox.end - 1) * d.stride_w - d.pad_w + d.dil_w * (d.s - 1) + 1},
                         height, width, wrap);
  };
  g.halos = TileHalos::plan(x, g.needed);
  const CellRect& own = g.halos.own;
  const CellRect& need = g.halos.need;
  const Shape y = d.output();
  g.rows = halo_axis(d.h, y.h(), d.r, d.stride_h, d.pad_h, d.dil_h, need.y0 < own.y0, need.y1 > own.y1);
  g.cols = halo_axis(d.w, y.w(), d.s, d.stride_w, d.pad_w, d.dil_w, need.x0 < own.x0, need.x1 > own.x1);
  if (g.halos.receives.empty()) return g;  // the plan's own padding is exact: no edges

  // The edge strips: north and south across the whole width, then west and east between them.
  // A tile whose two edges meet (as thin as its halos) is one strip across.
  const int64_t oh = y.h(), ow = y.w();
  std::vector<CellRect> outs;
  int64_t mid0 = g.rows.edge_lo, mid1 = oh - g.rows.edge_hi;
  if (mid0 >= mid1) {
    outs.push_back({0, oh, 0, ow});
    mid0 = mid1 = oh;
  } else {
    if (g.rows.edge_lo > 0) outs.push_back({0, g.rows.edge_lo, 0, ow});
    if (g.rows.edge_hi > 0) outs.push_back({oh - g.rows.edge_hi, oh, 0, ow});
  }
  if (mid1 > mid0) {
    if (g.cols.edge_lo + g.cols.edge_hi >= ow) {
      if (g.cols.edge_lo + g.cols.edge_hi > 0) outs.push_back({mid0, mid1, 0, ow});
    } else {
      if (g.cols.edge_lo > 0) outs.push_back({mid0, mid1, 0, g.cols.edge_lo});
      if (g.cols.edge_hi > 0) outs.push_back({mid0, mid1, ow - g.cols.edge_hi, ow});
    }
  }
  for (const CellRect& o : outs)
    g.strips.push_back({o, CellRect{g.rows.first_read(o.y0), g.rows.end_read(o.y1), g.cols.first_read(o.x0),
                                    g.cols.end_read(o.x1)}});
  return g;
}

bool ConvTile::needs_halos(const ConvDesc& d, const TileContext& t) {
  const Geometry g = geometry(d, t);
  return !g.halos.receives.empty() || !g.halos.sends.empty();
}

std::string ConvTile::check(const ConvDesc& d, const TileContext& t) {
  if (d.transposed) return "a transposed convolution runs on tiles only with kernel = stride and no padding";
  const Shape y = d.output();
  if (y.h() != t.output.rows().size() || y.w() != t.output.cols().size())
    return "its output on this tile, " + str(y.h()) + "x" + str(y.w()) + ", is not the tile of its output, " +
           str(t.output.rows().size()) + "x" + str(t.output.cols().size()) +
           " (a stride or padding that does not keep tile edges)";
  try {
    (void)geometry(d, t);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

size_t ConvTile::strips(const ConvDesc& d, const TileContext& t) {
  const Geometry g = geometry(d, t);
  return g.halos.receives.empty() && g.halos.sends.empty() ? 0 : g.strips.size();
}

int64_t ConvTile::received_values(const ConvDesc& d, const TileContext& t) {
  const TensorTile& x = t.inputs.at(0);
  return d.n * d.c * TileHalos::received_cells(geometry(d, t).halos, x.row * x.tile_cols() + x.col);
}

size_t ConvTile::buffer_bytes(const ConvDesc& d, const TileContext& t) {
  const Geometry g = geometry(d, t);
  if (g.halos.receives.empty() && g.halos.sends.empty()) return 0;
  int64_t outer_in = 1, inner = 1;
  outer_inner(d.layout, d.n, d.c, outer_in, inner);
  // As the constructor allocates: at least one element each.
  const auto n = [](int64_t elements) { return static_cast<size_t>(std::max<int64_t>(elements, 1)); };
  size_t elements = static_cast<size_t>(TileHalos::buffer_elements(g.halos, outer_in, inner));
  for (const auto& [out, in] : g.strips) {
    const int64_t win = outer_in * in.rows() * in.cols() * inner;
    const int64_t yo = d.n * d.k * out.rows() * out.cols();
    elements += 3 * n(win) + 2 * n(yo);
  }
  const size_t f32 = (static_cast<size_t>(d.weight().numel()) + n(d.k)) * sizeof(float);  // dw, db
  return elements * dtype_size(d.dtype) + f32;
}

ConvTile::ConvTile(Backend& backend, const ConvDesc& d, const TileContext& t) : m_backend(backend), m_desc(d) {
  const Geometry g = geometry(d, t);
  int64_t outer_in = 1, inner = 1;
  outer_inner(d.layout, d.n, d.c, outer_in, inner);
  outer_inner(d.y_layout(), d.n, d.k, m_outer_out, m_inner_out);
  m_halos = std::make_unique<TileHalos>(backend, t.inputs.at(0), g.needed, t.comm, t.node, outer_in, inner, d.dtype);

  const auto buffer = [&](int64_t elements) {
    return backend.allocate(static_cast<size_t>(std::max<int64_t>(elements, 1)), d.dtype);
  };
  for (const auto& [out, in] : g.strips) {
    Strip st;
    st.out = out;
    st.in = in;
    ConvDesc sd = d;
    sd.h = st.in.rows();
    sd.w = st.in.cols();
    sd.pad_h = sd.pad_w = 0;
    sd.relu = false;
    sd.fold_batch_norm = false;
    const Shape so = sd.output();
    SQUALL_CHECK(so.h() == out.rows() && so.w() == out.cols(), "conv tile: an edge strip's plan gives " + so.str() +
                                                                   " for " + str(out.rows()) + "x" + str(out.cols()));
    st.plan = backend.make_conv(sd);
    const int64_t win = outer_in * st.in.rows() * st.in.cols() * inner;
    st.window = buffer(win);
    st.masked = buffer(win);
    st.dwindow = buffer(win);
    st.y = buffer(so.numel());
    st.dy = buffer(so.numel());
    m_strips.push_back(std::move(st));
  }
  const Shape out = d.output();
  m_whole = m_strips.size() == 1 && m_strips[0].out.y0 == 0 && m_strips[0].out.x0 == 0 &&
            m_strips[0].out.y1 == out.h() && m_strips[0].out.x1 == out.w();
  m_dw = backend.allocate(static_cast<size_t>(d.weight().numel()));
  m_db = backend.allocate(static_cast<size_t>(std::max<int64_t>(d.k, 1)));
  // Every window starts at zero: the cells beyond the sample (its zero padding) are never
  // written again.
  auto stream = backend.create_stream();
  for (Strip& st : m_strips) {
    TileHalos::clear(backend, *stream, st.window);
    TileHalos::clear(backend, *stream, st.masked);
  }
}

ConvTile::~ConvTile() = default;

void ConvTile::start_forward(Stream& s, const void* x) { m_halos->start_forward(s, x); }

void ConvTile::finish_forward(Stream& s, const void* x, const float* w, const float* b, void* y) {
  m_halos->finish_forward(s);
  for (Strip& st : m_strips) {
    m_halos->gather(s, st.in, st.window.raw(), x, true);
    st.plan->forward(s, st.window.raw(), w, b, st.y.raw());
    m_backend.copy_block(s, m_desc.dtype, y, st.y.raw(), output_block(st.out, false), false);
  }
}

// The rectangle r of the layer's output (or its gradient) and a dense strip of r's size, in
// the output's layout: into the strip (`to_strip`) or from it.
BlockCopy ConvTile::output_block(const CellRect& r, bool to_strip) const {
  const Shape full = m_desc.output();
  BlockCopy c;
  c.outer = m_outer_out;
  c.rows = r.rows();
  c.count = r.cols() * m_inner_out;
  const int64_t tensor_offset = (r.y0 * full.w() + r.x0) * m_inner_out;
  const int64_t tensor_outer = full.h() * full.w() * m_inner_out, tensor_row = full.w() * m_inner_out;
  const int64_t strip_outer = r.rows() * r.cols() * m_inner_out, strip_row = r.cols() * m_inner_out;
  c.src_offset = to_strip ? tensor_offset : 0;
  c.src_outer = to_strip ? tensor_outer : strip_outer;
  c.src_row = to_strip ? tensor_row : strip_row;
  c.dst_offset = to_strip ? 0 : tensor_offset;
  c.dst_outer = to_strip ? strip_outer : tensor_outer;
  c.dst_row = to_strip ? strip_row : tensor_row;
  return c;
}

void ConvTile::start_backward(Stream& s, const void* dy, const float* w, bool want_dx) {
  m_want_dx = want_dx;
  if (want_dx) m_halos->zero_gradients(s);
  for (Strip& st : m_strips) {
    m_backend.copy_block(s, m_desc.dtype, st.dy.raw(), dy, output_block(st.out, true), false);
    if (!want_dx) continue;
    st.plan->backward_data(s, st.dy.raw(), w, st.dwindow.raw());
    m_halos->add_gradient(s, st.in, st.dwindow.raw());  // the window's gradient in each halo goes to its owner
  }
  if (want_dx) m_halos->start_backward(s);
}

void ConvTile::add_halo_weight_gradients(Stream& s, float* dw) {
  const auto count = static_cast<size_t>(m_desc.weight().numel());
  for (Strip& st : m_strips) {
    // The halos' share: the strip's window with this tile's own cells zero (they were counted
    // by the plan's backward over the whole tile).
    m_halos->gather(s, st.in, st.masked.raw(), nullptr, false);
    st.plan->backward_weights(s, st.masked.raw(), st.dy.raw(), m_dw.data(), m_desc.bias ? m_db.data() : nullptr);
    m_backend.axpy(s, 1.0f, m_dw.data(), dw, count);
  }
}

void ConvTile::finish_backward(Stream& s, void* dx) {
  if (m_want_dx) m_halos->finish_backward(s, dx);
}

void ConvTile::forward_whole(Stream& s, const void* x, const float* w, const float* b, void* y) {
  Strip& st = m_strips.front();
  m_halos->start_forward(s, x);
  m_halos->finish_forward(s);
  m_halos->gather(s, st.in, st.window.raw(), x, true);
  st.plan->forward(s, st.window.raw(), w, b, y);  // the strip's output is the whole output
}

// The window still holds what forward gathered: nothing writes it between the two passes.
void ConvTile::backward_whole(Stream& s, const void* dy, const float* w, float* dw, float* db, void* dx) {
  Strip& st = m_strips.front();
  m_want_dx = dx != nullptr;
  if (m_want_dx) {
    m_halos->zero_gradients(s);
    st.plan->backward_data(s, dy, w, st.dwindow.raw());
    m_halos->add_gradient(s, st.in, st.dwindow.raw());
    m_halos->start_backward(s);  // travels while the weight gradients are computed
  }
  st.plan->backward_weights(s, st.window.raw(), dy, dw, db);
  if (!m_want_dx) return;
  m_halos->scatter_own(s, st.in, st.dwindow.raw(), dx);
  m_halos->finish_backward(s, dx);
}

}  // namespace squall::nn
