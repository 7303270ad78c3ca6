"""The PyTorch peers of squall's model zoo, layer for layer (src/nn/models/zoo.cpp and
src/nn/models/builder.hpp): the same convolutions (bias or not, stride, dilation, "same"
padding), batch norms, ReLUs, poolings, transposed convolutions, concatenations in the same
order, bilinear resizing and linear layers, so that a step costs what squall's costs and the
parameter counts agree (tests/peer/check_peer_models.py compares them with `squall model
--json`). Every bench that times PyTorch builds its network here.

    lenet5(classes=10, in_channels=1)
    resnet20(classes=10, in_channels=1, width=16, blocks=3)
    unet(classes=3, in_channels=16, width=16, depth=4)
    deeplabv3plus(classes=3, in_channels=16, width=16, depth=4, rates=(6, 12, 18))

Imports torch: a caller that may run without it imports this module inside its own check.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv(cin, cout, k, stride=1, dilation=1, bias=False):
    """builder.hpp's conv: "same" padding for odd kernels, no bias unless asked."""
    return nn.Conv2d(cin, cout, k, stride, dilation * (k - 1) // 2, dilation, bias=bias)


def conv_bn(cin, cout, k, stride=1, dilation=1, relu=True):
    """builder.hpp's conv_bn: conv -> batch norm -> (ReLU)."""
    layers = [conv(cin, cout, k, stride, dilation), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """builder.hpp's basic_block: two 3x3 conv-bn, an identity or 1x1 projection shortcut, ReLU."""

    def __init__(self, cin, cout, stride, dilation=1):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride, dilation)
        self.b = conv_bn(cout, cout, 3, 1, dilation, relu=False)
        self.proj = conv_bn(cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        return F.relu(self.b(self.a(x)) + (self.proj(x) if self.proj is not None else x))


class LeNet5(nn.Module):
    """conv 5x5 ->6 pad 2, ReLU, max pool 2; conv 5x5 6->16, ReLU, max pool 2; 400->120->84->classes."""

    def __init__(self, classes=10, in_channels=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ResNet20(nn.Module):
    """A 3x3 conv-bn stem, 3 stages of `blocks` basic blocks (width, 2 width, 4 width; stride 2
    entering stages 2 and 3), global average pooling, linear."""

    def __init__(self, classes=10, in_channels=1, width=16, blocks=3):
        super().__init__()
        self.stem = conv_bn(in_channels, width, 3)
        layers, ch = [], width
        for stage in range(3):
            out = width << stage
            for k in range(blocks):
                layers.append(BasicBlock(ch, out, 2 if stage > 0 and k == 0 else 1))
                ch = out
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(ch, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class UNet(nn.Module):
    """`depth` levels of two 3x3 conv-bn-ReLU (width << level channels) then max pool 2; a bottom
    of two at width << depth; per level up: a 2x2 stride-2 transposed conv (with bias) to
    width << level, concatenated with the level's skip (upsampled first), two 3x3 conv-bn-ReLU;
    a 1x1 classifier with bias."""

    def __init__(self, classes=3, in_channels=16, width=16, depth=4):
        super().__init__()
        self.depth = depth
        down, ch = [], in_channels
        for level in range(depth):
            out = width << level
            down.append(nn.Sequential(conv_bn(ch, out, 3), conv_bn(out, out, 3)))
            ch = out
        self.down = nn.ModuleList(down)
        bottom = width << depth
        self.bottom = nn.Sequential(conv_bn(ch, bottom, 3), conv_bn(bottom, bottom, 3))
        ch = bottom
        upconv, up = [], []
        for level in reversed(range(depth)):
            out = width << level
            upconv.append(nn.ConvTranspose2d(ch, out, 2, stride=2, bias=True))
            up.append(nn.Sequential(conv_bn(2 * out, out, 3), conv_bn(out, out, 3)))
            ch = out
        self.upconv, self.up = nn.ModuleList(upconv), nn.ModuleList(up)
        self.classifier = conv(ch, classes, 1, bias=True)

    def forward(self, x):
        h, w = x.shape[-2:]
        if h % (1 << self.depth) or w % (1 << self.depth):
            raise ValueError(f"unet: input {h}x{w} is not divisible by 2^depth = {1 << self.depth}")
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for upconv, block, skip in zip(self.upconv, self.up, reversed(skips)):
            x = block(torch.cat([upconv(x), skip], 1))
        return self.classifier(x)


class DeepLabV3Plus(nn.Module):
    """A stride-2 conv-bn stem; `depth` encoder stages of two basic blocks (width << min(s + 1, 4)
    channels; stride 2 in stages 0 and 1, then the dilation doubles per stage instead: output
    stride 8), stage 0's output the low-level features; ASPP at 4 width (a 1x1 branch, one
    dilated 3x3 per rate, image pooling: global average, linear with bias, ReLU, upsampled),
    concatenated and projected by a 1x1; upsampled to /4, concatenated with the low-level
    features reduced by a 1x1 to max(width, 8), two 3x3 conv-bn-ReLU, a 1x1 classifier with bias,
    upsampled to the input."""

    def __init__(self, classes=3, in_channels=16, width=16, depth=4, rates=(6, 12, 18)):
        super().__init__()
        if depth < 2:
            raise ValueError("deeplabv3plus: depth (encoder stages) must be >= 2")
        self.stem = conv_bn(in_channels, width, 3, 2)
        enc, ch, dilation = [], width, 1
        for s in range(depth):
            out = width << min(s + 1, 4)
            stride = 2 if s < 2 else 1
            if s >= 2:
                dilation *= 2
            enc.append(nn.Sequential(BasicBlock(ch, out, stride, dilation), BasicBlock(out, out, 1, dilation)))
            ch = out
        self.enc = nn.ModuleList(enc)
        a, low = width * 4, max(width, 8)
        self.aspp = nn.ModuleList([conv_bn(ch, a, 1)] + [conv_bn(ch, a, 3, 1, r) for r in rates])
        self.pool_fc = nn.Linear(ch, a)
        self.project = conv_bn(a * (len(rates) + 2), a, 1)
        self.low = conv_bn(width << 1, low, 1)
        self.dec_a = conv_bn(a + low, a, 3)
        self.dec_b = conv_bn(a, a, 3)
        self.classifier = conv(a, classes, 1, bias=True)

    def forward(self, x):
        h, w = x.shape[-2:]
        if h % 8 or w % 8:
            raise ValueError(f"deeplabv3plus: input {h}x{w} must be divisible by 8")
        x = self.stem(x)
        low = None
        for s, stage in enumerate(self.enc):
            x = stage(x)
            if s == 0:
                low = x
        fh, fw = x.shape[-2:]
        pooled = F.relu(self.pool_fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))[:, :, None, None]
        branches = [b(x) for b in self.aspp]
        branches.append(F.interpolate(pooled, (fh, fw), mode="bilinear", align_corners=False))
        x = self.project(torch.cat(branches, 1))
        x = F.interpolate(x, (h // 4, w // 4), mode="bilinear", align_corners=False)
        x = self.dec_b(self.dec_a(torch.cat([x, self.low(low)], 1)))
        return F.interpolate(self.classifier(x), (h, w), mode="bilinear", align_corners=False)


def lenet5(classes=10, in_channels=1):
    return LeNet5(classes, in_channels)


def resnet20(classes=10, in_channels=1, width=16, blocks=3):
    return ResNet20(classes, in_channels, width, blocks)


def unet(classes=3, in_channels=16, width=16, depth=4):
    return UNet(classes, in_channels, width, depth)


def deeplabv3plus(classes=3, in_channels=16, width=16, depth=4, rates=(6, 12, 18)):
    return DeepLabV3Plus(classes, in_channels, width, depth, tuple(rates))


def build(name, classes, in_channels, **knobs):
    """A peer by squall's model name (model.name) with its knobs (width, depth, rates)."""
    makers = {"lenet5": lenet5, "resnet20": resnet20, "unet": unet, "deeplabv3plus": deeplabv3plus}
    if name not in makers:
        raise ValueError(f"no PyTorch peer for model '{name}' (peers: {', '.join(makers)})")
    if name == "resnet20" and "depth" in knobs:  # squall's depth of resnet20 is its blocks per stage
        knobs["blocks"] = knobs.pop("depth")
    return makers[name](classes=classes, in_channels=in_channels, **knobs)


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())
