"""A PyTorch twin of ``keras.applications.ResNet50`` (same weights, same logits) and Zennit's LRP on it:
the LRP peer of ``scripts/bench_engine.py --peers`` (``scripts/bench_peers.py``), cross-framework.

``torch_twin(model)`` walks the Keras model's layers by name (``conv1_conv``, ``conv1_bn``,
``conv2_block1_0_conv``, …, ``predictions``) and copies their weights. Keras' ResNet50 is v1: the
stride of a stage's first block is on its first 1×1 convolution and on the 1×1 shortcut; ``conv1``
is ``ZeroPadding2D(3)`` then a 7×7/2 valid convolution, ``pool1`` ``ZeroPadding2D(1)`` then a
3×3/2 max pooling. The twin is laid out the way Zennit's canonizers and composites expect it:

* every convolution is in an ``nn.Sequential(conv, bn)`` with its BatchNorm, so
  ``SequentialMergeBatchNorm`` merges the BatchNorm into the convolution (as our rewrite does);
* every ReLU is an ``nn.ReLU`` module of its own (``Pass`` in Zennit's composites);
* the residual addition is ``zennit.layer.Sum`` over the stacked summands, as Zennit's
  ``ResNetCanonizer`` rewrites torchvision's blocks (``Norm`` in its composites: relevance split in
  proportion to the summands, as our rewrite splits it at ``Add``, but with ±1e-6 in the
  denominator where ours divides exactly: see ``zennit_lrp(aligned=True)``);
* the global average pooling is ``nn.AdaptiveAvgPool2d`` (``Norm``, the ε-rule our composites give
  average pooling); the max pooling has no rule on either side (its gradient: the winner's).

``zennit_lrp(twin, x, classes, composite)`` takes and returns channels-last arrays, as Keras does.
``python scripts/zennit_twin.py [--size 64]`` checks the twin's logits and Zennit's relevance
against ours on random weights.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import torch
from bench_peers import use_peer_installs
from torch import nn

__all__ = ["torch_twin", "zennit_lrp"]

torch.set_num_threads(2)
use_peer_installs()  # Zennit is installed apart from site-packages (see bench_peers.PEERS)


def _import_zennit() -> None:
    """Import Zennit without torchvision. Zennit's package imports its torchvision canonizers, which
    read two block classes of ``torchvision.models.resnet``; torchvision's wheels on PyPI are built
    against CUDA torch and do not load beside the CPU build installed here. Where torchvision is
    missing, those two names are given as placeholder classes that no module is an instance of (the
    torchvision canonizers then match nothing; the twin has its own ``Sum``), and the placeholders are
    taken out of ``sys.modules`` again."""
    if "zennit" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        import zennit  # noqa: F401

        return
    names = ("torchvision", "torchvision.models", "torchvision.models.resnet")
    stubs = {name: types.ModuleType(name) for name in names}
    stubs["torchvision.models.resnet"].Bottleneck = type("Bottleneck", (nn.Module,), {})
    stubs["torchvision.models.resnet"].BasicBlock = type("BasicBlock", (nn.Module,), {})
    sys.modules.update(stubs)
    try:
        import zennit  # noqa: F401
    finally:
        for name in names:
            sys.modules.pop(name, None)


_import_zennit()

from zennit.attribution import Gradient  # noqa: E402
from zennit.canonizers import SequentialMergeBatchNorm  # noqa: E402
from zennit.composites import EpsilonGammaBox, EpsilonPlusFlat, LayerMapComposite, layer_map_base  # noqa: E402
from zennit.layer import Sum  # noqa: E402
from zennit.rules import Epsilon, Norm  # noqa: E402
from zennit.types import Convolution  # noqa: E402


def _conv(layer) -> nn.Conv2d:
    """A ``nn.Conv2d`` with the weights of the Keras ``Conv2D`` ``layer`` (kernel
    ``[kh, kw, in, out]`` → ``[out, in, kh, kw]``); ``'same'`` only with stride 1 and odd kernels."""
    kernel, *bias = layer.get_weights()
    kh, kw, cin, cout = kernel.shape
    if layer.padding == "same":
        if tuple(layer.strides) != (1, 1) or kh % 2 == 0 or kw % 2 == 0:
            raise ValueError(f"{layer.name}: 'same' padding is copied for stride 1 and odd kernels only.")
        padding = (kh // 2, kw // 2)
    else:
        padding = (0, 0)
    conv = nn.Conv2d(cin, cout, (kh, kw), stride=tuple(layer.strides), padding=padding, bias=bool(bias))
    conv.weight.data = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))
    if bias:
        conv.bias.data = torch.from_numpy(np.asarray(bias[0]))
    return conv


def _bn(layer) -> nn.BatchNorm2d:
    """A ``nn.BatchNorm2d`` (inference) with the Keras ``BatchNormalization`` ``layer``'s
    γ, β, moving mean and variance and ε."""
    gamma, beta, mean, variance = (np.asarray(w) for w in layer.get_weights())
    bn = nn.BatchNorm2d(len(gamma), eps=float(layer.epsilon))
    bn.weight.data, bn.bias.data = torch.from_numpy(gamma), torch.from_numpy(beta)
    bn.running_mean.data, bn.running_var.data = torch.from_numpy(mean), torch.from_numpy(variance)
    return bn


def _conv_bn(model, name: str) -> nn.Sequential:
    return nn.Sequential(_conv(model.get_layer(f"{name}_conv")), _bn(model.get_layer(f"{name}_bn")))


class Bottleneck(nn.Module):
    """One residual block ``convS_blockB``: 1×1, 3×3, 1×1 convolutions with BatchNorm, plus the
    identity or the 1×1 shortcut ``_0``, summed with ``Sum``, then ReLU."""

    def __init__(self, model, prefix: str):
        super().__init__()
        names = {layer.name for layer in model.layers}
        self.conv1, self.relu1 = _conv_bn(model, f"{prefix}_1"), nn.ReLU()
        self.conv2, self.relu2 = _conv_bn(model, f"{prefix}_2"), nn.ReLU()
        self.conv3 = _conv_bn(model, f"{prefix}_3")
        self.shortcut = _conv_bn(model, f"{prefix}_0") if f"{prefix}_0_conv" in names else None
        self.sum, self.relu3 = Sum(), nn.ReLU()

    def forward(self, x):
        out = self.conv3(self.relu2(self.conv2(self.relu1(self.conv1(x)))))
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu3(self.sum(torch.stack([identity, out], dim=-1)))


class ResNetTwin(nn.Module):
    """Keras' ResNet50 (v1) in PyTorch, NCHW; ``forward`` returns the logits."""

    def __init__(self, model):
        super().__init__()
        pad1, pool1 = model.get_layer("conv1_pad"), model.get_layer("pool1_pool")
        self.pad1 = nn.ZeroPad2d(_padding(pad1.padding))
        self.conv1, self.relu1 = _conv_bn(model, "conv1"), nn.ReLU()
        self.pad_pool = nn.ZeroPad2d(_padding(model.get_layer("pool1_pad").padding))
        self.pool = nn.MaxPool2d(tuple(pool1.pool_size), stride=tuple(pool1.strides))
        names = {layer.name for layer in model.layers}
        blocks = []
        for stage in range(2, 6):
            block = 1
            while f"conv{stage}_block{block}_1_conv" in names:
                blocks.append(Bottleneck(model, f"conv{stage}_block{block}"))
                block += 1
        self.blocks = nn.Sequential(*blocks)
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
        kernel, bias = model.get_layer("predictions").get_weights()
        self.fc = nn.Linear(*kernel.shape)
        self.fc.weight.data = torch.from_numpy(np.ascontiguousarray(kernel.T))
        self.fc.bias.data = torch.from_numpy(np.asarray(bias))

    def forward(self, x):
        x = self.pool(self.pad_pool(self.relu1(self.conv1(self.pad1(x)))))
        return self.fc(self.flatten(self.avgpool(self.blocks(x))))


def _padding(padding) -> tuple[int, int, int, int]:
    """Keras ``((top, bottom), (left, right))`` → ``nn.ZeroPad2d``'s ``(left, right, top, bottom)``."""
    (top, bottom), (left, right) = padding
    return (left, right, top, bottom)


def torch_twin(model, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The PyTorch twin (inference mode, in ``dtype``) of ``keras.applications.ResNet50(...,
    classifier_activation=None)`` ``model``, with its weights."""
    if model.get_layer("predictions").activation.__name__ != "linear":
        raise ValueError("the twin computes logits: give the model built with classifier_activation=None.")
    return ResNetTwin(model).eval().to(dtype)


class _ExactMergeBatchNorm(SequentialMergeBatchNorm):
    """``SequentialMergeBatchNorm`` whose merged BatchNorm is exactly the identity, as ours is: Zennit
    0.5.1 leaves the BatchNorm's ε in place, so its "identity" computes ``x / sqrt(1 + ε)``; here
    variance and ε are both 0.5 (their sum is exactly 1). Undone with the merge."""

    def register(self, linears, batch_norm):
        self.eps = batch_norm.eps
        super().register(linears, batch_norm)
        batch_norm.running_var.data = torch.full_like(batch_norm.running_var.data, 0.5)
        batch_norm.eps = 0.5

    def remove(self):
        super().remove()
        self.batch_norm.eps = self.eps


def _exact_division(denominator):
    """A stabiliser that divides exactly (``1`` only where the denominator is 0, where the relevance
    is 0): the residual sum's split as ours makes it, ``R_a = a / (a + b) · R``."""
    return torch.where(denominator == 0, torch.ones_like(denominator), denominator)


def _composite(name: str, low=None, high=None, aligned: bool = False):
    canonizers = [_ExactMergeBatchNorm() if aligned else SequentialMergeBatchNorm()]
    layer_map = [(Sum, Norm(stabilizer=_exact_division))] if aligned else []
    if name == "epsilon_plus_flat":
        return EpsilonPlusFlat(layer_map=layer_map, canonizers=canonizers)
    if name == "epsilon_gamma_box":
        return EpsilonGammaBox(low=low, high=high, layer_map=layer_map, canonizers=canonizers)
    if name == "epsilon":
        rule = Epsilon()
        layer_map = [*layer_map, *layer_map_base(), (Convolution, rule), (nn.Linear, rule)]
        return LayerMapComposite(layer_map, canonizers=canonizers)
    raise ValueError(f"no Zennit composite here for {name!r}: epsilon_plus_flat, epsilon_gamma_box or epsilon.")


def zennit_lrp(
    twin: nn.Module, x_nhwc: np.ndarray, classes, composite_name: str, *, low=None, high=None, aligned: bool = False
) -> np.ndarray:
    """Zennit's LRP relevance ``[B, H, W, C]`` at the input of ``twin`` for ``classes[b]`` of each
    input ``x_nhwc[b]``, with the composite of that name (``epsilon_plus_flat``, ``epsilon_gamma_box``
    with ``low``/``high``, or ``epsilon``: ε on every linear layer), BatchNorms merged by
    ``SequentialMergeBatchNorm``. The relevance at the top is the class's logit (as ours: ``R = s``).

    ``aligned=True`` takes ours' two conventions where Zennit's differ: the merged BatchNorm exactly
    the identity, and the residual ``Sum`` split without a stabiliser (Zennit's composites give it
    ``Norm``, with ±1e-6 in the denominator)."""
    dtype = next(twin.parameters()).dtype
    x = torch.from_numpy(np.ascontiguousarray(np.asarray(x_nhwc).transpose(0, 3, 1, 2))).to(dtype)
    x.requires_grad_(True)
    index = torch.as_tensor(np.asarray(classes, np.int64)).reshape(-1, 1)

    def top(output):
        output = output.detach()
        return torch.zeros_like(output).scatter(1, index, output.gather(1, index))

    composite = _composite(composite_name, low, high, aligned)
    with Gradient(model=twin, composite=composite, attr_output=top) as attributor:
        _, relevance = attributor(x)
    return relevance.detach().permute(0, 2, 3, 1).numpy()


def main() -> None:
    """Check the twin on a ResNet50 with random weights and BatchNorm statistics (a non-trivial merge):
    its logits against Keras', and Zennit's relevance against ours for each composite, as Zennit
    computes it and ``aligned``."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, help="input size (default 64)")
    args = parser.parse_args()

    import keras

    import saliency_kit as sk

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(args.size, args.size, 3), classifier_activation=None)
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, variance = layer.get_weights()
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, gamma.shape),
                    rng.normal(0, 0.1, beta.shape),
                    rng.normal(0, 0.1, mean.shape),
                    rng.uniform(0.5, 1.5, variance.shape),
                ]
            )
        elif isinstance(layer, keras.layers.Conv2D):
            kernel, bias = layer.get_weights()
            layer.set_weights([kernel, rng.normal(0, 0.05, bias.shape)])
    x = rng.uniform(-1, 1, (2, args.size, args.size, 3)).astype(np.float32)
    classes = [3, 7]
    targets = np.array(classes)[:, None]
    twin = torch_twin(model)
    with torch.no_grad():
        theirs = twin(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
    ours = np.asarray(model(x, training=False))
    print(f"logits: rel. diff {np.abs(ours - theirs).max() / np.abs(ours).max():.1e}")
    for name, bounds in [("epsilon_plus_flat", {}), ("epsilon_gamma_box", {"low": -1.0, "high": 1.0}), ("epsilon", {})]:
        ours = np.asarray(sk.explain(model, x, "lrp", targets, composite=name, **bounds).attributions)
        row = []
        for aligned in (False, True):
            theirs = zennit_lrp(twin, x, classes, name, aligned=aligned, **bounds)
            row.append(f"{np.abs(ours[:, 0] - theirs).max() / np.abs(theirs).max():.1e}")
        print(f"lrp {name}: rel. diff {row[0]} (Zennit's conventions), {row[1]} (aligned)")


if __name__ == "__main__":
    main()
