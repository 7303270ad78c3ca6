// ONNX export: one or a few ONNX nodes per squall layer, the parameters and running statistics
// as initializers under squall's names. Layer semantics this relies on (src/nn/layers, src/cpu):
// convolutions and pools are square with symmetric padding and floor-mode output sizes; average
// pooling excludes padding from the count; batch norm in evaluation mode normalises with the
// running mean and variance and its own eps; bilinear resizing is PyTorch's align_corners=false
// (half-pixel centres, source coordinates clamped at the edges); a linear layer reads a rank-4
// input as [n, c*h*w] in NCHW order.
#include "src/export/onnx_export.hpp"

#include <cstdio>
#include <fstream>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML)

#include "src/core/error.hpp"

namespace squall::exporting {
namespace {

using nn::Graph;
using nn::ParamInfo;
using nn::Shape;

void add_int(onnx::NodeProto& node, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void add_ints(onnx::NodeProto& node, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void add_float(onnx::NodeProto& node, const std::string& name, float v) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void add_string(onnx::NodeProto& node, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// A float32 or int64 tensor type with these dimensions; a dimension < 0 is the dynamic batch "N".
void set_type(onnx::ValueInfoProto& v, const std::string& name, const Shape& shape, int64_t batch) {
  v.set_name(name);
  onnx::TypeProto_Tensor* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = t->mutable_shape();
  for (int i = 0; i < shape.rank; ++i) {
    onnx::TensorShapeProto_Dimension* d = s->add_dim();
    if (i == 0 && batch <= 0) d->set_dim_param("N");
    else d->set_dim_value(i == 0 ? batch : shape[i]);
  }
}

class Writer {
 public:
  Writer(const Graph& g, std::span<const float> params, std::span<const float> state, const OnnxOptions& o)
      : m_g(g), m_params(params), m_state(state), m_options(o) {
    m_model.set_ir_version(onnx::IR_VERSION);
    m_model.set_producer_name("squall");
    if (!o.producer_version.empty()) m_model.set_producer_version(o.producer_version);
    if (!o.doc.empty()) m_model.set_doc_string(o.doc);
    for (size_t i = 0; i < o.metadata.size(); ++i) {
      for (size_t j = 0; j < i; ++j)
        if (o.metadata[j].first == o.metadata[i].first)
          throw Error("onnx export: the metadata key '" + o.metadata[i].first + "' is given twice");
      onnx::StringStringEntryProto* e = m_model.add_metadata_props();
      e->set_key(o.metadata[i].first);
      e->set_value(o.metadata[i].second);
    }
    onnx::OperatorSetIdProto* opset = m_model.add_opset_import();
    opset->set_domain("");
    opset->set_version(k_onnx_opset);
    m_graph = m_model.mutable_graph();
    m_graph->set_name(o.graph_name);
  }

  std::string run() {
    const int out = m_g.output_node();
    if (out == Graph::k_input) throw Error("onnx export: the model has no layers");
    if (m_g.node_shape(Graph::k_input).rank == 0) throw Error("onnx export: the graph has not been set up");
    // ONNX's Conv and Resize pad and clamp every edge alike; the model's wrapped west and east
    // edges would be exported as zeros and give its seam back, silently.
    if (m_g.wrap_columns())
      throw Error("onnx export: the model reads across its west and east edges (model.padding = "
                  "\"periodic_longitude\"), which ONNX's Conv and Resize at opset " + std::to_string(k_onnx_opset) +
                  " cannot express; predict with squall (squall predict), or train with model.padding = \"zeros\" "
                  "to export");
    if (m_params.size() != m_g.param_arena_floats() || m_state.size() != m_g.state_arena_floats())
      throw Error("onnx export: arenas of " + std::to_string(m_params.size()) + " parameter and " +
                  std::to_string(m_state.size()) + " state floats given, the model's are " +
                  std::to_string(m_g.param_arena_floats()) + " and " + std::to_string(m_g.state_arena_floats()));
    // Only the nodes the output depends on.
    std::vector<bool> needed(static_cast<size_t>(m_g.size()), false);
    needed[static_cast<size_t>(out)] = true;
    for (int i = out; i >= 1; --i)
      if (needed[static_cast<size_t>(i)])
        for (int j : m_g.node_inputs(i)) needed[static_cast<size_t>(j)] = true;

    set_type(*m_graph->add_input(), "input", m_g.node_shape(Graph::k_input), m_options.batch);
    size_t pi = 0, si = 0;  // cursors into param_info and state_info: arena order is node order
    for (int i = 1; i < m_g.size(); ++i) {
      const nn::Layer& layer = *m_g.node_layer(i);
      const size_t np = layer.param_specs().size(), ns = layer.state_specs().size();
      std::vector<std::string> names;
      for (size_t k = 0; k < np; ++k) names.push_back(initializer(m_g.param_info().at(pi + k), m_params));
      for (size_t k = 0; k < ns; ++k) names.push_back(initializer(m_g.state_info().at(si + k), m_state));
      pi += np;
      si += ns;
      if (needed[static_cast<size_t>(i)]) emit(i, layer, names);
    }
    set_type(*m_graph->add_output(), "logits", m_g.node_shape(out), m_options.batch);
    std::string bytes;
    if (!m_model.SerializeToString(&bytes)) throw Error("onnx export: the model could not be serialized");
    return bytes;
  }

 private:
  std::string value(int node) const {
    if (node == Graph::k_input) return "input";
    if (node == m_g.output_node()) return "logits";
    return m_g.node_name(node);
  }

  std::string initializer(const ParamInfo& p, std::span<const float> arena) {
    onnx::TensorProto* t = m_graph->add_initializer();
    t->set_name(p.name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int i = 0; i < p.shape.rank; ++i) t->add_dims(p.shape[i]);
    const float* src = arena.data() + p.offset;
    t->set_raw_data(std::string(reinterpret_cast<const char*>(src), p.count * sizeof(float)));
    return p.name;
  }

  std::string int64_constant(const std::string& name, const std::vector<int64_t>& v) {
    onnx::TensorProto* t = m_graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return name;
  }

  onnx::NodeProto& node(const std::string& op, const std::string& name, const std::vector<std::string>& in,
                        const std::string& out) {
    onnx::NodeProto* n = m_graph->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& s : in) n->add_input(s);
    n->add_output(out);
    return *n;
  }

  void emit(int i, const nn::Layer& layer, const std::vector<std::string>& params) {
    const std::string& name = m_g.node_name(i);
    const std::string type = layer.type();
    const nn::LayerAttributes a = layer.attributes();
    const std::vector<int>& inputs = m_g.node_inputs(i);
    const std::string y = value(i);
    std::vector<std::string> x;
    for (int j : inputs) x.push_back(value(j));
    const Shape& in0 = m_g.node_shape(inputs.at(0));
    auto with = [&](std::vector<std::string> v) {
      v.insert(v.end(), params.begin(), params.end());
      return v;
    };

    if (type == "conv2d" || type == "conv_transpose2d") {
      const bool transposed = type == "conv_transpose2d";
      onnx::NodeProto& n = node(transposed ? "ConvTranspose" : "Conv", name, with({x[0]}), y);
      add_ints(n, "kernel_shape", {a.kernel, a.kernel});
      add_ints(n, "strides", {a.stride, a.stride});
      add_ints(n, "pads", {a.padding, a.padding, a.padding, a.padding});
      add_ints(n, "dilations", {a.dilation, a.dilation});
      if (transposed) add_ints(n, "output_padding", {a.output_padding, a.output_padding});
    } else if (type == "linear") {
      std::string in = x[0];
      if (in0.rank != 2) {  // squall reads [n,c,h,w] as [n, c*h*w]
        in = name + ".flatten";
        add_int(node("Flatten", name + ".flatten", {x[0]}, in), "axis", 1);
      }
      add_int(node("Gemm", name, with({in}), y), "transB", 1);
    } else if (type == "batch_norm") {
      // weight, bias, running_mean, running_var: ONNX's scale, B, input_mean, input_var.
      add_float(node("BatchNormalization", name, with({x[0]}), y), "epsilon", a.eps);
    } else if (type == "relu") {
      node("Relu", name, x, y);
    } else if (type == "max_pool" || type == "avg_pool") {
      onnx::NodeProto& n = node(type == "max_pool" ? "MaxPool" : "AveragePool", name, x, y);
      add_ints(n, "kernel_shape", {a.kernel, a.kernel});
      add_ints(n, "strides", {a.stride, a.stride});
      add_ints(n, "pads", {a.padding, a.padding, a.padding, a.padding});
      if (type == "avg_pool") add_int(n, "count_include_pad", 0);
    } else if (type == "global_avg_pool") {  // [n,c,h,w] -> [n,c]
      node("GlobalAveragePool", name + ".pool", x, name + ".pool");
      add_int(node("Flatten", name, {name + ".pool"}, y), "axis", 1);
    } else if (type == "upsample_bilinear") {
      std::string in = x[0];
      if (in0.rank == 2) {  // [n,c]: an image of 1x1 pixels
        in = name + ".image";
        node("Unsqueeze", name + ".image", {x[0], int64_constant(name + ".image_axes", {2, 3})}, in);
      }
      // Output sizes [n, c, out_h, out_w], n taken from the input so that the batch may vary.
      add_int(node("Shape", name + ".nc", {in}, name + ".nc"), "end", 2);
      add_int(node("Concat", name + ".sizes", {name + ".nc", int64_constant(name + ".hw", {a.out_h, a.out_w})},
                   name + ".sizes"),
              "axis", 0);
      onnx::NodeProto& n = node("Resize", name, {in, "", "", name + ".sizes"}, y);
      add_string(n, "mode", "linear");
      add_string(n, "coordinate_transformation_mode", "half_pixel");
    } else if (type == "dropout") {
      node("Identity", name, x, y);  // inference: dropout is off
    } else if (type == "add") {
      node("Add", name, x, y);
    } else if (type == "concat") {
      add_int(node("Concat", name, x, y), "axis", 1);
    } else if (type == "flatten") {
      add_int(node("Flatten", name, x, y), "axis", 1);
    } else {
      throw Error("onnx export: node '" + name + "' is a " + type + " layer, which has no ONNX mapping");
    }
  }

  const Graph& m_g;
  std::span<const float> m_params, m_state;
  const OnnxOptions& m_options;
  onnx::ModelProto m_model;
  onnx::GraphProto* m_graph = nullptr;
};

}  // namespace

std::string onnx_model_bytes(const Graph& graph, std::span<const float> params, std::span<const float> state,
                             const OnnxOptions& options) {
  return Writer(graph, params, state, options).run();
}

void write_onnx(const Graph& graph, std::span<const float> params, std::span<const float> state,
                const std::filesystem::path& out, const OnnxOptions& options) {
  const std::string bytes = onnx_model_bytes(graph, params, state, options);
  const std::filesystem::path tmp = out.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(out.string() + ": cannot create " + tmp.string() + ": " + std::generic_category().message(errno));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      const int err = errno;
      f.close();
      std::remove(tmp.c_str());
      throw Error(out.string() + ": cannot write the model: " + std::generic_category().message(err));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error(out.string() + ": cannot replace it: " + ec.message());
  }
}

}  // namespace squall::exporting
