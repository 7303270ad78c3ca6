#include "src/train/setup.hpp"

#include "src/cpu/cpu_info.hpp"
#include "src/parallel/learners.hpp"

namespace squall::train {

std::unique_ptr<nn::Backend> make_rank_backend(const Config& cfg, const mpi::Topology& topo) {
  const int threads =
      cfg.run.threads > 0 ? static_cast<int>(cfg.run.threads) : cpu::default_threads(topo.host_ranks());
  return nn::make_backend(cfg.run.backend, topo.host_rank(), threads, cfg.run.cpu_streams);
}

GraphFormat graph_format(const Config& cfg, std::string_view backend_name) {
  GraphFormat f;
  f.dtype = precision_dtype(cfg.train.precision);
  f.layout = resolve_layout(cfg.model.layout, backend_name, f.dtype);
  return f;
}

std::unique_ptr<nn::Graph> make_model_graph(const nn::ModelSpec& spec, const nn::Shape& sample, GraphFormat format) {
  std::unique_ptr<nn::Graph> g = nn::make_model(spec, sample);
  g->set_dtype(format.dtype);
  g->set_layout(format.layout);
  return g;
}

}  // namespace squall::train
