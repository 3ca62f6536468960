"""The composite registry: names come from the decorator only, reading them imports no TensorFlow,
and a composite registered here (a tiny test-only one) is usable by name at once."""

from __future__ import annotations

import subprocess
import sys

import keras
import numpy as np
import pytest
from propagation.numpy_reference import epsilon_rule, flat_rule

import saliency_kit as sk
from saliency_kit.methods import get
from saliency_kit.propagation import composites
from saliency_kit.propagation.lrp_rules import Epsilon, Flat


@composites.register("test_flat_then_epsilon")
class FlatThenEpsilon(composites.Composite):
    """A composite of this test only: flat for the first layer, ε for every other Dense and Conv2D
    (registered, it also joins the registry-parametrised tests of ``test_lrp.py``)."""

    def __init__(self, epsilon: float = 0.01, stabilizer: float = 1e-6):
        super().__init__(
            [("first", Flat(stabilizer)), ((keras.layers.Dense, keras.layers.Conv2D), Epsilon(epsilon))],
            pooling_stabilizer=stabilizer,
        )


def test_reading_the_names_imports_no_tensorflow():
    code = (
        "import sys; from saliency_kit.propagation import composites; names = composites.names(); "
        "assert 'epsilon_plus_flat' in names, names; "
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_lrp_method_offers_the_registered_names():
    (composite,) = [option for option in get("lrp").options if option.name == "composite"]
    # the choices are read from the registry when the method is declared (this module's composite
    # is among them only if it was registered first)
    assert list(composite.choices) == composites.names()[: len(composite.choices)]
    assert set(composites.names()) - set(composite.choices) <= {"test_flat_then_epsilon"}
    assert get("lrp").signed and get("lrp").reduce == "sum"


def test_a_name_registered_twice_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        composites.register("epsilon", lambda: None)


def test_a_registered_composite_is_usable_by_name():
    rng = np.random.default_rng(0)
    W1, W2 = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    inputs = keras.Input((4,))
    model = keras.Model(
        inputs, keras.layers.Dense(2, use_bias=False)(keras.layers.Dense(3, use_bias=False, activation="relu")(inputs))
    )
    model.layers[1].set_weights([W1.astype("float32")])
    model.layers[2].set_weights([W2.astype("float32")])
    x = rng.uniform(-1, 1, size=(3, 4)).astype("float32")
    by_name = composites.get("test_flat_then_epsilon", epsilon=0.01)
    assert isinstance(by_name, FlatThenEpsilon)
    got = sk.explain(model, x, "lrp", targets=[[1]] * 3, composite=by_name).attributions[:, 0]
    for row in range(3):
        hidden = np.maximum(x[row] @ W1, 0)
        R2 = np.array([0.0, hidden @ W2[:, 1]])
        R1 = epsilon_rule(hidden, W2, np.zeros(2), R2, None, epsilon=0.01)
        want = flat_rule(x[row], W1, np.zeros(3), R1, np.ones_like(W1))
        np.testing.assert_allclose(got[row], want, rtol=1e-4, atol=1e-5)
    assert isinstance(sk.rewrite(model, by_name).rewritten_layers[model.layers[1].name], Flat)
