"""A PyTorch process imports neither TensorFlow nor JAX: the package's work on PyTorch (explaining
with plain, rule-based, noisy, CAM, LRP and DeepLIFT methods, a layer's attributions, attention
methods, generated text, the gradient tools, a metric, rendering, the training callback's TensorBoard
images) runs in a fresh process where both are absent (``sys.modules`` holds ``None`` for them, so
an import fails and a probe finds nothing, as when they are not installed). Run in its own process,
this does not depend on what Keras itself loads elsewhere in the suite."""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="runs in the PyTorch process: KERAS_BACKEND=torch pytest tests/backends"
)

WORK = textwrap.dedent(
    """
    import sys

    sys.modules["tensorflow"] = None  # as if not installed: importing it fails, finding it finds nothing
    sys.modules["jax"] = None
    import numpy as np
    import keras
    import saliency_kit as sk

    assert sk.backend() == "torch"
    image = keras.Input((16, 16, 3))
    conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(image)
    pooled = keras.layers.GlobalAveragePooling2D()(conv)
    model = keras.Model(image, keras.layers.Dense(3, activation="softmax")(pooled))
    x = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    for method, options in [
        ("gradient", {}),
        ("guided_backprop", {}),
        ("smoothgrad", {"samples": 2}),
        ("gradcam", {}),
        ("integrated_gradients", {"steps": 4}),
        ("rise", {"masks": 4}),
        ("lrp", {}),
        ("deeplift", {}),
    ]:
        explanation = sk.explain(model, x, method, targets=1, **options)
        assert np.isfinite(explanation.maps).all(), method
    sk.explain(model, x, "gradient", targets=0, attribute_to="conv")
    patches = keras.Input((16, 16, 3))
    tokens = keras.layers.Reshape((16, 48), name="tokens")(keras.layers.Conv2D(48, 4, strides=4)(patches))
    tokens = tokens + keras.layers.MultiHeadAttention(2, 8)(tokens, tokens)
    vit = keras.Model(patches, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(tokens)))
    for method in ("attention_rollout", "transformer_attribution", "lrp", "deeplift"):
        assert np.isfinite(sk.explain(vit, x, method, targets=1).maps).all(), method
    assert sk.explain(vit, x, "gradcam", targets=1, layer="tokens").maps.shape == (2, 1, 16, 16)
    sk.evaluate.completeness(model, x, "integrated_gradients", targets=0, steps=4)
    sk.render.grid(explanation)
    import tempfile

    with tempfile.TemporaryDirectory() as logs:
        watch = sk.callbacks.SaliencyCallback(x[:1], "gradient", log_dir=logs)
        model.compile("sgd", "sparse_categorical_crossentropy")
        model.fit(x, np.array([0, 1]), epochs=1, verbose=0, callbacks=[watch])
    assert float(keras.ops.convert_to_numpy(sk.gradients.scale(keras.ops.ones(2), 2.0))[0]) == 1.0
    ids = keras.Input((None,), dtype="int32")
    lm = keras.Model(ids, keras.layers.Dense(7)(keras.layers.Embedding(7, 4)(ids)))
    generated = sk.explain_generation(lm, np.array([1, 2, 3]), max_new_tokens=2, method="gradient")
    assert generated.maps.shape[:2] == (1, 2)
    sk.render.generation_html(generated)
    assert sys.modules["tensorflow"] is None and sys.modules["jax"] is None
    print("neither tensorflow nor jax")
    """
)


def test_a_torch_process_never_imports_tensorflow_or_jax():
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, "-c", WORK], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("neither tensorflow nor jax"), done.stderr[-3000:]
