#pragma once
// Small helpers the model definitions share: conv + batch norm + ReLU blocks with
// hierarchical node names ("stage2.block0.conv1").
#include <string>

#include "src/nn/graph.hpp"

namespace squall::nn::models {

class Builder {
 public:
  explicit Builder(Graph& g) : m_g(g) {}
  Graph& graph() { return m_g; }

  int conv(const std::string& name, int in, int64_t out_ch, int64_t kernel, int64_t stride = 1,
           int64_t dilation = 1, bool bias = false, Init init = Init::kaiming_normal_out) {
    Conv2dOptions o;
    o.out_channels = out_ch;
    o.kernel = kernel;
    o.stride = stride;
    o.dilation = dilation;
    o.padding = dilation * (kernel - 1) / 2;  // "same" for odd kernels
    o.bias = bias;
    o.init = init;
    return m_g.add(name, conv2d(o), in);
  }
  // conv -> batch norm -> (ReLU)
  int conv_bn(const std::string& name, int in, int64_t out_ch, int64_t kernel, int64_t stride = 1,
              int64_t dilation = 1, bool with_relu = true) {
    int x = conv(name + ".conv", in, out_ch, kernel, stride, dilation);
    x = m_g.add(name + ".bn", batch_norm(), x);
    return with_relu ? m_g.add(name + ".relu", relu(), x) : x;
  }
  // ResNet basic block: two 3x3 conv-bn, identity or 1x1 projection shortcut, ReLU.
  int basic_block(const std::string& name, int in, int64_t in_ch, int64_t out_ch, int64_t stride,
                  int64_t dilation = 1) {
    int x = conv_bn(name + ".a", in, out_ch, 3, stride, dilation);
    x = conv_bn(name + ".b", x, out_ch, 3, 1, dilation, false);
    int shortcut = in;
    if (stride != 1 || in_ch != out_ch) shortcut = conv_bn(name + ".proj", in, out_ch, 1, stride, 1, false);
    x = m_g.add(name + ".add", add(), {x, shortcut});
    return m_g.add(name + ".relu", relu(), x);
  }
  // ResNet bottleneck (torchvision's, stride on the 3x3): 1x1 to `width`, 3x3 (stride,
  // dilation), 1x1 to `out_ch`; a 1x1 projection shortcut when the shape changes; ReLU.
  int bottleneck(const std::string& name, int in, int64_t in_ch, int64_t width, int64_t out_ch, int64_t stride,
                 int64_t dilation = 1) {
    int x = conv_bn(name + ".a", in, width, 1);
    x = conv_bn(name + ".b", x, width, 3, stride, dilation);
    x = conv_bn(name + ".c", x, out_ch, 1, 1, 1, false);
    int shortcut = in;
    if (stride != 1 || in_ch != out_ch) shortcut = conv_bn(name + ".proj", in, out_ch, 1, stride, 1, false);
    x = m_g.add(name + ".add", add(), {x, shortcut});
    return m_g.add(name + ".relu", relu(), x);
  }

 private:
  Graph& m_g;
};

}  // namespace squall::nn::models
