#include "src/train/init_weights.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "src/core/error.hpp"

namespace squall::train {
namespace {

using checkpoint::ModelCheckpoint;
using checkpoint::NamedTensor;

std::vector<int64_t> dims_of(const nn::Shape& s) { return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.rank); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

std::string rates_text(const std::vector<int64_t>& rates) { return shape_text(rates); }

// A knob as the model uses it: 0 (or empty) is the model's default.
struct Effective {
  int64_t width = 0, depth = 0;
  std::vector<int64_t> rates;
};
Effective effective(const nn::ModelSpec& s) {
  Effective e{s.width, s.depth, s.aspp_rates};
  try {
    const nn::ModelKnobs k = nn::model_knobs(s.name);
    if (e.width == 0) e.width = k.default_width;
    if (e.depth == 0) e.depth = k.default_depth;
    if (e.rates.empty()) e.rates = k.default_aspp_rates;
  } catch (const Error&) {  // a model this squall does not know: as written
  }
  return e;
}

// The config key behind a tensor that does not carry over, with its value here and in the
// checkpoint: the first of the model's knobs that differs, else the data's channels or grid.
std::string differing_key(const ModelCheckpoint& ck, const nn::ModelSpec& spec, const data::DatasetInfo& info) {
  const nn::ModelSpec& then = ck.spec;
  const Effective now_k = effective(spec), then_k = effective(then);
  const auto both = [](const std::string& here, const std::string& there) {
    return " (" + here + " here, " + there + " in the checkpoint)";
  };
  if (then.name != spec.name) return "model.name" + both("'" + spec.name + "'", "'" + then.name + "'");
  if (then_k.width != now_k.width)
    return "model.width" + both(std::to_string(now_k.width), std::to_string(then_k.width));
  if (then_k.depth != now_k.depth)
    return "model.depth" + both(std::to_string(now_k.depth), std::to_string(then_k.depth));
  if (then_k.rates != now_k.rates) return "model.aspp_rates" + both(rates_text(now_k.rates), rates_text(then_k.rates));
  if (then.classes != spec.classes)
    return "model.classes (" + std::to_string(spec.classes) +
           " here, data.train's classes unless model.classes sets them; " + std::to_string(then.classes) +
           " in the checkpoint)";
  if (ck.input.c() != info.sample.c())
    return "data.train's input channels" +
           both(std::to_string(info.sample.c()), std::to_string(ck.input.c())) +
           "; channels are matched by name only where the checkpoint and data.train both name them";
  if (ck.input.h() != info.sample.h() || ck.input.w() != info.sample.w())
    return "data.train's grid" +
           both(std::to_string(info.sample.h()) + " x " + std::to_string(info.sample.w()),
                std::to_string(ck.input.h()) + " x " + std::to_string(ck.input.w())) +
           ": this model's weights depend on the size of its input";
  return "the model's definition (its model.* keys and data agree with the checkpoint's: a checkpoint of another "
         "squall version?)";
}

[[noreturn]] void refuse(const ModelCheckpoint& ck, const std::string& what, const std::string& key) {
  throw UsageError(ck.origin + ": train.init_from cannot start this run's model from it: " + what + "; " + key +
                   " differs; start from a checkpoint of the same model, or remove train.init_from");
}

// The tensors of the layers that read the input and whose second dimension is its channels
// (a convolution's weight, [out, in, kh, kw]): what a change of input channels changes.
std::set<std::string> input_weights(const nn::Graph& graph, int64_t channels) {
  std::set<std::string> layers;
  for (int i = 1; i < graph.size(); ++i) {
    const std::vector<int>& in = graph.node_inputs(i);
    if (std::find(in.begin(), in.end(), nn::Graph::k_input) != in.end()) layers.insert(graph.node_name(i) + ".");
  }
  std::set<std::string> out;
  for (const nn::ParamInfo& p : graph.param_info())
    for (const std::string& layer : layers)
      if (p.name.starts_with(layer) && p.shape.rank == 4 && p.shape.dims[1] == channels) out.insert(p.name);
  return out;
}

// `t` ([out, then_c, kh, kw]) for `now_c` channels: channel j of this run from the checkpoint's
// channel from[j], or zeros where from[j] < 0.
std::vector<float> take_channels(const NamedTensor& t, const std::vector<int64_t>& from) {
  const int64_t out = t.shape[0], then_c = t.shape[1], area = t.shape[2] * t.shape[3];
  const auto now_c = static_cast<int64_t>(from.size());
  std::vector<float> v(static_cast<size_t>(out * now_c * area), 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < now_c; ++j) {
      if (from[static_cast<size_t>(j)] < 0) continue;
      const float* src = t.values.data() + (o * then_c + from[static_cast<size_t>(j)]) * area;
      std::copy(src, src + area, v.data() + (o * now_c + j) * area);
    }
  return v;
}

}  // namespace

InitWeights map_init_weights(const ModelCheckpoint& ck, const nn::Graph& graph, const nn::ModelSpec& spec,
                             const data::DatasetInfo& info) {
  InitWeights w;
  const std::string key = differing_key(ck, spec, info);
  if (ck.spec.name != spec.name)
    refuse(ck, "it holds a " + ck.spec.name + " model, this run trains a " + spec.name, key);
  w.grid_changed = ck.input.h() != info.sample.h() || ck.input.w() != info.sample.w();

  // The input channels by name, where both sides name them and they differ (order included).
  const std::vector<std::string>& then_names = ck.channel_names;
  const std::vector<std::string>& now_names = info.channel_names;
  std::vector<int64_t> from;
  if (!then_names.empty() && !now_names.empty() && then_names != now_names) {
    w.channels_mapped = true;
    for (const std::string& n : now_names) {
      const auto it = std::find(then_names.begin(), then_names.end(), n);
      from.push_back(it == then_names.end() ? -1 : it - then_names.begin());
      (it == then_names.end() ? w.added : w.reused).push_back(n);
    }
    for (const std::string& n : then_names)
      if (std::find(now_names.begin(), now_names.end(), n) == now_names.end()) w.dropped.push_back(n);
  }
  const std::set<std::string> mapped = w.channels_mapped ? input_weights(graph, info.sample.c()) : std::set<std::string>{};

  std::set<std::string> used;
  const auto take = [&](const std::vector<nn::ParamInfo>& infos, std::vector<float>& packed) {
    for (const nn::ParamInfo& p : infos) {
      const std::vector<int64_t> shape = dims_of(p.shape);
      const auto it = ck.tensors.find(p.name);
      if (it == ck.tensors.end())
        refuse(ck, "it has no tensor model/" + p.name + " for this run's " + shape_text(shape), key);
      const NamedTensor& t = it->second;
      used.insert(p.name);
      if (mapped.contains(p.name) && t.shape.size() == 4 && t.shape[0] == shape[0] && t.shape[2] == shape[2] &&
          t.shape[3] == shape[3] && t.shape[1] == ck.input.c()) {
        const std::vector<float> v = take_channels(t, from);
        packed.insert(packed.end(), v.begin(), v.end());
        continue;
      }
      if (t.shape != shape || t.values.size() != p.count)
        refuse(ck, "tensor model/" + p.name + " is " + shape_text(t.shape) + " there and " + shape_text(shape) +
                       " in this run's model",
               key);
      packed.insert(packed.end(), t.values.begin(), t.values.end());
    }
  };
  take(graph.param_info(), w.params);
  take(graph.state_info(), w.state);
  for (const auto& [name, t] : ck.tensors)
    if (!used.contains(name))
      refuse(ck, "its tensor model/" + name + " " + shape_text(t.shape) + " is not part of this run's model", key);
  return w;
}

std::vector<std::string> init_weights_lines(const ModelCheckpoint& ck, const InitWeights& w,
                                            const data::DatasetInfo& info, const std::string& source) {
  std::vector<std::string> lines;
  lines.push_back("train.init_from: starting from the weights of " + source + " (step " + std::to_string(ck.step) +
                  ", " + ck.spec.name + "): its parameters and BatchNorm statistics by name, with fresh optimizer "
                  "state, from step 0, on data.train's normalisation");
  if (w.channels_mapped)
    lines.push_back("train.init_from: input channels by name: reused " + join(w.reused) + "; new to this run, with zero "
                    "weights: " + join(w.added) + "; dropped: " + join(w.dropped));
  if (w.grid_changed)
    lines.push_back("train.init_from: the checkpoint was trained on a " + std::to_string(ck.input.h()) + " x " +
                    std::to_string(ck.input.w()) + " grid, data.train's is " + std::to_string(info.sample.h()) +
                    " x " + std::to_string(info.sample.w()) + ": the weights carry over, convolutions do not depend "
                    "on the grid");
  return lines;
}

}  // namespace squall::train
