"""`saliency sanity`: the randomisation figure and JSON, through the real command line."""

import json

import numpy as np
import pytest
from cli_support import own_lines
from PIL import Image

from saliency_kit.cli import sanity
from saliency_kit.files import write_json

#: The shipped model's weighted layers from the output down, as its architecture is documented
#: (saliency_kit/data/shapes.py): written out here, not computed by the code under test.
SHAPES_LAYERS_FROM_THE_TOP = ["predictions", "conv4", "block3/block3_bn", "block3/block3_conv", "bn2", "conv2", "conv1"]


def _fake_result(n_steps, mode="cascading"):
    rng = np.random.default_rng(0)
    steps = [
        {
            "layer": f"outer/layer{i}",
            "spearman_abs": 0.5,
            "spearman": 0.1,
            "ssim": float("nan"),
            "step": i + 1,
            "randomized": [f"outer/layer{j}" for j in range(i + 1)],
        }
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


def test_json_nan_and_numpy_numbers(tmp_path):
    path = write_json({"x": [np.float32(1.5), float("nan")], "n": np.int64(3)}, str(tmp_path / "r.json"))
    assert json.loads(open(path).read()) == {"x": [1.5, None], "n": 3}


def test_default_methods_come_from_the_declarations():
    from saliency_kit import methods

    chosen = sanity.default_methods()
    assert "guided_backprop" in chosen and any(methods.get(m).cam for m in chosen)
    assert all(m in methods.names() for m in chosen)


# ------------------------------------------------------------------------------------------
# end to end: `saliency sanity` on the shipped model and a generated image
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shape_png(tmp_path_factory):
    from saliency_kit.data.shapes import make_dataset

    images, _, _ = make_dataset(1, seed=4)
    path = tmp_path_factory.mktemp("img") / "shape.png"
    Image.fromarray(images[0]).save(path)
    return path


def test_sanity_command_writes_figure_and_json(shape_png, tmp_path, capsys):
    from saliency_kit.cli import main

    out = tmp_path / "out"
    status = main(["sanity", str(shape_png), "--method", "gradient", "--method", "gradcam", "--out", str(out)])
    assert status == 0
    report = json.loads((out / "sanity_shape.json").read_text())
    expected_layers = SHAPES_LAYERS_FROM_THE_TOP
    assert report["mode"] == "cascading" and set(report["methods"]) == {"gradient", "gradcam"}
    for steps in report["methods"].values():
        assert [s["layer"] for s in steps] == expected_layers
        assert steps[-1]["randomized"] == expected_layers
        assert all(-1 <= s["spearman_abs"] <= 1 for s in steps)
    figure = Image.open(out / "sanity_shape.png")
    assert figure.size[0] > figure.size[1] > 100
    printed = capsys.readouterr().out
    assert "gradient: fully randomised vs original" in printed and str(out / "sanity_shape.png") in printed


def test_sanity_command_independent_mode_and_usage_errors(shape_png, tmp_path, capsys):
    from saliency_kit.cli import main

    out = tmp_path / "out"
    assert (
        main(
            [
                "sanity",
                str(shape_png),
                "--method",
                "gradient",
                "--mode",
                "independent",
                "--target",
                "circle",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads((out / "sanity_shape.json").read_text())
    assert all(len(s["randomized"]) == 1 for s in report["methods"]["gradient"])
    assert report["target"]["gradient"] == {"index": 0, "name": "circle"}
    assert main(["sanity", str(shape_png), "--method", "gradient", "--target", "TOP2", "--out", str(out)]) == 0
    capsys.readouterr()
    # Usage errors exit 2, as for explain: an unknown method, a target the model lacks, no file.
    for argv, needle in [
        (["--method", "nonsense"], "unknown method 'nonsense'"),
        (["--target", "zebra"], "zebra"),
        (["--target", "Circel"], "did you mean 'circle'"),
    ]:
        assert main(["sanity", str(shape_png), *argv, "--out", str(out)]) == 2
        lines = own_lines(capsys.readouterr().err, "sanity")
        assert len(lines) == 1 and needle.lower() in lines[0].lower(), lines
    assert main(["sanity", str(shape_png.with_name("missing.png")), "--out", str(out)]) == 2


def test_sanity_figure_titles_never_overlap_even_with_long_layer_names(tmp_path):
    """Layer names as long as Keras applications' ('block5_conv3_preact_bn', nested paths) are
    wrapped to their panel: no two titles' drawn boxes intersect."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from saliency_kit.cli.sanity import sanity_figure

    rng = np.random.default_rng(0)
    layers = [f"backbone/conv{i}_block{i}_preact_batch_normalization_{i}" for i in range(6)]
    maps = [rng.random((16, 16)) for _ in range(len(layers) + 1)]
    result = {
        method: {
            "target": 1,
            "maps": maps,
            "layers": layers,
            "mode": "cascading",
            "steps": [{"layer": name, "spearman_abs": 0.5} for name in layers],
        }
        for method in ("gradient", "guided_backprop")
    }
    fig = sanity_figure(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8), result, class_names=["a", "b"])
    FigureCanvasAgg(fig)
    fig.savefig(tmp_path / "sanity.png")
    renderer = fig.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    assert len(boxes) >= 2 * (len(layers) + 1)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            overlap = min(a.x1, b.x1) - max(a.x0, b.x0) > 0.5 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5
            assert not overlap, (a, b)
