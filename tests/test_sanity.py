"""`saliency sanity`: the randomisation figure and JSON, through the real command line."""
import json

import numpy as np
import pytest
from PIL import Image

from saliency_kit import sanity


def _fake_result(n_steps, mode="cascading"):
    rng = np.random.default_rng(0)
    steps = [
        {"layer": f"outer/layer{i}", "spearman_abs": 0.5, "spearman": 0.1, "ssim": float("nan"), "step": i + 1,
         "randomized": [f"outer/layer{j}" for j in range(i + 1)]}
        for i in range(n_steps)
    ]
    return {
        "maps": rng.random((n_steps + 1, 12, 12)),
        "layers": [s["layer"] for s in steps],
        "steps": steps,
        "target": 1,
        "score": 2.0,
        "mode": mode,
    }


def test_sanity_figure_has_one_row_per_method_and_a_panel_per_step(tmp_path):
    from saliency_kit.render import save_png

    image = np.zeros((12, 12, 3), np.uint8)
    result = {"gradient": _fake_result(3), "gradcam": _fake_result(3)}
    fig = sanity.sanity_figure(image, result, class_names=["a", "b"])
    shown = [ax for ax in fig.axes if ax.images]
    assert len(shown) == 2 * (2 + 3)  # image + original + 3 steps, two rows
    titles = [ax.get_title() for ax in fig.axes]
    assert "layer2\n\u03c1=0.50" in titles
    assert "(b)" in fig.axes[0].get_ylabel()
    path = save_png(fig, tmp_path / "f.png")
    assert Image.open(path).size[0] > 100


def test_sanity_figure_subsamples_long_models():
    fig = sanity.sanity_figure(np.zeros((12, 12, 3), np.uint8), {"gradient": _fake_result(40)})
    assert len([ax for ax in fig.axes if ax.images]) == 2 + sanity.MAX_STEP_COLUMNS
    assert sanity._columns(40)[-1] == 40 and sanity._columns(5) == [1, 2, 3, 4, 5]


def test_parse_target_and_json_nan(tmp_path):
    assert sanity.parse_target("top1", ["a", "b"]) == "top1"
    assert sanity.parse_target("1", ["a", "b"]) == 1
    assert sanity.parse_target("b", ["a", "b"]) == 1
    with pytest.raises(ValueError, match="class name"):
        sanity.parse_target("zebra", ["a", "b"])
    path = sanity.write_json({"x": [np.float32(1.5), float("nan")], "n": np.int64(3)}, str(tmp_path / "r.json"))
    assert json.loads(open(path).read()) == {"x": [1.5, None], "n": 3}
