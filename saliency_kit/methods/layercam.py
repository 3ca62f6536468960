"""LayerCAM (Jiang et al., IEEE TIP 2021).

Grad-CAM with one weight per *position* rather than per channel: each activation is weighted by
the positive part of its own gradient,

    L^k = up( relu( Σ_c relu(∂s_k/∂A_c) ⊙ A_c ) )

so the map keeps the layer's own resolution of detail, and works on early layers where a
channel-averaged gradient blurs away. ``relu=False`` keeps the map's sign (the outer relu).
``up`` is bilinear resizing to the input's ``H×W``, as Grad-CAM here. K classes share one forward
pass. Attributions are the maps ``[B, K, H, W]``.

Anchor: tf-keras-vis ``Layercam``, which upsamples with ``scipy.ndimage.zoom(order=1)``
(corner-aligned; here half-pixel, as ``tf.image.resize`` and Grad-CAM) and normalises each map
to [0, 1] (here it is left as computed). On a layer of the input's own size the unnormalised
maps agree.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from .. import engine
from . import cam
from ._base import Method, Request, Result, register

DEFAULTS = {"layer": None, "relu": True}


def _build_layercam_kernel(view, layer, relu, n, group, shape, dtype):
    height, width = shape[0], shape[1]

    def kernel(x, targets):
        engine._traced()
        with tf.GradientTape(persistent=group > 1, watch_accessed_variables=False) as tape:
            tape.watch(x)
            values, activations = view(x, tap=layer)
            scores = tf.gather(values, targets, batch_dims=1)
        if len(activations.shape) != 4:
            raise ValueError(
                f"layer {layer!r} has a {len(activations.shape)}-D output {tuple(activations.shape)}; "
                "LayerCAM needs a 4-D [batch, height, width, channels] layer."
            )
        if activations.dtype == scores.dtype or group == 1:
            g = engine._differentiate(tape, scores, activations, vectorise=engine._vectorise_classes(view.model))
        else:  # mixed precision: batch_jacobian's loop cannot hold float16 gradients of float32 scores
            pick = [tf.broadcast_to(tf.one_hot(k, group, dtype=scores.dtype), [n, group]) for k in range(group)]
            g = tf.stack([tape.gradient(scores, activations, output_gradients=p) for p in pick], axis=1)
        g, activations = tf.cast(g, tf.float32), tf.cast(activations, tf.float32)  # mixed precision
        maps = tf.reduce_sum(tf.nn.relu(g) * activations[:, None], axis=-1)  # [n, K, h, w]
        if relu:
            maps = tf.nn.relu(maps)
        h, w = maps.shape[2], maps.shape[3]
        flat = tf.reshape(maps, [n * group, h, w, 1])
        if (h, w) != (height, width):
            flat = tf.image.resize(flat, (height, width), method="bilinear")
        return tf.reshape(flat, [n, group, height, width]), scores

    signature = [tf.TensorSpec([n, *shape], dtype), tf.TensorSpec([n, group], tf.int32)]
    return tf.function(kernel, input_signature=signature)


def compute(request: Request, **options) -> Result:
    cam.check(request, **options)
    layer = cam._layer(request, options["layer"])
    relu = bool(options["relu"])
    inputs, targets = request.inputs, request.targets
    view = engine.score_view(request.model, request.score, request.score_fn)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    group = min(K, request.batch_size)
    n = engine._bucket(B, max(1, request.batch_size // group))
    key = ("layercam", engine._view_key(request.score, request.score_fn, None), layer, relu, shape, dtype.name, n, group)
    kernel = engine._compiled(
        request.model, key, lambda: _build_layercam_kernel(view, layer, relu, n, group, shape, dtype)
    )
    maps = np.zeros((B, K, *shape[:2]), np.float32)
    scores = np.zeros((B, K), np.float32)
    for start in range(0, B, n):
        stop = min(start + n, B)
        x = engine._pad(inputs[start:stop], n)
        for k0, k1, columns in engine._class_groups(targets[start:stop], group):
            engine._stats["calls"] += 1
            m, s = kernel(x, engine._pad(columns, n).astype(np.int32))
            maps[start:stop, k0:k1] = np.asarray(m, np.float32)[: stop - start, : k1 - k0]
            scores[start:stop, k0:k1] = np.asarray(s, np.float32)[: stop - start, : k1 - k0]
    return Result(maps, maps, scores, {**options, "layer": layer, "relu": relu}, layer=layer)


register(
    Method(
        "layercam",
        "LayerCAM (Jiang et al. 2021): activations × their positive gradients, summed over channels; "
        "works on early layers; the map is the CAM itself",
        compute,
        defaults=dict(DEFAULTS),
        cam=True,
        warn_zero=False,
        check=cam.check,
    )
)
