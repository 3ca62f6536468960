"""gradient, gradient × input, guided backprop and deconvnet against closed forms and a hand
computation on a net small enough to do on paper."""
import numpy as np
import pytest

import saliency_kit as sk

B = 3


def test_gradient_is_w(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient", [[0, 3]] * B)
    np.testing.assert_allclose(expl.attributions, np.broadcast_to(w[[0, 3]], (B, 2, 6, 5, 2)), atol=1e-6)
    np.testing.assert_allclose(expl.maps, np.abs(expl.attributions).max(-1))


def test_gradient_x_input_is_w_times_x(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient_x_input", 2)
    np.testing.assert_allclose(expl.attributions[:, 0], x * w[2], atol=1e-6)
    np.testing.assert_allclose(expl.maps[:, 0], (x * w[2]).sum(-1), atol=1e-5)


@pytest.mark.filterwarnings("ignore:guided_backprop.*all zero")  # input 2: every active unit has v < 0
def test_guided_and_deconv_by_hand(two_layer):
    model, x, W, v = two_layer
    active = (x @ W > 0).astype("float32")  # [B, 4]
    plain = (active * v) @ W.T
    guided = (active * v * (v > 0)) @ W.T
    deconv = np.tile(np.maximum(v, 0) @ W.T, (len(x), 1))
    np.testing.assert_allclose(sk.explain(model, x, "gradient", 0).attributions[:, 0], plain, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "guided_backprop", 0).attributions[:, 0], guided, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "deconvnet", 0).attributions[:, 0], deconv, atol=1e-6)
    assert not np.allclose(plain, guided) and not np.allclose(guided, deconv)
    np.testing.assert_allclose(sk.jacobian(model, x, rule="guided")[:, 0], guided, atol=1e-6)
    # and the plain gradient is still plain afterwards
    np.testing.assert_allclose(sk.jacobian(model, x)[:, 0], plain, atol=1e-6)
