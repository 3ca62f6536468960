"""The public surface: every documented public name resolves from `import saliency_kit as sk`."""

import subprocess
import sys

import pytest

import saliency_kit as sk

API_NAMES = [
    "rewrite",
    "ModifiedBackprop",
    "GuidedBackprop",
    "DeconvBackprop",
    "explain",
    "explain_generation",
    "jacobian",
    "Explanation",
    "load_model",
    "list_models",
    "ModelSpec",
    "load_images",
    "targets.generated",
    "targets.contrast",
    "render.generation_html",
    "render.generation_figure",
    "gradients.scale",
    "gradients.clip",
    "gradients.clip_norm",
    "gradients.straight_through",
    "gradients.numpy_function",
    "layers.GradientScale",
    "layers.GradientClip",
    "layers.GradientClipNorm",
    "render.heatmap",
    "render.overlay",
    "render.grid",
    "render.Style",
    "evaluate.randomization_test",
    "evaluate.deletion_insertion",
    "evaluate.pointing_game",
    "methods.register",
    "methods.get",
    "methods.names",
    "methods.Option",
    "rules.Epsilon",
    "rules.Gamma",
    "rules.ZPlus",
    "rules.AlphaBeta",
    "rules.Flat",
    "rules.WSquare",
    "rules.ZBox",
    "rules.Pass",
    "composites.Composite",
    "composites.EpsilonPlus",
    "composites.EpsilonPlusFlat",
    "composites.EpsilonGammaBox",
    "composites.EpsilonAlpha2Beta1",
    "composites.EpsilonAlpha2Beta1Flat",
    "callbacks.SaliencyCallback",
    "render.show",
    "gallery.write_gallery",
]


@pytest.mark.parametrize("name", API_NAMES)
def test_public_name_resolves(name):
    obj = sk
    for part in name.split("."):
        obj = getattr(obj, part)
    assert callable(obj)


# The names promised at the top level (sk.X), written out here rather than read from the
# package, so that a name dropped from __all__ (or one added without the contract) fails.
EXPECTED_ALL = {
    "ModifiedBackprop",
    "GuidedBackprop",
    "DeconvBackprop",
    "rewrite",
    "explain",
    "explain_generation",
    "jacobian",
    "Explanation",
    "load_model",
    "list_models",
    "ModelSpec",
    "load_images",
    "gradients",
    "layers",
    "render",
    "evaluate",
    "methods",
    "rules",
    "composites",
    "callbacks",
    "gallery",
    "targets",
    "backend",
    "__version__",
}


def test_all_is_the_contract_and_unknown_names_raise():
    assert set(sk.__all__) == EXPECTED_ALL
    assert set(dir(sk)) == EXPECTED_ALL
    for name in sk.__all__:
        assert getattr(sk, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = sk.nope


def test_import_is_lazy():
    """`import saliency_kit` alone must not import TensorFlow (the CLI's --help stays quick)."""
    code = "import sys, saliency_kit; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_another_keras_backend_is_one_clear_error():
    """Another Keras backend is refused with a message naming it, not an ImportError
    from deep inside; the declarations (no TensorFlow needed) still load."""
    code = (
        "import saliency_kit as sk\n"
        "print(len(sk.methods.names()) > 10)\n"
        "try:\n    sk.explain\nexcept RuntimeError as error:\n    print(type(error).__name__, error)\n"
    )
    env = {**__import__("os").environ, "KERAS_BACKEND": "numpy"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "True"
    assert lines[1].startswith("BackendError") and "'numpy'" in lines[1] and "KERAS_BACKEND=torch" in lines[1]
