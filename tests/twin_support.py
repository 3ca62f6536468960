"""Hand-built twins shared by the tests of model kinds and input kinds: activations whose forward
pass and backward rule (plain, guided, deconv) are written here with plain TensorFlow ops, not
the library's, and a Dense layer applied from its weights."""

import tensorflow as tf

RELU, RELU6 = ("relu",), ("clip", 6.0)


def leaky(alpha):
    return ("leaky", float(alpha))


def clip(top):
    return ("clip", float(top))


def general(negative_slope=0.0, max_value=None, threshold=0.0):
    """keras.activations.relu with these parameters."""
    return ("general", float(negative_slope), max_value, float(threshold))


def _forward(t, family):
    if family[0] == "general":
        _, slope, top, threshold = family
        y = tf.where(t > threshold, t, tf.cast(slope, t.dtype) * (t - threshold))
        return y if top is None else tf.minimum(y, tf.cast(top, t.dtype))
    if family[0] == "relu":
        return tf.maximum(t, tf.zeros_like(t))
    if family[0] == "clip":
        return tf.minimum(tf.maximum(t, tf.zeros_like(t)), tf.cast(family[1], t.dtype))
    return tf.where(t > 0, t, tf.cast(family[1], t.dtype) * t)


def _derivative(t, family):
    one, zero = tf.ones_like(t), tf.zeros_like(t)
    if family[0] == "general":
        _, slope, top, threshold = family
        inside = t > threshold if top is None else (t > threshold) & (t < top)
        return tf.where(inside, one, tf.where(t < threshold, tf.cast(slope, t.dtype) * one, zero))
    if family[0] == "relu":
        return tf.where(t > 0, one, zero)
    if family[0] == "clip":
        return tf.where((t > 0) & (t < tf.cast(family[1], t.dtype)), one, zero)
    return tf.where(t > 0, one, tf.cast(family[1], t.dtype) * one)


def twin_activation(rule):
    """``act(t, family)`` computing the activation with the backward rule ``rule``."""

    def act(t, family):
        @tf.custom_gradient
        def f(t):
            def grad(dy):
                if rule == "plain":
                    return dy * _derivative(t, family)
                if rule == "guided":
                    return tf.where(dy > 0, dy * _derivative(t, family), tf.zeros_like(dy))
                return tf.maximum(dy, tf.zeros_like(dy))  # deconv

            return _forward(t, family), grad

        return f(t)

    return act


def dense(layer, t):
    kernel, *bias = [tf.constant(w) for w in layer.get_weights()]
    t = tf.cast(t, kernel.dtype) @ kernel
    return t + bias[0] if bias else t


def image_and_metadata(seed, rows, rng):
    """``(model, x, twin)``: a model of an 8×8×3 image and 5 metadata values (``x``: ``rows`` of
    each drawn from ``rng``), and ``twin(row)``, a model of the image alone with that metadata row
    baked in as a constant read by the same layers (the two agree on every image)."""
    import keras

    keras.utils.set_random_seed(seed)
    image, meta = keras.Input((8, 8, 3), name="image"), keras.Input((5,), name="meta")
    conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")
    pool = keras.layers.GlobalAveragePooling2D(name="pool")
    meta_dense = keras.layers.Dense(4, activation="relu", name="meta_dense")
    head = keras.layers.Dense(3, name="head")
    model = keras.Model([image, meta], head(keras.layers.Concatenate()([pool(conv(image)), meta_dense(meta)])))
    x = [rng.random((rows, 8, 8, 3)).astype("float32"), rng.normal(size=(rows, 5)).astype("float32")]

    def twin(row):
        alone = keras.Input((8, 8, 3))
        constant = keras.layers.Lambda(
            lambda t, row=row: keras.ops.broadcast_to(keras.ops.convert_to_tensor(row), (keras.ops.shape(t)[0], 5))
        )(alone)
        return keras.Model(alone, head(keras.layers.Concatenate()([pool(conv(alone)), meta_dense(constant)])))

    return model, x, twin
