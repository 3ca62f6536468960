"""``saliency explain``, run for real (``python -m saliency_kit`` in a subprocess, or ``main()`` in
process where a fresh TensorFlow start-up buys nothing), on real PNG and JPEG files, checked
against the library called in-process on the same inputs."""

import os
from pathlib import Path

import numpy as np
import pytest
from cli_support import (  # noqa: F401
    SHAPES,
    decodes,
    image_folder,
    manifest_records,
    own_lines,
    python,
    run,
    save_tiny_model,
    tiny_model,
)
from PIL import Image

from saliency_kit import render
from saliency_kit.batch import outputs

ROOT_EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "shapes"


def test_explain_several_methods_and_targets_with_the_shipped_model(tmp_path, image_folder):
    if not SHAPES.exists():
        pytest.skip("the shipped model saliency_kit/data/shapes.keras is not trained yet")
    root, good, bad = image_folder
    big = tmp_path / "big photo.jpg"  # larger than the model's input: the overlay keeps its size
    Image.open(root / good[1]).resize((96, 80)).save(big, quality=90)
    inputs = [root / good[0], big, root / bad[0]]
    code, out, err = run(
        "explain",
        *inputs,
        "--method",
        "guided_backprop",
        "--method",
        "gradcam",
        "--method",
        "integrated_gradients",
        "--steps",
        "8",
        "--target",
        "top2",
        "--target",
        "STAR",
        "--target",
        "0",
        "--format",
        "both",
        cwd=tmp_path,
    )
    assert code == 1, err  # one unreadable input
    assert any("broken.png" in line for line in own_lines(err, "explain")) and "Traceback" not in err
    assert out.splitlines()[0] == "model: shapes; input 64x64; 5 classes; backend tensorflow"
    notes = [line for line in err.splitlines() if line.startswith("note: the default model 'shapes'")]
    assert len(notes) == 1 and "--model" in notes[0]  # big photo.jpg is not 64x64

    import saliency_kit as sk

    model, spec = sk.load_model("shapes")
    x, originals = sk.load_images([str(p) for p in inputs[:2]], spec)
    probabilities = np.asarray(model(x, training=False))
    wrote = {line.split("wrote ", 1)[1] for line in out.splitlines() if line.startswith("  wrote ")}
    on_disk = {str(p.relative_to(tmp_path)) for p in (tmp_path / "saliency_out").rglob("*") if p.is_file()}
    assert wrote | {"saliency_out/manifest.jsonl"} == on_disk
    records = manifest_records(tmp_path / "saliency_out" / "manifest.jsonl")
    assert {"saliency_out/" + r["file"] for r in records if r["status"] == "ok"} == {
        f for f in wrote if not f.endswith(("grid.png", "index.html", "/photo.png"))
    }
    # the photo under the maps: one per image, named on its PNG lines
    assert {"saliency_out/" + r["photo"] for r in records if r["status"] == "ok" and r["kind"] != "npz"} == {
        f for f in wrote if f.endswith("/photo.png")
    }
    assert "saliency_out/index.html" in wrote  # the gallery of the run
    assert [r["image"] for r in records if r["status"] == "failed"] == [str(inputs[2])]
    for row, (path, folder) in enumerate([(inputs[0], Path(good[0]).stem), (big, "big_photo")]):
        top = np.argsort(-probabilities[row])
        best = spec.class_names[top[0]]
        assert f"{path}: top probabilities: {best} {probabilities[row, top[0]]:.3f}" in out
        classes = list(dict.fromkeys([*top[:2].tolist(), spec.class_names.index("star"), 0]))
        expected = {f"saliency_out/{folder}/grid.png", f"saliency_out/{folder}/photo.png"}
        for method in ("guided_backprop", "gradcam", "integrated_gradients"):
            for c in classes:
                for kind in ("heatmap", "overlay", "npz"):
                    expected.add(f"saliency_out/{folder}/" + outputs.output_name(method, c, spec.class_names[c], kind))
        assert {f for f in wrote if f"/{folder}/" in f} == expected
        # The files hold what the library computes for the same input and class.
        c = classes[-1]
        reference = sk.explain(model, x[row : row + 1], "guided_backprop", [[c]]).maps[0, 0]
        stem = (
            tmp_path / "saliency_out" / folder / outputs.output_name("guided_backprop", c, spec.class_names[c], "npz")
        )
        with np.load(stem) as saved:
            np.testing.assert_allclose(saved["map"], reference, rtol=1e-4, atol=1e-6)
            assert int(saved["target"]) == c and str(saved["class_name"]) == spec.class_names[c]
        heat = stem.with_name(outputs.output_name("guided_backprop", c, spec.class_names[c], "heatmap"))
        with Image.open(heat) as png:
            assert np.abs(np.asarray(png).astype(int) - render.heatmap(reference)).max() <= 1
        overlay = heat.with_name(heat.name.replace("heatmap", "overlay"))
        assert decodes(overlay) == Image.open(path).size
        assert decodes(heat.parent / "grid.png")[0] > 500


def test_explain_with_a_named_model_and_no_weights_gives_one_clear_line(tmp_path, image_folder):
    cache = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "models"
    if any(cache.glob("resnet50*")):
        pytest.skip("ResNet50 weights are cached here: the offline message cannot be shown")
    root, good, _ = image_folder
    code, out, err = run("explain", root / good[0], "--model", "resnet50", cwd=tmp_path)
    assert code == 2
    lines = own_lines(err, "explain")
    assert len(lines) == 1 and lines[0].startswith("saliency explain: error:"), err
    assert "resnet50" in lines[0].lower() or "imagenet" in lines[0].lower()
    assert "Traceback" not in err
    assert not (tmp_path / "saliency_out").exists()


def test_usage_errors_found_after_loading_the_model_exit_2(tiny_model, image_folder, capsys):
    """Targets a 5-class model has not, a model file that is not one, a layer it lacks (with the
    closest names, not all of them). main() in-process: the same code path as the command."""
    from saliency_kit.cli import main

    root, good, _ = image_folder
    image = str(root / good[0])
    for args, needle in [
        (["--target", "dodecahedron"], "--target 'dodecahedron'"),
        (["--target", "top9"], "top9"),
        (["--target", "5"], "5"),
        (["--model", str(root / "notes.txt")], "notes.txt"),
        (["--method", "gradcam", "--layer", "conv3"], "did you mean 'conv"),
    ]:
        argv = ["explain", image, "--model", str(tiny_model), *args, "--out", str(root / "unused")]
        assert main(argv) == 2, args
        lines = own_lines(capsys.readouterr().err, "explain")
        assert len(lines) == 1 and needle in lines[0], (args, lines)
    assert not (root / "unused").exists()


def test_rendering_flags_reach_the_files_and_signed_methods_default_to_diverging(
    tmp_path, tiny_model, image_folder, capsys
):
    from saliency_kit import methods
    from saliency_kit.cli import main

    root, good, _ = image_folder
    image = str(root / good[2])
    out = tmp_path / "out"
    argv = [
        "explain",
        image,
        "--model",
        str(tiny_model),
        "--method",
        "gradient",
        "--method",
        "integrated_gradients",
        "--steps",
        "4",
        "--target",
        "1",
        "--format",
        "both",
        "--out",
        str(out),
    ]
    assert main([*argv, "--cmap", "viridis", "--alpha", "0.3", "--clip-percentile", "90", "--sign", "positive"]) == 0
    assert main([*argv, "--out", str(tmp_path / "defaults")]) == 0
    capsys.readouterr()
    original = np.asarray(Image.open(image).convert("RGB"))
    folder = Path(good[2]).stem
    for method in ("gradient", "integrated_gradients"):
        name = outputs.output_name(method, 1, "1", "npz")
        with np.load(out / folder / name) as saved:
            map_ = saved["map"]
        chosen = dict(sign="positive", cmap="viridis", clip_percentile=90.0)
        heat = np.asarray(Image.open(out / folder / name.replace(".npz", "-heatmap.png")))
        assert np.abs(heat.astype(int) - render.heatmap(map_, **chosen)).max() <= 1
        mixed = np.asarray(Image.open(out / folder / name.replace(".npz", "-overlay.png")))
        assert np.abs(mixed.astype(int) - render.overlay(original, map_, alpha=0.3, **chosen)).max() <= 1
        # Without --sign: the method's declaration decides (signed -> the diverging view).
        sign = "all" if methods.get(method).signed else "abs"
        default = np.asarray(Image.open(tmp_path / "defaults" / folder / name.replace(".npz", "-heatmap.png")))
        assert np.abs(default.astype(int) - render.heatmap(map_, sign=sign)).max() <= 1
    assert methods.get("integrated_gradients").signed and not methods.get("gradient").signed


def test_header_names_the_model_and_what_its_scores_are(tmp_path, image_folder, capsys):
    """A model without a softmax: 'top scores (logits)' with the values of its output; a .keras
    file with 1,000 outputs and no config: a hint about ImageNet class names."""
    from saliency_kit.cli import main

    root, good, _ = image_folder
    plain = save_tiny_model(tmp_path / "plain.keras", softmax=False)
    wide = save_tiny_model(tmp_path / "wide.keras", classes=1000)
    image = str(root / good[0])
    assert main(["explain", image, "--model", str(plain), "--method", "gradient", "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    first, header = captured.out.splitlines()[:2]
    assert first.startswith(f"model: plain ({plain}); input 32x32; 5 classes")
    import keras

    import saliency_kit as sk

    model = keras.saving.load_model(plain)
    x, _ = sk.load_images([image], sk.load_model(str(plain))[1])
    logits = np.asarray(model(x))[0]
    best = int(np.argmax(logits))
    assert header.startswith(f"{image}: top scores (logits): {best} {logits[best]:.3f}")
    assert not [line for line in captured.err.splitlines() if line.startswith("note:")]

    assert main(["explain", image, "--model", str(wide), "--method", "gradient", "--out", str(tmp_path / "b")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "ImageNet" in notes[0] and "wide.keras.toml" in notes[0]


PLUGIN = """
import sys  # for the exit status
import saliency_kit as sk
from saliency_kit import methods

@methods.register("explodes", summary="raises mid-run", options={{"power": 2.0}})
def explodes(ctx, power):
    raise ValueError("a value error from inside the method")

from saliency_kit.cli import main
sys.exit(main({argv!r}))
"""


def test_a_value_error_inside_a_method_is_not_a_usage_error(tmp_path, tiny_model, image_folder):
    root, good, _ = image_folder
    argv = [
        "explain",
        str(root / good[0]),
        "--model",
        str(tiny_model),
        "--method",
        "explodes",
        "--power",
        "3",
        "--out",
        str(tmp_path / "out"),
    ]
    code, _, err = python(PLUGIN.format(argv=argv))
    assert code == 1, err
    lines = own_lines(err, "explain")
    assert len(lines) == 1 and "ValueError: a value error from inside the method" in lines[0]
    assert "--debug" in lines[0] and "Traceback" not in err
    code, _, err = python(PLUGIN.format(argv=[*argv, "--debug"]))
    assert code == 1 and "Traceback" in err and "a value error from inside the method" in err


def test_help_states_each_option_range_and_a_value_outside_it_is_a_usage_error():
    import re

    from saliency_kit.cli import build_parser
    from saliency_kit.cli.options import UsageError, method_plan

    parser = build_parser()
    explain = parser._subparsers._group_actions[0].choices["explain"]
    text = " ".join(explain.format_help().split())  # argparse wraps the lines
    for flag, words in [
        ("--steps", "a positive int"),
        ("--samples", "a positive int"),
        ("--p", "a number in (0, 1]"),
        ("--noise", "a non-negative number"),
        ("--max-sigma", "a positive number"),
        ("--seed", "a non-negative int; None draws one"),
        ("--area-threshold", "a number in (0, 1]"),
        ("--max-dist", "a number in [0, 1]"),
    ]:
        entry = re.search(re.escape(flag) + r" [A-Z]+ (.*?)(?= --[a-z]|$)", text).group(1)
        assert words in entry, (flag, entry)
    args = parser.parse_args(["explain", "x.png", "--method", "rise", "--p", "2"])
    with pytest.raises(UsageError, match=r"p must be a number in \(0, 1\]; received 2\.0"):
        method_plan(args)


def test_help_gives_each_methods_range_when_the_declarations_differ():
    from saliency_kit import methods
    from saliency_kit.cli import build_parser

    methods.register("wide_help", summary="x", options=[methods.Option("wobble", 2, low=1)])(
        lambda ctx, wobble: ctx.inputs
    )
    methods.register("narrow_help", summary="x", options=[methods.Option("wobble", 2, low=0, high=3)])(
        lambda ctx, wobble: ctx.inputs
    )
    try:
        explain = build_parser()._subparsers._group_actions[0].choices["explain"]
        text = " ".join(explain.format_help().split())
        assert "wide_help, narrow_help: wobble; wide_help: a positive int; narrow_help: an int in [0, 3]" in text
    finally:
        methods.unregister("wide_help")
        methods.unregister("narrow_help")


def test_explaining_a_second_image_of_the_same_name_into_the_same_out_keeps_the_first(tmp_path):
    """``a/y.png`` and then ``b/y.png`` into the default --out: the second gets a folder of its own
    (``y-2``), no file of the first run changes, and each manifest line names its own image's files;
    running the first command again reuses its folder and leaves no file of another method behind."""
    if not SHAPES.exists():
        pytest.skip("the shipped model saliency_kit/data/shapes.keras is not trained yet")
    examples = ROOT_EXAMPLES
    for folder, shape in (("a", "circle"), ("b", "star")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "y.png").write_bytes((examples / f"{shape}.png").read_bytes())
    out = tmp_path / "saliency_out"

    def explain(image, method="gradient"):
        code, stdout, err = run("explain", image, "--method", method, "--target", "top1", cwd=tmp_path)
        assert code == 0, err
        return {line.split("wrote ", 1)[1] for line in stdout.splitlines() if line.startswith("  wrote ")}

    first_wrote = explain("a/y.png")
    first = {p: p.read_bytes() for p in out.rglob("*.png")}
    second_wrote = explain("b/y.png")
    assert first == {p: p.read_bytes() for p in first}  # nothing of the first run changed
    assert {str(p.relative_to(tmp_path)) for p in out.glob("y-2/*")} == second_wrote - {"saliency_out/index.html"}
    assert first_wrote & second_wrote == {"saliency_out/index.html"}

    records = [r for r in manifest_records(out / "manifest.jsonl") if r["kind"] == "heatmap"]
    assert sorted((r["image"], r["class_name"], r["file"].split("/")[0]) for r in records) == [
        ("a/y.png", "circle", "y"),
        ("b/y.png", "star", "y-2"),
    ]

    explain("a/y.png", method="gradcam")  # the same image again, another method: its own folder, made anew
    assert sorted(p.name for p in (out / "y").iterdir())[0].startswith("gradcam-")
    assert not any(p.name.startswith("gradient-") for p in (out / "y").iterdir())
    images = {(r["image"], r["method"], r["file"].split("/")[0]) for r in manifest_records(out / "manifest.jsonl")}
    assert images == {("a/y.png", "gradcam", "y"), ("b/y.png", "gradient", "y-2")}


def test_max_pixels_flag_reads_images_over_pillows_limit(tmp_path, tiny_model):
    """Pillow's limit made small in the process, an image just over it: refused naming the flag,
    read with ``--max-pixels``, by ``explain`` and ``batch``; the limit is left as it was."""
    folder = tmp_path / "in"
    folder.mkdir()
    Image.new("RGB", (50, 40), (200, 30, 30)).save(folder / "wide.png")  # 2,000 pixels
    code = f"""
import PIL.Image, sys
from saliency_kit.cli.main import main
PIL.Image.MAX_IMAGE_PIXELS = 1_500
common = ["--model", {str(tiny_model)!r}, "--method", "gradient"]
image = {str(folder / "wide.png")!r}
print("refused", main(["explain", image, *common, "--out", "refused"]), flush=True)
print("explained", main(["explain", image, *common, "--out", "read", "--max-pixels", "2000"]), flush=True)
print("batch", main(["batch", {str(folder)!r}, *common, "--out", "batch", "--max-pixels", "2000"]), flush=True)
print("limit", PIL.Image.MAX_IMAGE_PIXELS)
"""
    status, out, err = python(code, cwd=tmp_path)
    assert status == 0, err
    assert [line for line in out.splitlines() if line.split()[0] in ("refused", "explained", "batch", "limit")] == [
        "refused 1",
        "explained 0",
        "batch 0",
        "limit 1500",
    ]
    (refusal,) = [line for line in own_lines(err, "explain") if "skipped" in line]
    assert "wide.png" in refusal and "--max-pixels" in refusal
    assert decodes(tmp_path / "read" / "wide" / "grid.png")
    records = manifest_records(tmp_path / "batch" / "manifest.jsonl")
    assert records and {(r["image"], r["status"]) for r in records} == {("wide.png", "ok")}
