"""What each built-in method is checked against: the one record of it, read by the documentation's
method pages (``scripts/docs_pages.py``) and checked by ``tests/docs/test_reference.py`` (a key for
every built-in method, and every named test file exists and names the method).

``CHECKED_AGAINST[name] = (what the tests compare the method with, the test files that do)``;
the measured quality on the shipped model is README's "Does it work?" table, which the pages quote.
"""

from __future__ import annotations

_GRADIENT = "tests/methods/test_gradient.py"
_CAM = "tests/methods/test_gradcam.py"
_SMOOTH = "tests/methods/test_smoothgrad_variants.py"
_LRP = "tests/methods/test_lrp_deeplift.py"

CHECKED_AGAINST: dict[str, tuple[str, tuple[str, ...]]] = {
    "gradient": ("closed forms and a hand computation on a net small enough to do on paper", (_GRADIENT,)),
    "gradient_x_input": ("closed forms and a hand computation on a net small enough to do on paper", (_GRADIENT,)),
    "guided_backprop": ("closed forms and a hand computation on a net small enough to do on paper", (_GRADIENT,)),
    "deconvnet": ("closed forms and a hand computation on a net small enough to do on paper", (_GRADIENT,)),
    "integrated_gradients": (
        "closed forms on a linear model, every quadrature rule, and completeness on a CNN whose score at "
        "the baseline is not zero",
        ("tests/methods/test_integrated_gradients.py",),
    ),
    "smoothgrad": (
        "closed forms on a linear model, and an independent implementation fed the same noise (NumPy "
        "gradients of a tanh network, a plain GradientTape loop on a ReLU CNN)",
        ("tests/methods/test_smoothgrad.py", _SMOOTH),
    ),
    "squaregrad": (
        "an independent implementation fed the same noise (NumPy gradients of a tanh network, a plain "
        "GradientTape loop on a ReLU CNN), never smoothgrad itself",
        (_SMOOTH,),
    ),
    "vargrad": (
        "an independent implementation fed the same noise (NumPy gradients of a tanh network, a plain "
        "GradientTape loop on a ReLU CNN), never smoothgrad itself",
        (_SMOOTH,),
    ),
    "gradcam": ("a hand computation on a tiny CNN whose channel gradients are known in closed form", (_CAM,)),
    "gradcam_plus_plus": (
        "a hand computation on a tiny CNN whose channel gradients are known in closed form",
        (_CAM,),
    ),
    "guided_gradcam": ("a hand computation on a tiny CNN whose channel gradients are known in closed form", (_CAM,)),
    "occlusion": (
        "hand computations: on a linear model a window's drop is Σ w·(x − value)",
        ("tests/methods/test_occlusion.py",),
    ),
    "lrp": ("NumPy LRP rules written independently of the package", (_LRP, "tests/propagation/test_lrp.py")),
    "deeplift": ("the one NumPy DeepLIFT of every DeepLIFT test", (_LRP,)),
    "expected_gradients": (
        "a hand-written reference and its integrated-gradients limit",
        ("tests/methods/test_expected_gradients.py",),
    ),
    "blur_ig": ("PAIR's saliency.core.BlurIG and its own definition", ("tests/methods/test_blur_ig.py",)),
    "guided_ig": (
        "PAIR's saliency.core.GuidedIG and its integrated-gradients limit",
        ("tests/methods/test_guided_ig.py",),
    ),
    "xrai": (
        "PAIR's saliency.core.XRAI given the same segments and base attributions",
        ("tests/methods/test_xrai.py",),
    ),
    "scorecam": (
        "tf-keras-vis Scorecam and a hand-written reference",
        ("tests/methods/test_scorecam_layercam.py",),
    ),
    "layercam": (
        "tf-keras-vis Layercam and a hand-written reference",
        ("tests/methods/test_scorecam_layercam.py",),
    ),
    "rise": (
        "a hand-written reference, and a region-mean model whose region must rank first",
        ("tests/methods/test_rise.py",),
    ),
    "conductance": (
        "the quadrature written out in NumPy on a model split at the layer by hand, and Dhamdhere et al.'s integral",
        ("tests/test_inner_layers.py",),
    ),
    "attention_rollout": (
        "NumPy from the attention probabilities of a twin of a tiny vision transformer written from its weights",
        ("tests/methods/test_attention_methods.py",),
    ),
    "transformer_attribution": (
        "NumPy from the attention probabilities of a twin of a tiny vision transformer written from its "
        "weights, gradients by a GradientTape on the twin",
        ("tests/methods/test_attention_methods.py",),
    ),
}
