"""The public surface: every name of API.md resolves from `import saliency_kit as sk`."""
import importlib
import subprocess
import sys

import pytest

import saliency_kit as sk

API_NAMES = [
    "rewrite", "ModifiedBackprop", "GuidedBackprop", "DeconvBackprop", "explain", "jacobian",
    "Explanation", "load_model", "list_models", "ModelSpec", "load_images",
    "gradients.scale", "gradients.clip", "gradients.clip_norm", "gradients.straight_through",
    "gradients.numpy_function", "layers.GradientScale", "layers.GradientClip", "layers.GradientClipNorm",
    "render.heatmap", "render.overlay", "render.grid",
    "evaluate.randomization_test", "evaluate.deletion_insertion", "evaluate.pointing_game",
    "methods.register", "methods.get", "methods.names", "methods.Option",
]


@pytest.mark.parametrize("name", API_NAMES)
def test_public_name_resolves(name):
    obj = sk
    for part in name.split("."):
        obj = getattr(obj, part)
    assert callable(obj)


# The names API.md promises at the top level (sk.X), written out here rather than read from the
# package, so that a name dropped from __all__ (or one added without the contract) fails.
EXPECTED_ALL = {
    "ModifiedBackprop", "GuidedBackprop", "DeconvBackprop", "rewrite", "explain", "jacobian",
    "Explanation", "load_model", "list_models", "ModelSpec", "load_images",
    "gradients", "layers", "render", "evaluate", "methods", "__version__",
}


def test_all_is_the_contract_and_unknown_names_raise():
    assert set(sk.__all__) == EXPECTED_ALL
    assert set(dir(sk)) == EXPECTED_ALL
    for name in sk.__all__:
        assert getattr(sk, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sk.nope


def test_import_is_lazy():
    """`import saliency_kit` alone must not import TensorFlow (the CLI's --help stays quick)."""
    code = "import sys, saliency_kit; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
