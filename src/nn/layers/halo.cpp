// A convolution on a tile of a split sample: its halos and edge strips (src/nn/layers/halo.hpp).
#include "src/nn/layers/halo.hpp"

#include <algorithm>
#include <vector>

#include "src/core/error.hpp"

namespace squall::nn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A 4-D tensor of layout l as [outer][h][w][inner].
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

// The tag of a message: the node, the pass, and the side it travels to, seen from its sender.
int64_t tag_of(int node, bool backward, Side towards) {
  return (static_cast<int64_t>(node) * 2 + (backward ? 1 : 0)) * k_sides + static_cast<int64_t>(towards);
}

}  // namespace

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

// Whether this tile exchanges anything: its own halos, or the rows its neighbours' halos take
// from it (a tile with a neighbour below and a kernel that reaches only upward still sends).
bool ConvTile::needs_halos(const ConvDesc& d, const TileContext& t) {
  const TensorTile& x = t.inputs.at(0);
  const Shape y = d.output();
  const HaloAxis rows = halo_axis(d.h, y.h(), d.r, d.stride_h, d.pad_h, d.dil_h, true, true);
  const HaloAxis cols = halo_axis(d.w, y.w(), d.s, d.stride_w, d.pad_w, d.dil_w, true, true);
  const bool across_rows = x.has(Side::north) || x.has(Side::south);
  const bool across_cols = x.has(Side::west) || x.has(Side::east);
  return (across_rows && rows.lo + rows.hi > 0) || (across_cols && cols.lo + cols.hi > 0);
}

std::string ConvTile::check(const ConvDesc& d, const TileContext& t) {
  if (d.transposed) return "a transposed convolution runs on tiles only with kernel = stride and no padding";
  const TensorTile& x = t.inputs.at(0);
  const Shape y = d.output();
  if (y.h() != t.output.rows().size() || y.w() != t.output.cols().size())
    return "its output on this tile, " + str(y.h()) + "x" + str(y.w()) + ", is not the tile of its output, " +
           str(t.output.rows().size()) + "x" + str(t.output.cols().size()) +
           " (a stride or padding that does not keep tile edges)";
  const HaloAxis rows = halo_axis(d.h, y.h(), d.r, d.stride_h, d.pad_h, d.dil_h, x.has(Side::north), x.has(Side::south));
  const HaloAxis cols = halo_axis(d.w, y.w(), d.s, d.stride_w, d.pad_w, d.dil_w, x.has(Side::west), x.has(Side::east));
  const auto thin = [&](const HaloAxis& a, const char* what, Side before, Side after, bool by_rows) -> std::string {
    const int64_t n_before = by_rows ? x.neighbour_rows(before) : x.neighbour_cols(before);
    const int64_t n_after = by_rows ? x.neighbour_rows(after) : x.neighbour_cols(after);
    if (a.lo > 0 && (a.lo > n_before || a.lo > a.in))
      return std::string("its halo of ") + str(a.lo) + " " + what + "s is wider than a neighbouring tile (" +
             str(std::min(n_before, a.in)) + " " + what + "s)";
    if (a.hi > 0 && (a.hi > n_after || a.hi > a.in))
      return std::string("its halo of ") + str(a.hi) + " " + what + "s is wider than a neighbouring tile (" +
             str(std::min(n_after, a.in)) + " " + what + "s)";
    return "";
  };
  std::string why = thin(rows, "row", Side::north, Side::south, true);
  if (why.empty()) why = thin(cols, "column", Side::west, Side::east, false);
  return why;
}

ConvTile::Geometry ConvTile::geometry(const ConvDesc& d, const TileContext& t) {
  const TensorTile& x = t.inputs.at(0);
  const Shape y = d.output();
  Geometry g;
  g.rows = halo_axis(d.h, y.h(), d.r, d.stride_h, d.pad_h, d.dil_h, x.has(Side::north), x.has(Side::south));
  g.cols = halo_axis(d.w, y.w(), d.s, d.stride_w, d.pad_w, d.dil_w, x.has(Side::west), x.has(Side::east));
  // Halo widths whether or not this tile has a neighbour there (the neighbours' halos).
  const HaloAxis wide_rows = halo_axis(d.h, y.h(), d.r, d.stride_h, d.pad_h, d.dil_h, true, true);
  const HaloAxis wide_cols = halo_axis(d.w, y.w(), d.s, d.stride_w, d.pad_w, d.dil_w, true, true);
  const int64_t lo_rows = wide_rows.lo, hi_rows = wide_rows.hi, lo_cols = wide_cols.lo, hi_cols = wide_cols.hi;
  // The sides with a neighbour whose cells this convolution reads, and what goes each way.
  for (int k = 0; k < k_sides; ++k) {
    const auto side = static_cast<Side>(k);
    if (!x.has(side)) continue;
    Neighbour n;
    n.side = side;
    n.recv = halo_rect(g.rows, g.cols, side);
    // What the neighbour at `side` reads of this tile: its halo on the opposite side, as wide
    // on every rank (tiles start on multiples of the stride): `lo_width` rows from this tile's
    // bottom for the neighbour below, `hi_width` from its top for the one above.
    const int dr = side_rows(side), dc = side_cols(side);
    n.send.y0 = dr > 0 ? g.rows.in - lo_rows : 0;
    n.send.y1 = dr < 0 ? hi_rows : g.rows.in;
    n.send.x0 = dc > 0 ? g.cols.in - lo_cols : 0;
    n.send.x1 = dc < 0 ? hi_cols : g.cols.in;
    if (n.recv.empty() && n.send.empty()) continue;
    g.sides.push_back(n);
  }

  // The edge strips: north and south across the whole width, then west and east between them.
  // A tile whose two edges meet (as thin as its halos) is one strip across.
  const int64_t oh = y.h(), ow = y.w();
  std::vector<Rect> outs;
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
  for (const Rect& o : outs)
    g.strips.push_back(
        {o, Rect{g.rows.first_read(o.y0), g.rows.end_read(o.y1), g.cols.first_read(o.x0), g.cols.end_read(o.x1)}});
  return g;
}

size_t ConvTile::strips(const ConvDesc& d, const TileContext& t) {
  return needs_halos(d, t) ? geometry(d, t).strips.size() : 0;
}

size_t ConvTile::buffer_bytes(const ConvDesc& d, const TileContext& t) {
  if (!needs_halos(d, t)) return 0;
  int64_t outer_in = 1, inner = 1;
  outer_inner(d.layout, d.n, d.c, outer_in, inner);
  const Geometry g = geometry(d, t);
  // As the constructor allocates: at least one element each.
  const auto n = [](int64_t elements) { return static_cast<size_t>(std::max<int64_t>(elements, 1)); };
  size_t elements = 0, largest = 1;
  for (const Neighbour& s : g.sides) {
    const int64_t recv = s.recv.empty() ? 0 : outer_in * s.recv.rows() * s.recv.cols() * inner;
    const int64_t send = s.send.empty() ? 0 : outer_in * s.send.rows() * s.send.cols() * inner;
    elements += 2 * n(recv) + 2 * n(send);
    largest = std::max(largest, static_cast<size_t>(recv));
  }
  for (const auto& [out, in] : g.strips) {
    const int64_t win = outer_in * in.rows() * in.cols() * inner;
    const int64_t yo = d.n * d.k * out.rows() * out.cols();
    elements += 3 * n(win) + 2 * n(yo);
    largest = std::max(largest, static_cast<size_t>(win));
  }
  elements += largest;  // the zeros
  const size_t f32 = (static_cast<size_t>(d.weight().numel()) + n(d.k)) * sizeof(float);  // dw, db
  return elements * dtype_size(d.dtype) + f32;
}

ConvTile::ConvTile(Backend& backend, const ConvDesc& d, const TileContext& t)
    : m_backend(backend), m_desc(d), m_comm(t.comm), m_node(t.node) {
  const Geometry g = geometry(d, t);
  m_rows = g.rows;
  m_cols = g.cols;
  SQUALL_CHECK(m_comm != nullptr, "conv tile: no group communicator");
  m_host = backend.capabilities().host_accessible;
  outer_inner(d.layout, d.n, d.c, m_outer_in, m_inner);
  outer_inner(d.y_layout(), d.n, d.k, m_outer_out, m_inner_out);

  const size_t esize = dtype_size(d.dtype);
  const auto buffer = [&](int64_t elements) {
    return backend.allocate(static_cast<size_t>(std::max<int64_t>(elements, 1)), d.dtype);
  };
  const TensorTile& x = t.inputs.at(0);
  for (const Neighbour& n : g.sides) {
    Halo h;
    h.side = n.side;
    h.peer = t.place->rank_at(x.row + side_rows(n.side), x.col + side_cols(n.side));
    h.recv = n.recv;
    h.send = n.send;
    h.recv_count = h.recv.empty() ? 0 : m_outer_in * h.recv.rows() * h.recv.cols() * m_inner;
    h.send_count = h.send.empty() ? 0 : m_outer_in * h.send.rows() * h.send.cols() * m_inner;
    const int64_t recv_n = h.recv_count, send_n = h.send_count;
    h.recv_buf = buffer(recv_n);
    h.send_buf = buffer(send_n);
    h.grad_buf = buffer(recv_n);
    h.grad_back = buffer(send_n);
    if (!m_host) {
      h.host_recv = backend.allocate_host(static_cast<size_t>(recv_n), d.dtype);
      h.host_send = backend.allocate_host(static_cast<size_t>(send_n), d.dtype);
      h.host_grad = backend.allocate_host(static_cast<size_t>(recv_n), d.dtype);
      h.host_grad_back = backend.allocate_host(static_cast<size_t>(send_n), d.dtype);
    }
    m_halos.push_back(std::move(h));
  }

  size_t largest = 0;
  for (const auto& [out, in] : g.strips) {
    const Rect& o = out;
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
    SQUALL_CHECK(so.h() == o.rows() && so.w() == o.cols(), "conv tile: an edge strip's plan gives " + so.str() +
                                                                  " for " + str(o.rows()) + "x" + str(o.cols()));
    st.plan = backend.make_conv(sd);
    const int64_t win = m_outer_in * st.in.rows() * st.in.cols() * m_inner;
    const int64_t yo = so.numel();
    st.window = buffer(win);
    st.masked = buffer(win);
    st.dwindow = buffer(win);
    st.y = buffer(yo);
    st.dy = buffer(yo);
    largest = std::max(largest, static_cast<size_t>(win));
    m_strips.push_back(std::move(st));
  }
  for (const Halo& h : m_halos) largest = std::max(largest, static_cast<size_t>(h.recv_count));
  largest = std::max<size_t>(largest, 1);
  m_zeros = buffer(static_cast<int64_t>(largest));
  m_dw = backend.allocate(static_cast<size_t>(d.weight().numel()));
  m_db = backend.allocate(static_cast<size_t>(std::max<int64_t>(d.k, 1)));
  // Every buffer starts at zero: the window cells beyond the sample are never written again.
  auto stream = backend.create_stream();
  std::vector<char> zeros(largest * esize, 0);
  const auto clear = [&](const Buffer& b) {
    if (b) backend.copy_bytes_from_host(*stream, b.raw(), zeros.data(), b.bytes());
  };
  clear(m_zeros);
  for (Strip& st : m_strips) {
    clear(st.window);
    clear(st.masked);
  }
  backend.synchronize(*stream);
}

ConvTile::~ConvTile() {
  // An exchange still in flight (an exception between start and finish) completes before its
  // buffers go.
  if (m_exchange) {
    try {
      m_exchange->wait();
    } catch (...) {
    }
  }
}

ConvTile::Rect ConvTile::halo_rect(const HaloAxis& rows, const HaloAxis& cols, Side side) {
  const int dr = side_rows(side), dc = side_cols(side);
  Rect r;
  r.y0 = dr < 0 ? -rows.lo : dr > 0 ? rows.in : 0;
  r.y1 = dr < 0 ? 0 : dr > 0 ? rows.in + rows.hi : rows.in;
  r.x0 = dc < 0 ? -cols.lo : dc > 0 ? cols.in : 0;
  r.x1 = dc < 0 ? 0 : dc > 0 ? cols.in + cols.hi : cols.in;
  return r;
}

void ConvTile::copy_rect(Stream& s, void* dst, int64_t dst_h, int64_t dst_w, int64_t dst_y, int64_t dst_x,
                         const void* src, int64_t src_h, int64_t src_w, int64_t src_y, int64_t src_x, int64_t rows,
                         int64_t cols, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  BlockCopy b;
  b.outer = m_outer_in;
  b.rows = rows;
  b.count = cols * m_inner;
  b.src_offset = (src_y * src_w + src_x) * m_inner;
  b.src_outer = src_h * src_w * m_inner;
  b.src_row = src_w * m_inner;
  b.dst_offset = (dst_y * dst_w + dst_x) * m_inner;
  b.dst_outer = dst_h * dst_w * m_inner;
  b.dst_row = dst_w * m_inner;
  m_backend.copy_block(s, m_desc.dtype, dst, src, b, accumulate);
}

void ConvTile::gather(Stream& s, const Rect& r, void* dst, const void* x, bool own) {
  const auto put = [&](const Rect& region, const void* src) {
    const Rect c{std::max(r.y0, region.y0), std::min(r.y1, region.y1), std::max(r.x0, region.x0),
                 std::min(r.x1, region.x1)};
    if (c.empty()) return;
    copy_rect(s, dst, r.rows(), r.cols(), c.y0 - r.y0, c.x0 - r.x0, src, region.rows(), region.cols(),
              c.y0 - region.y0, c.x0 - region.x0, c.rows(), c.cols(), false);
  };
  if (own) put(own_rect(), x);
  for (const Halo& h : m_halos)
    if (!h.recv.empty()) put(h.recv, h.recv_buf.raw());
}

void ConvTile::zero(Stream& s, const Buffer& b) {
  m_backend.copy_bytes(s, b.raw(), m_zeros.raw(), b.bytes());
}

// The messages of one exchange: forward, this tile's rows out and the halos in; backward, the
// halos' gradients out to their owners and theirs of this tile's rows in.
void ConvTile::exchange(Stream& s, bool backward) {
  if (!m_host) {
    for (Halo& h : m_halos) {
      if (backward)
        m_backend.copy_bytes_to_host(s, h.host_grad.raw(), h.grad_buf.raw(), h.grad_buf.bytes());
      else
        m_backend.copy_bytes_to_host(s, h.host_send.raw(), h.send_buf.raw(), h.send_buf.bytes());
    }
  }
  // The packed buffers must be complete before another thread reads them.
  m_backend.synchronize(s);
  std::vector<TileComm::Message> sends, receives;
  for (Halo& h : m_halos) {
    const Side towards = h.side, from = opposite(h.side);
    const size_t esize = dtype_size(m_desc.dtype);
    const auto recv_bytes = static_cast<size_t>(h.recv_count) * esize;
    const auto send_bytes = static_cast<size_t>(h.send_count) * esize;
    if (backward) {  // the halo's gradient back to its owner; this tile's rows' from theirs
      if (recv_bytes > 0)
        sends.push_back({h.peer, tag_of(m_node, true, towards), (m_host ? h.grad_buf : h.host_grad).raw(), recv_bytes});
      if (send_bytes > 0)
        receives.push_back(
            {h.peer, tag_of(m_node, true, from), (m_host ? h.grad_back : h.host_grad_back).raw(), send_bytes});
    } else {
      if (send_bytes > 0)
        sends.push_back({h.peer, tag_of(m_node, false, towards), (m_host ? h.send_buf : h.host_send).raw(), send_bytes});
      if (recv_bytes > 0)
        receives.push_back({h.peer, tag_of(m_node, false, from), (m_host ? h.recv_buf : h.host_recv).raw(), recv_bytes});
    }
  }
  m_exchange = m_comm->start(sends, receives);
}

void ConvTile::wait(Stream& s, bool backward) {
  if (!m_exchange) return;
  m_exchange->wait();
  m_exchange.reset();
  if (m_host) return;
  for (Halo& h : m_halos) {
    if (backward)
      m_backend.copy_bytes_from_host(s, h.grad_back.raw(), h.host_grad_back.raw(), h.grad_back.bytes());
    else
      m_backend.copy_bytes_from_host(s, h.recv_buf.raw(), h.host_recv.raw(), h.recv_buf.bytes());
  }
}

void ConvTile::start_forward(Stream& s, const void* x) {
  for (Halo& h : m_halos)
    copy_rect(s, h.send_buf.raw(), h.send.rows(), h.send.cols(), 0, 0, x, m_rows.in, m_cols.in, h.send.y0, h.send.x0,
              h.send.rows(), h.send.cols(), false);
  exchange(s, false);
}

void ConvTile::finish_forward(Stream& s, const void* x, const float* w, const float* b, void* y) {
  wait(s, false);
  for (Strip& st : m_strips) {
    gather(s, st.in, st.window.raw(), x, true);
    st.plan->forward(s, st.window.raw(), w, b, st.y.raw());
    m_backend.copy_block(s, m_desc.dtype, y, st.y.raw(), output_block(st.out, false), false);
  }
}

// The rectangle r of the layer's output (or its gradient) and a dense strip of r's size, in
// the output's layout: into the strip (`to_strip`) or from it.
BlockCopy ConvTile::output_block(const Rect& r, bool to_strip) const {
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
  m_send_grads = want_dx;
  for (Halo& h : m_halos)
    if (h.recv_count > 0) zero(s, h.grad_buf);
  for (Strip& st : m_strips) {
    m_backend.copy_block(s, m_desc.dtype, st.dy.raw(), dy, output_block(st.out, true), false);
    if (!want_dx) continue;
    st.plan->backward_data(s, st.dy.raw(), w, st.dwindow.raw());
    // The window's gradient in each halo goes to that halo's owner.
    for (Halo& h : m_halos) {
      if (h.recv.empty()) continue;
      const Rect c2{std::max(st.in.y0, h.recv.y0), std::min(st.in.y1, h.recv.y1), std::max(st.in.x0, h.recv.x0),
                    std::min(st.in.x1, h.recv.x1)};
      if (c2.empty()) continue;
      copy_rect(s, h.grad_buf.raw(), h.recv.rows(), h.recv.cols(), c2.y0 - h.recv.y0, c2.x0 - h.recv.x0,
                st.dwindow.raw(), st.in.rows(), st.in.cols(), c2.y0 - st.in.y0, c2.x0 - st.in.x0, c2.rows(),
                c2.cols(), true);
    }
  }
  if (want_dx) exchange(s, true);
}

void ConvTile::add_halo_weight_gradients(Stream& s, float* dw) {
  const auto count = static_cast<size_t>(m_desc.weight().numel());
  for (Strip& st : m_strips) {
    // The halos' share: the strip's window with this tile's own cells zero (they were counted
    // by the plan's backward over the whole tile).
    gather(s, st.in, st.masked.raw(), nullptr, false);
    st.plan->backward_weights(s, st.masked.raw(), st.dy.raw(), m_dw.data(), m_desc.bias ? m_db.data() : nullptr);
    m_backend.axpy(s, 1.0f, m_dw.data(), dw, count);
  }
}

void ConvTile::finish_backward(Stream& s, void* dx) {
  if (!m_send_grads) return;
  wait(s, true);
  for (Halo& h : m_halos)
    copy_rect(s, dx, m_rows.in, m_cols.in, h.send.y0, h.send.x0, h.grad_back.raw(), h.send.rows(), h.send.cols(), 0,
              0, h.send.rows(), h.send.cols(), true);
}

}  // namespace squall::nn
