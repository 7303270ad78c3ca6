#pragma once
// Export of a model graph to ONNX for inference (docs/inference.md, "Export to ONNX"), through
// the ONNX project's own protobuf classes. The exported graph is the model in evaluation mode:
// batch norm uses its running statistics, dropout is the identity. It reads "input" [N, C, H, W]
// (float32, NCHW, already normalised as the training data was) and writes "logits", the graph's
// output before any softmax: [N, classes] for a classifier, [N, classes, H, W] for segmentation.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/nn/graph.hpp"

namespace squall::exporting {

struct OnnxOptions {
  int64_t batch = 0;                  // the batch dimension of input and logits; 0: dynamic ("N")
  std::string graph_name = "squall";  // the ONNX graph's name (the model's, e.g. "resnet20")
  std::string producer_version;       // squall's version, recorded in the file
  std::string doc;                    // a free-text description recorded in the file
  // ModelProto.metadata_props, in this order: what a caller needs beside the graph and ONNX
  // has no field for (the normalisation, the channels, the grid, the classes; cmd_export.cpp
  // fills them, docs/inference.md, "Metadata", lists the keys). Keys must be distinct.
  std::vector<std::pair<std::string, std::string>> metadata;
};

inline constexpr int64_t k_onnx_opset = 17;

// The model as a serialized onnx.ModelProto. `graph` must have been set up (setup() or
// build()); `params` and `state` are host copies of its parameter and state arenas (the layout
// of graph.param_info() and graph.state_info(), padding included: param_arena_floats() and
// state_arena_floats() floats), whose tensors become initializers of the same
// names ("stage1.block0.a.conv.weight"). Throws squall::Error naming the node and its layer
// type when a layer has no ONNX counterpart, when the arrays do not match the graph, or naming
// the key when options.metadata holds it twice.
std::string onnx_model_bytes(const nn::Graph& graph, std::span<const float> params, std::span<const float> state,
                             const OnnxOptions& options);

// onnx_model_bytes written to `out` atomically: a temporary file next to it, flushed, then
// renamed over it. Throws squall::Error naming the file when it cannot be written.
void write_onnx(const nn::Graph& graph, std::span<const float> params, std::span<const float> state,
                const std::filesystem::path& out, const OnnxOptions& options);

}  // namespace squall::exporting
