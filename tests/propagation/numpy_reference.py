"""NumPy references for relevance propagation, written independently of the library.

The LRP references work on a linear layer as a matrix ``W [I, J]`` (a convolution becomes its
matrix by explicit loops over positions, :func:`conv_matrix`). Each reference is decorated with the
rule configurations it checks (``@replicates(RULES, Epsilon, epsilon=1e-3)``, as Zennit's tests
do): ``RULES`` then holds ``(rule class, configuration, reference)`` triples, and one parametrised
test compares every pair. A new rule adds its reference here, decorated; nothing else.

:func:`numpy_deeplift` is the one DeepLIFT Rescale reference, for a chain of dense, ReLU and
max-pooling layers on 1-D inputs.
"""

from __future__ import annotations

import numpy as np

from saliency_kit.propagation.lrp_rules import AlphaBeta, Epsilon, Flat, Gamma, WSquare, ZBox, ZPlus

#: ``(rule class, configuration, reference)``; ``reference(x, W, b, R, S, **configuration)`` is the
#: input relevance of ``z = x @ W + b`` (``x [I]``, ``W [I, J]``) for output relevance ``R [J]``;
#: ``S`` the 0/1 structure of ``W`` (which inputs each output sees).
RULES: list[tuple[type, dict, object]] = []


def replicates(target: list, rule_class: type, **configuration):
    """Record that the decorated reference replicates ``rule_class(**configuration)``."""

    def decorate(reference):
        target.append((rule_class, configuration, reference))
        return reference

    return decorate


def stab(d, eps):
    return d + eps * np.where(d >= 0, 1.0, -1.0)


def pos(a):
    return np.maximum(a, 0)


def neg(a):
    return np.minimum(a, 0)


@replicates(RULES, Epsilon, epsilon=1e-3)
@replicates(RULES, Epsilon, epsilon=0.5)
def epsilon_rule(x, W, b, R, S, epsilon):
    z = x @ W + b
    return x * (W @ (R / stab(z, epsilon)))


@replicates(RULES, ZPlus)
def zplus_rule(x, W, b, R, S, stabilizer=1e-6):
    zp = pos(x) @ pos(W) + neg(x) @ neg(W) + pos(b)
    c = R / stab(zp, stabilizer)
    return pos(x) * (pos(W) @ c) + neg(x) * (neg(W) @ c)


@replicates(RULES, AlphaBeta, alpha=2.0, beta=1.0)
@replicates(RULES, AlphaBeta, alpha=1.0, beta=0.0)
def alpha_beta_rule(x, W, b, R, S, alpha, beta, stabilizer=1e-6):
    zp = pos(x) @ pos(W) + neg(x) @ neg(W) + pos(b)
    zn = pos(x) @ neg(W) + neg(x) @ pos(W) + neg(b)
    cp, cn = R / stab(zp, stabilizer), R / stab(zn, stabilizer)
    return alpha * (pos(x) * (pos(W) @ cp) + neg(x) * (neg(W) @ cp)) - beta * (
        pos(x) * (neg(W) @ cn) + neg(x) * (pos(W) @ cn)
    )


@replicates(RULES, Gamma, gamma=0.25)
@replicates(RULES, Gamma, gamma=1.0)
def gamma_rule(x, W, b, R, S, gamma, stabilizer=1e-6):
    up, down = W + gamma * pos(W), W + gamma * neg(W)
    z = x @ W + b
    d_up = pos(x) @ up + neg(x) @ down + b + gamma * pos(b)
    d_down = pos(x) @ down + neg(x) @ up + b + gamma * neg(b)
    c_up = np.where(z > 0, R / stab(d_up, stabilizer), 0)
    c_down = np.where(z < 0, R / stab(d_down, stabilizer), 0)
    return pos(x) * (up @ c_up) + neg(x) * (down @ c_up) + pos(x) * (down @ c_down) + neg(x) * (up @ c_down)


@replicates(RULES, Flat)
def flat_rule(x, W, b, R, S, stabilizer=1e-6):
    return S @ (R / stab(S.sum(0), stabilizer))


@replicates(RULES, WSquare)
def wsquare_rule(x, W, b, R, S, stabilizer=1e-6):
    return (W**2) @ (R / stab((W**2).sum(0) + b**2, stabilizer))


@replicates(RULES, ZBox, low=-1.0, high=1.0)
def zbox_rule(x, W, b, R, S, low, high, stabilizer=1e-6):
    low, high = np.broadcast_to(low, x.shape), np.broadcast_to(high, x.shape)
    d = x @ W + b - (low @ pos(W) + pos(b)) - (high @ neg(W) + neg(b))
    c = R / stab(d, stabilizer)
    return x * (W @ c) - low * (pos(W) @ c) - high * (neg(W) @ c)


def conv_matrix(kernel, height, width):
    """The matrix of a 'valid', stride-1 2-D convolution on ``[height, width, cin]`` inputs,
    flattened row-major as Keras flattens ``[H, W, C]``; also its 0/1 structure."""
    kh, kw, cin, cout = kernel.shape
    oh, ow = height - kh + 1, width - kw + 1
    W = np.zeros((height * width * cin, oh * ow * cout))
    S = np.zeros_like(W)
    for i in range(oh):
        for j in range(ow):
            for o in range(cout):
                col = (i * ow + j) * cout + o
                for di in range(kh):
                    for dj in range(kw):
                        for c in range(cin):
                            row = ((i + di) * width + (j + dj)) * cin + c
                            W[row, col] = kernel[di, dj, c, o]
                            S[row, col] = 1.0
    return W, S


def numpy_deeplift(layers, x, x0, column):
    """DeepLIFT Rescale attributions of output ``column`` by hand, for a list of
    ``("dense", W, b)`` / ``("relu",)`` / ``("maxpool", size)`` layers on 1-D inputs ``x`` with
    baseline ``x0``; max pooling by Captum's rule (the output difference split between the
    winner in ``x`` and the winner in ``x0``)."""
    acts, refs = [x], [x0]
    for layer in layers:
        a, r = acts[-1], refs[-1]
        if layer[0] == "dense":
            acts.append(a @ layer[1] + layer[2])
            refs.append(r @ layer[1] + layer[2])
        elif layer[0] == "relu":
            acts.append(np.maximum(a, 0))
            refs.append(np.maximum(r, 0))
        else:
            size = layer[1]
            acts.append(a.reshape(-1, size).max(1))
            refs.append(r.reshape(-1, size).max(1))
    m = np.zeros_like(acts[-1])
    m[column] = 1.0
    for i in range(len(layers) - 1, -1, -1):
        layer, a, r, y, y0 = layers[i], acts[i], refs[i], acts[i + 1], refs[i + 1]
        if layer[0] == "dense":
            m = layer[1] @ m
        elif layer[0] == "relu":
            d = a - r
            m = m * np.where(np.abs(d) > 1e-7, (y - y0) / np.where(d == 0, 1, d), (a > 0).astype(float))
        else:
            size = layer[1]
            top = np.maximum(y, y0)
            shares = np.zeros_like(a)
            for w in range(len(y)):
                shares[w * size + np.argmax(a[w * size : (w + 1) * size])] += m[w] * (top[w] - y0[w])
                shares[w * size + np.argmax(r[w * size : (w + 1) * size])] += m[w] * (y[w] - top[w])
            d = a - r
            m = np.where(np.abs(d) > 1e-7, shares / np.where(d == 0, 1, d), 0.0)
    return (x - x0) * m
