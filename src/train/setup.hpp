#pragma once
// The backend and the model graph a config gives a rank: one set-up for training, `squall
// eval`, `squall predict` and `squall export`, so that all of them compute on the same
// backend, in the same precision and memory order, with the same model.
#include <memory>

#include "mpi/topology.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/train/config.hpp"

namespace squall::train {

// run.backend, run.threads and run.cpu_streams. Ranks on one machine share its cores (unless the
// launcher pinned them: src/cpu/cpu_info.hpp), and a rank's place among them picks its GPU.
std::unique_ptr<nn::Backend> make_rank_backend(const Config& cfg, const mpi::Topology& topo);

// The activations' type (train.precision) and memory order (model.layout; auto resolved for
// `backend_name`) of a model graph.
struct GraphFormat {
  nn::DType dtype = nn::DType::f32;
  nn::Layout layout = nn::Layout::nchw;
};
GraphFormat graph_format(const Config& cfg, std::string_view backend_name);

// The zoo's model `spec` for samples of `sample`'s shape ([1, c, h, w]) in `format`, not built.
std::unique_ptr<nn::Graph> make_model_graph(const nn::ModelSpec& spec, const nn::Shape& sample, GraphFormat format);

}  // namespace squall::train
