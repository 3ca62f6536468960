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


def save_two_headed(path):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu", name="conv")(inputs))
    outputs = {"kind": keras.layers.Dense(4, name="kind")(x), "age": keras.layers.Dense(2, name="age")(x)}
    keras.Model(inputs, outputs).save(path)
    path.with_name(path.name + ".toml").write_text('classes = ["cat", "dog", "owl", "fox"]\n')
    return path


def test_a_head_of_a_multi_output_model_is_described_and_named_as_itself(tmp_path, pictures):
    model = save_two_headed(tmp_path / "two.keras")
    base = ("explain", pictures / "colour.png", "--model", model, "--method", "gradient", "--format", "npz")
    status, out, err = run(*base, "--output", "age", "--target", "all", "--out", tmp_path / "age")
    assert status == 0, err
    first, line = out.splitlines()[:2]
    assert "0 classes" not in first and "2 outputs: age (2), kind (4)" in first, first
    assert "explaining component 0 of age, component 1 of age" in line and "out-age" not in line, line
    records = manifest_records(tmp_path / "age" / "manifest.jsonl")
    assert sorted(r["class_name"] for r in records) == ["0", "1"], records  # not the classifier's names
    status, out, err = run(*base, "--output", "kind", "--out", tmp_path / "kind")
    assert status == 0, err
    records = manifest_records(tmp_path / "kind" / "manifest.jsonl")
    assert [r["class_name"] for r in records] == [["cat", "dog", "owl", "fox"][records[0]["class"]]]
    assert f"explaining {records[0]['class_name']} of kind" in out.splitlines()[1], out


def test_a_dead_units_warning_names_the_unit_as_given():
    import keras

    import saliency_kit as sk

    inputs = keras.Input((8, 8, 1))
    dead = keras.layers.Conv2D(2, 3, kernel_initializer="zeros", bias_initializer="ones", name="dead")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(dead)))
    with pytest.warns(RuntimeWarning, match=r"target \(1, 2, 0\)\)"):
        sk.explain(model, np.ones((1, 8, 8, 1), np.float32), "gradient", sk.targets.unit("dead", (1, 2, 0)))


@pytest.mark.parametrize("name", ["efficientnet_b0", "convnext_tiny"])
def test_the_default_method_on_a_zoo_model_without_relus_is_refused_first_in_flags(tmp_path, pictures, name):
    status, out, err = run(
        "explain", pictures / "colour.png", "--model", name, "--weights", "random", "--out", tmp_path / "o"
    )
    lines = own_lines(err, "explain")
    assert status == 2 and len(lines) == 1, err
    assert "--method guided_backprop (the default method) needs ReLU activations" in lines[0], lines[0]
    assert "--method gradient" in lines[0] and "method=" not in lines[0] and "Error:" not in lines[0], lines[0]
    assert not (tmp_path / "o").exists()


def test_batch_numbers_the_components_of_a_head_the_names_do_not_fit(tmp_path, pictures):
    model = save_two_headed(tmp_path / "two.keras")
    (tmp_path / "in").mkdir()
    Image.open(pictures / "colour.png").save(tmp_path / "in" / "a.png")
    status, _, err = run(
        "batch",
        tmp_path / "in",
        "--model",
        model,
        "--method",
        "gradient",
        "--output",
        "age",
        "--target",
        "all",
        "--format",
        "npz",
        "--out",
        tmp_path / "o",
    )
    assert status == 0, err
    records = [r for r in manifest_records(tmp_path / "o" / "manifest.jsonl") if r["status"] == "ok"]
    assert sorted(r["class_name"] for r in records) == ["0", "1"], records
