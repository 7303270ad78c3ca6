// The model zoo: lenet5 and resnet20 for images, unet and deeplabv3plus for segmentation.
// Knobs (width, depth, ASPP rates) let one definition run from a CI-sized tile to the
// DeepCAM size (768 x 1152 x 16).
#include <algorithm>

#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/models/builder.hpp"
#include "src/nn/models/input_multiple.hpp"

namespace squall::nn {
namespace {

using models::Builder;

std::string str(int64_t v) { return std::to_string(v); }

// The knobs' defaults (ModelSpec's 0 or empty), here once for the builders and model_knobs.
constexpr int64_t k_resnet20_width = 16, k_resnet20_depth = 3;
constexpr int64_t k_unet_width = 16, k_unet_depth = 3;
constexpr int64_t k_deeplab_width = 16, k_deeplab_depth = 4;
const std::vector<int64_t>& default_aspp_rates() {
  static const std::vector<int64_t> rates{6, 12, 18};
  return rates;
}

std::string known_models() {
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  return known;
}

// LeCun et al.'s LeNet-5 as the design fixes it: conv 5x5 1->6 pad 2, ReLU, max pool 2;
// conv 5x5 6->16, ReLU, max pool 2; linear 400->120, ReLU; 120->84, ReLU; 84->classes.
std::unique_ptr<Graph> lenet5(const ModelSpec& spec, Shape in) {
  auto g = std::make_unique<Graph>(in);
  Conv2dOptions c1{6, 5, 1, 2, 1, true, Init::uniform_fan_in};
  Conv2dOptions c2{16, 5, 1, 0, 1, true, Init::uniform_fan_in};
  int x = g->add("conv1", conv2d(c1), Graph::k_input);
  x = g->add("relu1", relu(), x);
  x = g->add("pool1", max_pool(2, 2), x);
  x = g->add("conv2", conv2d(c2), x);
  x = g->add("relu2", relu(), x);
  x = g->add("pool2", max_pool(2, 2), x);
  x = g->add("flatten", flatten(), x);
  x = g->add("fc1", linear(120), x);
  x = g->add("relu3", relu(), x);
  x = g->add("fc2", linear(84), x);
  x = g->add("relu4", relu(), x);
  if (spec.dropout > 0) x = g->add("dropout", dropout(spec.dropout), x);
  g->add("fc3", linear(spec.classes), x);
  return g;
}

// He et al.'s CIFAR ResNet-20: a 3x3 stem, 3 stages of 3 basic blocks (16/32/64 channels
// by default, x width/16), global average pool, linear. Projection shortcuts (1x1 conv +
// BN) where the shape changes. Works on 28x28 and 32x32 inputs.
std::unique_ptr<Graph> resnet20(const ModelSpec& spec, Shape in) {
  auto g = std::make_unique<Graph>(in);
  Builder b(*g);
  const int64_t w = spec.width > 0 ? spec.width : k_resnet20_width;
  const int64_t blocks = spec.depth > 0 ? spec.depth : k_resnet20_depth;
  int x = b.conv_bn("stem", Graph::k_input, w, 3);
  int64_t ch = w;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t out = w << stage;
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t stride = (stage > 0 && k == 0) ? 2 : 1;
      x = b.basic_block("stage" + str(stage + 1) + ".block" + str(k), x, ch, out, stride);
      ch = out;
    }
  }
  x = g->add("pool", global_avg_pool(), x);
  if (spec.dropout > 0) x = g->add("dropout", dropout(spec.dropout), x);
  g->add("fc", linear(spec.classes), x);
  return g;
}

// U-Net (Ronneberger et al.): `depth` levels of two 3x3 conv-BN-ReLU, max pool down,
// transposed conv up, skip concatenation, 1x1 classifier. Input sides must be divisible by
// 2^depth.
std::unique_ptr<Graph> unet(const ModelSpec& spec, Shape in) {
  const int64_t w = spec.width > 0 ? spec.width : k_unet_width;
  const int64_t depth = spec.depth > 0 ? spec.depth : k_unet_depth;
  const int64_t div = int64_t{1} << depth;
  if (in.h() % div != 0 || in.w() % div != 0)
    throw Error("model unet: input " + str(in.h()) + "x" + str(in.w()) + " is not divisible by 2^depth = " + str(div) +
                " (depth " + str(depth) + ")");
  auto g = std::make_unique<Graph>(in);
  Builder b(*g);
  std::vector<int> skips;
  int x = Graph::k_input;
  for (int64_t l = 0; l < depth; ++l) {
    const std::string n = "down" + str(l);
    x = b.conv_bn(n + ".a", x, w << l, 3);
    x = b.conv_bn(n + ".b", x, w << l, 3);
    skips.push_back(x);
    x = g->add(n + ".pool", max_pool(2, 2), x);
  }
  x = b.conv_bn("bottom.a", x, w << depth, 3);
  x = b.conv_bn("bottom.b", x, w << depth, 3);
  for (int64_t l = depth - 1; l >= 0; --l) {
    const std::string n = "up" + str(l);
    ConvTranspose2dOptions up{w << l, 2, 2, 0, 0, true};
    x = g->add(n + ".upconv", conv_transpose2d(up), x);
    x = g->add(n + ".concat", concat(), {x, skips[static_cast<size_t>(l)]});
    x = b.conv_bn(n + ".a", x, w << l, 3);
    x = b.conv_bn(n + ".b", x, w << l, 3);
  }
  if (spec.dropout > 0) x = g->add("dropout", dropout(spec.dropout), x);
  b.conv("classifier", x, spec.classes, 1, 1, 1, true, Init::uniform_fan_in);
  return g;
}

// DeepLabv3+'s head, shared by its encoders: ASPP on the encoder output x (at 1/stride of the
// input: a 1x1 branch, one dilated 3x3 per rate, image pooling; concatenated and projected),
// then the decoder: upsampled to the stride-4 low-level features (reduced by 1x1), two 3x3
// convs, the classifier and the upsampling to the input size.
struct DeeplabHead {
  int64_t channels;      // ASPP and decoder width
  int64_t low_channels;  // the low-level features after their 1x1
  std::vector<int64_t> rates;
};

void deeplab_head(Builder& b, const ModelSpec& spec, const Shape& in, int x, int64_t stride, int low_level,
                  const DeeplabHead& h) {
  Graph& g = b.graph();
  std::vector<int> branches;
  branches.push_back(b.conv_bn("aspp.b0", x, h.channels, 1));
  for (size_t i = 0; i < h.rates.size(); ++i)
    branches.push_back(b.conv_bn("aspp.b" + str(static_cast<int64_t>(i) + 1), x, h.channels, 3, 1, h.rates[i]));
  int pooled = g.add("aspp.pool", global_avg_pool(), x);
  pooled = g.add("aspp.pool.fc", linear(h.channels), pooled);
  pooled = g.add("aspp.pool.relu", relu(), pooled);
  pooled = g.add("aspp.pool.up", upsample_bilinear(in.h() / stride, in.w() / stride), pooled);
  branches.push_back(pooled);
  x = g.add("aspp.concat", concat(), branches);
  x = b.conv_bn("aspp.project", x, h.channels, 1);
  if (spec.dropout > 0) x = g.add("aspp.dropout", dropout(spec.dropout), x);
  x = g.add("dec.up", upsample_bilinear(in.h() / 4, in.w() / 4), x);
  const int low = b.conv_bn("dec.low", low_level, h.low_channels, 1);
  x = g.add("dec.concat", concat(), {x, low});
  x = b.conv_bn("dec.a", x, h.channels, 3);
  x = b.conv_bn("dec.b", x, h.channels, 3);
  x = b.conv("classifier", x, spec.classes, 1, 1, 1, true, Init::uniform_fan_in);
  g.add("upsample", upsample_bilinear(in.h(), in.w()), x);
}

// DeepLabv3+ (Chen et al. 2018), as used for climate segmentation: a residual encoder
// (stem at stride 2, residual stages down to output stride 8, then dilated stages), ASPP
// with a 1x1 branch, one dilated 3x3 branch per rate and an image-pooling branch, and a
// decoder that upsamples x2 ... to the stride-4 low-level features, concatenates them
// (reduced by 1x1), refines with two 3x3 convs and upsamples to the input size.
std::unique_ptr<Graph> deeplabv3plus(const ModelSpec& spec, Shape in) {
  const int64_t w = spec.width > 0 ? spec.width : k_deeplab_width;
  const int64_t stages = spec.depth > 0 ? spec.depth : k_deeplab_depth;
  std::vector<int64_t> rates = spec.aspp_rates.empty() ? default_aspp_rates() : spec.aspp_rates;
  if (in.h() % 8 != 0 || in.w() % 8 != 0)
    throw Error("model deeplabv3plus: input " + str(in.h()) + "x" + str(in.w()) + " must be divisible by 8");
  if (stages < 2) throw Error("model deeplabv3plus: depth (encoder stages) must be >= 2");
  auto g = std::make_unique<Graph>(in);
  Builder b(*g);
  int x = b.conv_bn("stem", Graph::k_input, w, 3, 2);  // stride 2
  int64_t ch = w, dilation = 1;
  int low_level = -1;
  for (int64_t s = 0; s < stages; ++s) {
    // stage 0: stride 2 (-> /4, the low-level features); stage 1: stride 2 (-> /8);
    // later stages keep /8 and grow the dilation instead.
    const int64_t out = w << std::min<int64_t>(s + 1, 4);
    const int64_t stride = s < 2 ? 2 : 1;
    if (s >= 2) dilation *= 2;
    x = b.basic_block("enc" + str(s) + ".block0", x, ch, out, stride, dilation);
    x = b.basic_block("enc" + str(s) + ".block1", x, out, out, 1, dilation);
    ch = out;
    if (s == 0) low_level = x;
  }
  deeplab_head(b, spec, in, x, 8, low_level, {w * 4, std::max<int64_t>(w, 8), std::move(rates)});
  return g;
}

// DeepLabv3+ on a ResNet-50 backbone at DeepCAM's 768 x 1152 x 16 (the MLPerf HPC reference
// code uses a modified aligned Xception backbone instead; docs/training.md, "Models"): a 7x7
// stem and max pooling (/4), bottleneck stages of 3, 4, 6 and 3 blocks (64, 128, 256, 512
// wide, x4 out), the last dilated instead of strided (output stride 16);
// ASPP of 256 channels (1x1, rates 6/12/18, image pooling); a decoder joining the stage-1
// features reduced to 48 channels at /4, two 3x3 convs of 256, the classifier, and x4.
std::unique_ptr<Graph> deeplabv3plus_resnet50(const ModelSpec& spec, Shape in) {
  std::vector<int64_t> rates = spec.aspp_rates.empty() ? default_aspp_rates() : spec.aspp_rates;
  if (in.h() % 16 != 0 || in.w() % 16 != 0)
    throw Error("model deeplabv3plus-resnet50: input " + str(in.h()) + "x" + str(in.w()) + " must be divisible by 16");
  auto g = std::make_unique<Graph>(in);
  Builder b(*g);
  int x = b.conv_bn("stem", Graph::k_input, 64, 7, 2);
  x = g->add("stem.pool", max_pool(3, 2, 1), x);
  const int64_t blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  const int64_t strides[4] = {1, 2, 2, 1}, dilations[4] = {1, 1, 1, 2};
  int64_t ch = 64;
  int low_level = -1;
  for (int s = 0; s < 4; ++s) {
    const int64_t out = widths[s] * 4;
    for (int64_t k = 0; k < blocks[s]; ++k)
      x = b.bottleneck("layer" + str(s + 1) + ".block" + str(k), x, k == 0 ? ch : out, widths[s], out,
                       k == 0 ? strides[s] : 1, dilations[s]);
    ch = out;
    if (s == 0) low_level = x;
  }
  deeplab_head(b, spec, in, x, 16, low_level, {256, 48, std::move(rates)});
  return g;
}

}  // namespace

std::vector<std::string> model_names() {
  return {"lenet5", "resnet20", "unet", "deeplabv3plus", "deeplabv3plus-resnet50"};
}

bool per_pixel_model(const std::string& name) {
  return name == "unet" || name == "deeplabv3plus" || name == "deeplabv3plus-resnet50";
}

namespace {
std::unique_ptr<Graph> make_zoo_model(const ModelSpec& spec, Shape in);
}

std::unique_ptr<Graph> make_model(const ModelSpec& spec, Shape in) {
  auto g = make_zoo_model(spec, in);
  if (spec.padding == ModelPadding::periodic_longitude && !per_pixel_model(spec.name))
    throw Error("model.padding = \"periodic_longitude\" is for segmentation models of global fields (unet, "
                "deeplabv3plus), not the classifier " + spec.name);
  g->set_wrap_columns(spec.padding == ModelPadding::periodic_longitude);
  return g;
}

namespace {
std::unique_ptr<Graph> make_zoo_model(const ModelSpec& spec, Shape in) {
  if (spec.classes < 2) throw Error("model " + spec.name + ": classes must be >= 2");
  if (spec.name == "lenet5") {
    if (in.h() != 28 || in.w() != 28)
      throw Error("model lenet5 takes 28x28 inputs (linear 400->120 fixes it), got " + str(in.h()) + "x" + str(in.w()));
    return lenet5(spec, in);
  }
  if (spec.name == "resnet20") return resnet20(spec, in);
  if (spec.name == "unet") return unet(spec, in);
  if (spec.name == "deeplabv3plus") return deeplabv3plus(spec, in);
  if (spec.name == "deeplabv3plus-resnet50") return deeplabv3plus_resnet50(spec, in);
  throw Error("unknown model '" + spec.name + "' (known: " + known_models() + ")");
}
}  // namespace

int64_t input_multiple(const ModelSpec& spec) {
  if (spec.name == "unet") return int64_t{1} << (spec.depth > 0 ? spec.depth : k_unet_depth);
  if (spec.name == "deeplabv3plus") return 8;
  if (spec.name == "deeplabv3plus-resnet50") return 16;
  return 1;
}

std::string input_multiple_text(const ModelSpec& spec) {
  if (spec.name == "unet") return "unet of depth " + str(spec.depth > 0 ? spec.depth : k_unet_depth);
  if (spec.name == "deeplabv3plus" || spec.name == "deeplabv3plus-resnet50")
    return spec.name + " (output stride " + str(input_multiple(spec)) + ")";
  return spec.name;
}

ModelKnobs model_knobs(const std::string& name) {
  ModelKnobs k;
  if (name == "lenet5") return k;
  if (name == "resnet20") return {true, true, false, k_resnet20_width, k_resnet20_depth, {}};
  if (name == "unet") return {true, true, false, k_unet_width, k_unet_depth, {}};
  if (name == "deeplabv3plus") return {true, true, true, k_deeplab_width, k_deeplab_depth, default_aspp_rates()};
  if (name == "deeplabv3plus-resnet50") return {false, false, true, 0, 0, default_aspp_rates()};
  throw Error("unknown model '" + name + "' (known: " + known_models() + ")");
}

}  // namespace squall::nn
