// Layers that combine or reshape tensors without parameters: add, channel concat, flatten,
// bilinear resize.
#include <algorithm>
#include <memory>
#include <optional>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"
#include "src/nn/layers/halo.hpp"

namespace squall::nn {
namespace {

// Parameter-free layers only need the backend.
class StatelessLayer : public Layer {
 public:
  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_backend = &backend;
  }

 protected:
  Backend* m_backend = nullptr;
};

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].str();
  return s;
}

class Add final : public StatelessLayer {
 public:
  std::string type() const override { return "add"; }
  std::string set_tile(const TileContext&) override { return ""; }  // pixel by pixel
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return static_cast<double>(output.numel());
  }
  Shape setup(const std::vector<Shape>& inputs) override {
    if (inputs.size() != 2 || !(inputs[0] == inputs[1]) || inputs[0].numel() <= 0)
      throw Error("add: expects 2 non-empty inputs of the same shape, got " + shapes_str(inputs));
    return inputs[0];
  }
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    m_backend->add(stream, m_dtype, in[0].data, in[1].data, out.data, static_cast<size_t>(out.numel()));
  }
  // An input whose gradient the graph made dout itself comes with a null din: no copy.
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    for (const Tensor& d : din)
      if (d.data != nullptr) m_backend->copy_bytes(stream, d.data, dout.data, dout.bytes());
  }
  bool passes_gradient_through() const override { return true; }
};

// Concatenates over dimension 1 (channels of [n,c,h,w], features of [n,f]): per sample (NCHW,
// [n,f]) or per pixel (NHWC), input i fills a contiguous run of the output row, so each input
// is one strided copy.
class Concat final : public StatelessLayer {
 public:
  std::string type() const override { return "concat"; }
  // Over channels: the inputs' tiles are the same pixels.
  std::string set_tile(const TileContext&) override { return ""; }
  Shape setup(const std::vector<Shape>& inputs) override {
    if (inputs.size() < 2) throw Error("concat: expects at least 2 inputs, got " + shapes_str(inputs));
    const Shape& first = inputs[0];
    int64_t channels = 0;
    m_row_counts.clear();
    for (const Shape& s : inputs) {
      const bool same_other_dims = s.rank == first.rank && s.n() == first.n() && s.h() == first.h() &&
                                   s.w() == first.w();
      if ((s.rank != 2 && s.rank != 4) || !same_other_dims || s.numel() <= 0)
        throw Error("concat: inputs must be non-empty, of rank 2 or 4, and agree in every dimension but 1, got " +
                    shapes_str(inputs));
      channels += s.c();
      m_channels.push_back(s.c());
    }
    Shape out = first;
    out.dims[1] = channels;
    m_out = out;
    return out;
  }
  void build(Backend& backend, const std::vector<Tensor>& p, const std::vector<Tensor>& g,
             const std::vector<Tensor>& st) override {
    StatelessLayer::build(backend, p, g, st);
    // A row: one sample (NCHW, [n,f]) or one pixel (NHWC) of the output.
    const bool per_pixel = m_layout == Layout::nhwc && m_out.rank == 4;
    const int64_t pixels = m_out.h() * m_out.w();
    m_rows = per_pixel ? m_out.n() * pixels : m_out.n();
    m_out_row = per_pixel ? m_out.c() : m_out.per_sample();
    m_row_counts.clear();
    for (const int64_t c : m_channels) m_row_counts.push_back(per_pixel ? c : c * pixels);
  }
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    int64_t offset = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t count = m_row_counts[i];
      m_backend->copy_strided(stream, m_dtype, out.data, m_out_row, offset, in[i].data, count, 0, m_rows, count);
      offset += count;
    }
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    int64_t offset = 0;
    for (size_t i = 0; i < din.size(); ++i) {
      const int64_t count = m_row_counts[i];
      if (din[i].data != nullptr)
        m_backend->copy_strided(stream, m_dtype, din[i].data, count, 0, dout.data, m_out_row, offset, m_rows, count);
      offset += count;
    }
  }

 private:
  std::vector<int64_t> m_channels;    // per input
  Shape m_out;
  std::vector<int64_t> m_row_counts;  // per input: elements per row
  int64_t m_out_row = 0, m_rows = 0;
};

// A reshape; copies because the graph gives each node its own output buffer. The features
// are in NCHW order whatever the layout (an NHWC or blocked input is permuted), so that a model's
// weights mean the same in either.
class Flatten final : public StatelessLayer {
 public:
  std::string type() const override { return "flatten"; }
  Shape setup(const std::vector<Shape>& inputs) override {
    if (inputs.size() != 1 || inputs[0].rank < 2 || inputs[0].numel() <= 0)
      throw Error("flatten: expects 1 non-empty input of rank >= 2, got " + shapes_str(inputs));
    m_x = inputs[0];
    return Shape(inputs[0].n(), inputs[0].per_sample());
  }
  bool mixes_layouts() const override { return true; }  // the output is 2-D
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    if (permutes())
      m_backend->permute_layout(stream, m_dtype, in[0].data, input_layout(0), out.data, Layout::nchw, m_x.n(),
                                m_x.c(), m_x.h(), m_x.w());
    else
      m_backend->copy_bytes(stream, out.data, in[0].data, out.bytes());
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor& out, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    if (permutes())
      m_backend->permute_layout(stream, m_dtype, dout.data, Layout::nchw, din[0].data, input_layout(0), m_x.n(),
                                m_x.c(), m_x.h(), m_x.w());
    else
      m_backend->copy_bytes(stream, din[0].data, dout.data, dout.bytes());
  }

 private:
  bool permutes() const { return input_layout(0) != Layout::nchw && m_x.rank == 4; }
  Shape m_x;
};

// Bilinear resize, as PyTorch's with align_corners = false. On a tile (a split sample, or
// wrapped columns): the output's tile reads the input's tile and one row or column beyond each
// edge where the output is larger, which come from the neighbours (TileHalos). The window of
// input cells it reads is resized whole, as if it were the image: with an integer scale the
// window's output cells fall where the sample's do, and those of the tile are copied out.
// Backward resizes the tile's gradient back over the window (zero elsewhere) and sends the
// halo's share to its owners. An input of no pixels (whole on every rank: DeepLab's pooled
// features) is broadcast over the tile, and its gradient is the tile's share.
class UpsampleBilinear final : public StatelessLayer {
 public:
  UpsampleBilinear(int64_t out_h, int64_t out_w) : m_oh(out_h), m_ow(out_w) {
    if (out_h <= 0 || out_w <= 0)
      throw Error("upsample_bilinear: output size must be positive, got " + std::to_string(out_h) + "x" +
                  std::to_string(out_w));
  }
  std::string type() const override { return "upsample_bilinear"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.out_h = m_oh;
    a.out_w = m_ow;
    return a;
  }
  // Four weighted neighbours per output element: 4 multiplies and 3 additions.
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return 7.0 * static_cast<double>(output.numel());
  }
  void set_tile_output(const TensorTile* output) override {
    m_tile_h = output != nullptr && output->image ? output->rows().size() : 0;
    m_tile_w = output != nullptr && output->image ? output->cols().size() : 0;
    if (output == nullptr) m_tile.reset();
  }
  Shape setup(const std::vector<Shape>& inputs) override {
    // A rank-2 input [n, c] is an image of 1x1 pixels (a pooled feature, as in DeepLab's
    // image-pooling branch): its upsampling broadcasts each value over the output.
    if (inputs.size() != 1 || (inputs[0].rank != 4 && inputs[0].rank != 2) || inputs[0].numel() <= 0)
      throw Error("upsample_bilinear: expects 1 non-empty input [n,c,h,w] or [n,c], got " + shapes_str(inputs));
    const Shape x = inputs[0].rank == 4 ? inputs[0] : Shape(inputs[0].n(), inputs[0].c(), 1, 1);
    m_n = x.n();
    m_c = x.c();
    m_nc = x.n() * x.c();
    m_h = x.h();
    m_w = x.w();
    return Shape(x.n(), x.c(), m_tile_h > 0 ? m_tile_h : m_oh, m_tile_w > 0 ? m_tile_w : m_ow);
  }
  std::string set_tile(const TileContext& t) override {
    m_tile.reset();
    const TensorTile& x = t.inputs.at(0);
    if (!x.image) return "";  // a broadcast over the tile
    const TensorTile& y = t.output;
    if (y.height % x.height != 0 || y.width % x.width != 0)
      return "on tiles it resizes only by whole factors, not " + std::to_string(x.height) + "x" +
             std::to_string(x.width) + " to " + std::to_string(y.height) + "x" + std::to_string(y.width);
    const int64_t fy = y.height / x.height, fx = y.width / x.width;
    for (size_t i = 0; i < x.row_spans.size(); ++i)
      if (y.row_spans[i].begin != fy * x.row_spans[i].begin || y.row_spans[i].end != fy * x.row_spans[i].end)
        return "its output's tiles are not its input's scaled by " + std::to_string(fy);
    for (size_t i = 0; i < x.col_spans.size(); ++i)
      if (y.col_spans[i].begin != fx * x.col_spans[i].begin || y.col_spans[i].end != fx * x.col_spans[i].end)
        return "its output's tiles are not its input's scaled by " + std::to_string(fx);
    m_fy = fy;
    m_fx = fx;
    m_tile = t;
    return "";
  }
  int64_t halo_values() const override {
    if (!m_tile) return 0;
    const TensorTile& x = m_tile->inputs.at(0);
    return m_nc * TileHalos::received_cells(TileHalos::plan(x, needed()), x.row * x.tile_cols() + x.col);
  }
  // Output rows [f b, f e) read input rows b - 1 to e (within the sample) where f > 1.
  NeededCells needed() const {
    const TensorTile x = m_tile->inputs.at(0);
    const int64_t fy = m_fy, fx = m_fx, height = x.height, width = x.width;
    const bool wrap = x.wrap_columns;
    return [=](int64_t r, int64_t c) {
      const Span y = x.row_spans[static_cast<size_t>(r)], xs = x.col_spans[static_cast<size_t>(c)];
      const int64_t ry = fy > 1 ? 1 : 0, rx = fx > 1 ? 1 : 0;
      return within_tensor({y.begin - ry, y.end + ry, xs.begin - rx, xs.end + rx}, height, width, wrap);
    };
  }
  // NHWC or blocked: the resize runs on NCHW copies (an input of 1x1 pixels needs none),
  // permuted in from the input's layout and out to the output's.
  void build(Backend& backend, const std::vector<Tensor>& p, const std::vector<Tensor>& g,
             const std::vector<Tensor>& st) override {
    StatelessLayer::build(backend, p, g, st);
    m_in_nchw = m_out_nchw = m_window = m_window_nchw = m_big = m_big_grad = Buffer{};
    m_halos.reset();
    const int64_t oh = m_tile_h > 0 ? m_tile_h : m_oh, ow = m_tile_w > 0 ? m_tile_w : m_ow;
    if (m_layout != Layout::nchw) m_out_nchw = backend.allocate(static_cast<size_t>(m_nc * oh * ow), m_dtype);
    if (m_tile) {
      int64_t outer = 1, inner = 1;
      outer_inner(input_layout(0), m_n, m_c, outer, inner);
      const TensorTile& x = m_tile->inputs.at(0);
      m_halos = std::make_unique<TileHalos>(backend, x, needed(), m_tile->comm, m_tile->node, outer, inner, m_dtype);
      m_need = m_halos->plan().need;
      const int64_t wh = m_need.rows(), ww = m_need.cols();
      m_window = backend.allocate(static_cast<size_t>(m_nc * wh * ww), m_dtype);
      if (input_layout(0) != Layout::nchw) m_window_nchw = backend.allocate(static_cast<size_t>(m_nc * wh * ww), m_dtype);
      m_big = backend.allocate(static_cast<size_t>(m_nc * wh * m_fy * ww * m_fx), m_dtype);
      m_big_grad = backend.allocate(static_cast<size_t>(m_nc * wh * m_fy * ww * m_fx), m_dtype);
      auto stream = backend.create_stream();
      TileHalos::clear(backend, *stream, m_big_grad);  // the cells beyond the tile stay zero
      return;
    }
    if (input_layout(0) != Layout::nchw && m_h * m_w > 1)
      m_in_nchw = backend.allocate(static_cast<size_t>(m_nc * m_h * m_w), m_dtype);
  }
  bool mixes_layouts() const override { return true; }
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    const int64_t oh = out.shape.h(), ow = out.shape.w();
    void* y = m_out_nchw ? m_out_nchw.raw() : out.data;
    if (m_halos) {
      m_halos->start_forward(stream, in[0].data);
      m_halos->finish_forward(stream);
      m_halos->gather(stream, m_need, m_window.raw(), in[0].data, true);
      const void* w = m_window.raw();
      if (m_window_nchw) {
        m_backend->permute_layout(stream, m_dtype, w, input_layout(0), m_window_nchw.raw(), Layout::nchw, m_n, m_c,
                                  m_need.rows(), m_need.cols());
        w = m_window_nchw.raw();
      }
      const int64_t bh = m_need.rows() * m_fy, bw = m_need.cols() * m_fx;
      m_backend->bilinear_forward(stream, m_dtype, w, m_big.raw(), m_nc, m_need.rows(), m_need.cols(), bh, bw);
      m_backend->copy_block(stream, m_dtype, y, m_big.raw(), tile_block(oh, ow, false), false);
    } else {
      const void* x = in[0].data;
      if (m_in_nchw) {
        m_backend->permute_layout(stream, m_dtype, x, input_layout(0), m_in_nchw.raw(), Layout::nchw, m_n, m_c, m_h,
                                  m_w);
        x = m_in_nchw.raw();
      }
      m_backend->bilinear_forward(stream, m_dtype, x, y, m_nc, m_h, m_w, oh, ow);
    }
    if (m_out_nchw)
      m_backend->permute_layout(stream, m_dtype, y, Layout::nchw, out.data, m_layout, m_n, m_c, oh, ow);
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor& out, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    const int64_t oh = out.shape.h(), ow = out.shape.w();
    const void* dy = dout.data;
    if (m_out_nchw) {
      m_backend->permute_layout(stream, m_dtype, dy, m_layout, m_out_nchw.raw(), Layout::nchw, m_n, m_c, oh, ow);
      dy = m_out_nchw.raw();
    }
    if (m_halos) {
      m_backend->copy_block(stream, m_dtype, m_big_grad.raw(), dy, tile_block(oh, ow, true), false);
      const int64_t bh = m_need.rows() * m_fy, bw = m_need.cols() * m_fx;
      void* dw = m_window_nchw ? m_window_nchw.raw() : m_window.raw();
      m_backend->bilinear_backward(stream, m_dtype, m_big_grad.raw(), dw, m_nc, m_need.rows(), m_need.cols(), bh, bw);
      if (m_window_nchw)
        m_backend->permute_layout(stream, m_dtype, dw, Layout::nchw, m_window.raw(), input_layout(0), m_n, m_c,
                                  m_need.rows(), m_need.cols());
      m_halos->scatter_own(stream, m_need, m_window.raw(), din[0].data);
      m_halos->zero_gradients(stream);
      m_halos->add_gradient(stream, m_need, m_window.raw());
      m_halos->start_backward(stream);
      m_halos->finish_backward(stream, din[0].data);
      return;
    }
    void* dx = m_in_nchw ? m_in_nchw.raw() : din[0].data;
    m_backend->bilinear_backward(stream, m_dtype, dy, dx, m_nc, m_h, m_w, oh, ow);
    if (m_in_nchw)
      m_backend->permute_layout(stream, m_dtype, dx, Layout::nchw, din[0].data, input_layout(0), m_n, m_c, m_h, m_w);
  }

 private:
  // The tile's oh x ow output (NCHW) and its place in the window's resize (`into_big`: into
  // it, else out of it).
  BlockCopy tile_block(int64_t oh, int64_t ow, bool into_big) const {
    const int64_t bh = m_need.rows() * m_fy, bw = m_need.cols() * m_fx;
    const int64_t y0 = -m_need.y0 * m_fy, x0 = -m_need.x0 * m_fx;  // the tile's first cell in the resize
    BlockCopy c;
    c.outer = m_nc;
    c.rows = oh;
    c.count = ow;
    const int64_t big_offset = y0 * bw + x0, big_outer = bh * bw, big_row = bw;
    c.src_offset = into_big ? 0 : big_offset;
    c.src_outer = into_big ? oh * ow : big_outer;
    c.src_row = into_big ? ow : big_row;
    c.dst_offset = into_big ? big_offset : 0;
    c.dst_outer = into_big ? big_outer : oh * ow;
    c.dst_row = into_big ? big_row : ow;
    return c;
  }

  int64_t m_oh, m_ow;
  int64_t m_tile_h = 0, m_tile_w = 0;  // on a tile: its output's size (set_tile_output)
  int64_t m_n = 0, m_c = 0, m_nc = 0, m_h = 0, m_w = 0;
  Buffer m_in_nchw, m_out_nchw;  // NHWC or blocked: NCHW copies of the input and the output (or their gradients)
  std::optional<TileContext> m_tile;  // an image input on a tile (set_tile)
  int64_t m_fy = 1, m_fx = 1;
  std::unique_ptr<TileHalos> m_halos;
  CellRect m_need;                    // the input window the tile reads, in its coordinates
  Buffer m_window, m_window_nchw;     // that window (its gradient in backward), in the input's layout and NCHW
  Buffer m_big, m_big_grad;           // the window resized, and the tile's gradient placed in it
};

}  // namespace

std::unique_ptr<Layer> add() { return std::make_unique<Add>(); }
std::unique_ptr<Layer> concat() { return std::make_unique<Concat>(); }
std::unique_ptr<Layer> flatten() { return std::make_unique<Flatten>(); }
std::unique_ptr<Layer> upsample_bilinear(int64_t out_h, int64_t out_w) {
  return std::make_unique<UpsampleBilinear>(out_h, out_w);
}

}  // namespace squall::nn
