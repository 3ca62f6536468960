"""The command line on models of unusual kinds, run for real in subprocesses: a segmentation model
without its config, a grayscale model, zoo models without ReLUs, a model with several outputs."""

import numpy as np
import pytest
from cli_support import manifest_records, own_lines, run
from PIL import Image

from saliency_kit.cli.options import without_arrays


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """A colour and a grey PNG, 32x32."""
    root = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / "colour.png")
    Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8)).save(root / "grey.png")
    return root


def save_segmenter(path):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    keras.Model(inputs, keras.layers.Conv2D(3, 1)(x)).save(path)
    return path


def test_segmentation_model_without_sidecar_names_the_sidecar_line(tmp_path, pictures):
    model = save_segmenter(tmp_path / "seg.keras")
    for target in ([], ["--target", "1"]):
        status, _, err = run("explain", pictures / "colour.png", "--model", model, "--out", tmp_path / "o", *target)
        lines = own_lines(err, "explain")
        assert status == 2 and len(lines) == 1, err
        assert f'write a sidecar config {model}.toml next to it holding the line: task = "segmentation"' in lines[0]
        assert len(lines[0]) < 300 and "array" not in lines[0] and "targets=" not in lines[0], lines[0]
    (tmp_path / "seg.keras.toml").write_text('task = "segmentation"\n')
    status, out, err = run(
        "explain", pictures / "colour.png", "--model", model, "--out", tmp_path / "o", "--method", "gradient"
    )
    assert status == 0, err


def test_an_error_line_never_prints_an_array():
    text = "received targets=array([[1, 2],\n [3, 4]], dtype=int32) and shape (1, 2); array(7)"
    assert without_arrays(text) == "received targets=array(...) and shape (1, 2); array(...)"
    assert without_arrays("no arrays (here)") == "no arrays (here)"


def test_a_grey_model_explains_grey_and_colour_pictures(tmp_path, pictures):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 1))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu", name="conv")(inputs))
    keras.Model(inputs, keras.layers.Dense(4, name="head")(x)).save(tmp_path / "grey.keras")
    status, out, err = run(
        "explain",
        pictures / "grey.png",
        pictures / "colour.png",
        "--model",
        tmp_path / "grey.keras",
        "--out",
        tmp_path / "o",
    )
    assert status == 0, err
    assert [r["status"] for r in manifest_records(tmp_path / "o" / "manifest.jsonl")] == ["ok"] * 4, out
