"""``saliency explain`` and ``saliency batch`` on the shipped segmentation model and detector, run
for real (``python -m saliency_kit`` in subprocesses) on real PNG files: the files and manifest
lines each region or box gets, the maps they hold against the library called in-process with the
same target objects, the outlines and boxes drawn on the overlays, and one-line usage errors."""

import dataclasses
import json

import numpy as np
import pytest
from cli_support import decodes, manifest_records, own_lines, run
from PIL import Image

from saliency_kit import render
from saliency_kit.batch import outputs
from saliency_kit.cli.main import main
from saliency_kit.data import scenes
from saliency_kit.data.shapes import preprocess
from saliency_kit.targets import detections

CYAN = np.array(render.MARK_COLOUR)


@pytest.fixture(scope="module")
def scene_files(tmp_path_factory):
    """Three scenes as PNG files (seed 14, unseen in training), the first also at twice its size,
    and a mask PNG of the first scene's first shape."""
    root = tmp_path_factory.mktemp("scenes")
    data = scenes.make_scenes(3, seed=14)
    for i in range(3):
        Image.fromarray(data.images[i]).save(root / f"scene{i}.png")
    Image.fromarray(data.images[0]).resize((128, 128), Image.Resampling.NEAREST).save(root / "big.png")
    components = data.label_maps[0]
    box = scenes.scene_boxes(data, 0)[0][0].astype(int)
    first = np.zeros((64, 64), bool)
    first[box[1] : box[3], box[0] : box[2]] = components[box[1] : box[3], box[0] : box[2]] > 0
    Image.fromarray(first.astype(np.uint8) * 255).save(root / "shape mask.png")
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(root / "empty.png")
    return root, data, first


def cyan_pixels(path) -> np.ndarray:
    with Image.open(path) as png:
        return np.all(np.asarray(png.convert("RGB")) == CYAN, axis=-1)


def test_detector_explains_each_detected_box_by_default(tmp_path, scene_files):
    import saliency_kit as sk

    root, data, _ = scene_files
    code, out, err = run(
        "explain",
        root / "scene0.png",
        root / "scene1.png",
        "--model",
        "shapes_det",
        "--method",
        "gradient",
        "--format",
        "both",
        "--out",
        tmp_path / "out",
    )
    assert code == 0, err
    assert not own_lines(err, "explain") and "Traceback" not in err
    model, spec = sk.load_model("shapes_det")
    x = preprocess(data.images[:2])
    found = detections.decode(
        np.asarray(model(x)), score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold
    )
    assert all(found)  # every scene has a detection
    records = [r for r in manifest_records(tmp_path / "out" / "manifest.jsonl") if r["status"] == "ok"]
    for row, image in enumerate(["scene0", "scene1"]):
        assert f"{len(found[row])} detections (score >= 0.5)" in out
        expected = set()
        for rank, d in enumerate(found[row], start=1):
            name = spec.class_names[d.label]
            for kind in ("heatmap", "overlay", "npz"):
                expected.add(f"{image}/" + outputs.output_name("gradient", d.label, name, kind, f"box{rank}"))
        mine = [r for r in records if r["image"].endswith(f"{image}.png")]
        assert {r["file"] for r in mine} == expected
        for r in mine:
            d = found[row][r["detection"] - 1]
            assert r["target"] == f"box{r['detection']}" and r["class"] == d.label
            np.testing.assert_allclose(r["box"], d.box, atol=0.01)
        # The map is the library's for the same box and class; the overlay draws the box.
        d = found[row][0]
        reference = sk.explain(model, x[row : row + 1], "gradient", sk.targets.box([[list(d.box)]], [[d.label]]))
        npz = (
            tmp_path
            / "out"
            / image
            / outputs.output_name("gradient", d.label, spec.class_names[d.label], "npz", "box1")
        )
        with np.load(npz) as saved:
            np.testing.assert_allclose(saved["map"], reference.maps[0, 0], rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(saved["box"], d.box, rtol=1e-6)
        cyan = cyan_pixels(str(npz).replace(".npz", "-overlay.png"))
        x0, y0 = (int(np.floor(v + 0.5)) for v in d.box[:2])
        x1, y1 = (int(np.floor(v + 0.5)) for v in d.box[2:])
        assert cyan[y0 + 1 : y1 - 1, x0].all() and cyan[y0 + 1 : y1 - 1, min(x1, 64) - 1].all()
        assert decodes(tmp_path / "out" / image / "grid.png")[0] > 300
    html = (tmp_path / "out" / "index.html").read_text()
    assert "box1" in html


def test_detector_given_box_in_image_pixels_and_top_boxes(tmp_path, scene_files):
    root, data, _ = scene_files
    box, label = scenes.scene_boxes(data, 0)[0][0], int(scenes.scene_boxes(data, 0)[1][0])
    name = scenes.SEGMENTATION_CLASSES[label + 1]
    given = ",".join(str(int(v * 2)) for v in box)  # big.png is twice the model's input
    code, out, err = run(
        "explain",
        root / "big.png",
        "--model",
        "shapes_det",
        "--method",
        "gradient",
        "--target",
        f"{name}@{given}",
        "--out",
        tmp_path / "given",
    )
    assert code == 0, err
    records = [r for r in manifest_records(tmp_path / "given" / "manifest.jsonl") if r["status"] == "ok"]
    assert {r["target"] for r in records} == {"box-" + given.replace(",", "-")}
    np.testing.assert_allclose(records[0]["box"], box, atol=0.01)  # in the model's input pixels
    overlay = next(r["file"] for r in records if r["kind"] == "overlay")
    assert decodes(tmp_path / "given" / overlay) == (128, 128)  # drawn on the image as given
    cyan = cyan_pixels(tmp_path / "given" / overlay)
    x0, y0, x1, y1 = (int(v * 2) for v in box)
    assert cyan[y0 + 2 : y1 - 2, x0].all() and cyan[y1 - 1, x0:x1].all()

    code, out, err = run(
        "explain",
        root / "scene0.png",
        "--model",
        "shapes_det",
        "--method",
        "gradient",
        "--boxes",
        "top1",
        "--out",
        tmp_path / "top",
    )
    assert code == 0, err
    records = [r for r in manifest_records(tmp_path / "top" / "manifest.jsonl") if r["status"] == "ok"]
    assert {r["target"] for r in records} == {"box1"} and len(records) == 2

    import saliency_kit as sk

    model, spec = sk.load_model("shapes_det")
    found = detections.decode(
        np.asarray(model(preprocess(data.images[:1]))),
        score_threshold=spec.score_threshold,
        iou_threshold=spec.iou_threshold,
    )[0]
    code, out, err = run(
        "explain", root / "scene0.png", "--model", "shapes_det", "--method", "gradient", "--boxes", "top3",
        "--out", tmp_path / "top3",
    )  # fmt: skip
    assert code == 0, err
    records = [r for r in manifest_records(tmp_path / "top3" / "manifest.jsonl") if r["status"] == "ok"]
    kept = min(3, len(found))
    assert kept > 1  # more than top1 keeps, fewer than asked for: all of them
    assert {r["target"] for r in records} == {f"box{rank}" for rank in range(1, kept + 1)} and len(records) == 2 * kept
    for r in records:
        np.testing.assert_allclose(r["box"], found[r["detection"] - 1].box, atol=0.01)


def test_segmentation_predicted_and_given_regions_then_batch(tmp_path, scene_files):
    import saliency_kit as sk

    root, data, first = scene_files
    label = int(scenes.scene_boxes(data, 0)[1][0])
    name = scenes.SEGMENTATION_CLASSES[label + 1]
    code, out, err = run(
        "explain",
        root / "scene0.png",
        "--model",
        "shapes_seg",
        "--method",
        "gradient",
        "--target",
        name,
        "--target",
        f"{name}@{root / 'shape mask.png'}",
        "--format",
        "both",
        "--out",
        tmp_path / "seg",
    )
    assert code == 0, err
    model, spec = sk.load_model("shapes_seg")
    x = preprocess(data.images[:1])
    predicted = np.asarray(model(x)).argmax(-1)[0] == label + 1
    records = [r for r in manifest_records(tmp_path / "seg" / "manifest.jsonl") if r["status"] == "ok"]
    assert {r["target"] for r in records} == {"region", "mask-shape_mask"}
    for subject, mask in (("region", predicted), ("mask-shape_mask", first)):
        line = next(r for r in records if r["target"] == subject and r["kind"] == "npz")
        assert line["pixels"] == int(mask.sum()) and line["class"] == label + 1
        reference = sk.explain(model, x, "gradient", sk.targets.region(mask, label + 1)).maps[0, 0]
        with np.load(tmp_path / "seg" / line["file"]) as saved:
            np.testing.assert_allclose(saved["map"], reference, rtol=1e-4, atol=1e-6)
            np.testing.assert_array_equal(saved["mask"], mask)
        cyan = cyan_pixels(tmp_path / "seg" / line["file"].replace(".npz", "-overlay.png"))
        border = mask & ~np.pad(
            mask[1:-1, 1:-1] & mask[:-2, 1:-1] & mask[2:, 1:-1] & mask[1:-1, :-2] & mask[1:-1, 2:], 1
        )
        np.testing.assert_array_equal(cyan, border)  # the outline: exactly the region's border pixels

    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        (folder / f"scene{i}.png").write_bytes((root / f"scene{i}.png").read_bytes())
    code, out, err = run("batch", folder, "--out", tmp_path / "batch", "--model", "shapes_seg", "--method", "gradcam")
    assert code == 0, err
    records = manifest_records(tmp_path / "batch" / "manifest.jsonl")
    predicted = np.asarray(model(preprocess(data.images[:3]))).argmax(-1)
    for i in range(3):
        present = {spec.class_names[c] for c in np.unique(predicted[i]) if c}  # the default: all but background
        mine = [r for r in records if r["image"] == f"scene{i}.png"]
        assert {r["class_name"] for r in mine} == present and {r["target"] for r in mine} == {"region"}
        assert len(mine) == mine[0]["outputs"] == 2 * len(present)
    settings = json.loads((tmp_path / "batch" / "settings.json").read_text())
    assert settings["model"]
    code, out, err = run(
        "batch", folder, "--out", tmp_path / "batch", "--model", "shapes_seg", "--method", "gradcam", "--resume"
    )
    assert code == 0 and "3 already complete" in out, err


@pytest.mark.parametrize(
    "model, target, extra, expected",
    [
        ("shapes_det", "star@1,2,3", [], "a box is NAME@x0,y0,x1,y1, four numbers in image pixels"),
        ("shapes_det", "star@5,5,2,9", [], "needs 0 <= x0 < x1 and 0 <= y0 < y1 (image pixels); received x0=5"),
        ("shapes_det", "stra@1,2,3,4", [], "has no class 'stra' (did you mean 'star'?)"),
        ("shapes_det", "star@1,2,300,4", [], "the box reaches beyond the image (64x64 pixels); received x1=300"),
        ("shapes_det", None, ["--boxes", "3"], "--boxes must be 'all' or 'topN' with N >= 1"),
        ("shapes", None, ["--boxes", "top3"], "--boxes applies to detectors"),
        ("shapes_seg", "star@{root}/nowhere.png", [], "no such mask file"),
        ("shapes_seg", "star@{root}/empty.png", [], "has no nonzero pixel, so it holds no region"),
        ("shapes_seg", "star@{root}/scene0.png.txt", [], "no such mask file"),
        ("shapes_seg", "star@{root}/broken.png", [], "cannot read the mask"),
        ("shapes", "star@{root}/empty.png", [], "apply to segmentation and detection models"),
    ],
)
def test_mask_and_box_errors_are_one_line_exit_2(tmp_path, scene_files, capsys, model, target, extra, expected):
    root, _, _ = scene_files
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    argv = ["explain", str(root / "scene0.png"), "--model", model, "--out", str(tmp_path / "o"), *extra]
    if target is not None:
        argv += ["--target", target.format(root=root)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = own_lines(err, "explain")
    assert len(lines) == 1 and lines[0].startswith("saliency explain: error: ") and expected in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_output_picks_a_head_of_a_multi_output_model(tmp_path, scene_files, capsys):
    import keras

    import saliency_kit as sk

    root, data, _ = scene_files
    keras.utils.set_random_seed(0)
    inputs = keras.Input((64, 64, 3))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inputs))
    keras.Model(
        inputs, {"age": keras.layers.Dense(1, name="age")(x), "kind": keras.layers.Dense(3, name="kind")(x)}
    ).save(tmp_path / "multi.keras")
    base = [
        "explain",
        str(root / "scene0.png"),
        "--model",
        str(tmp_path / "multi.keras"),
        "--method",
        "gradient",
        "--format",
        "npz",
    ]
    assert main([*base, "--output", "kind", "--target", "top2", "--out", str(tmp_path / "kind")]) == 0
    model, _ = sk.load_model(tmp_path / "multi.keras")
    x = preprocess(data.images[:1])
    values = np.asarray(model(x)["kind"])[0]
    records = manifest_records(tmp_path / "kind" / "manifest.jsonl")
    assert [r["class"] for r in records] == list(np.argsort(-values)[:2])
    assert {r["target"] for r in records} == {"out-kind"} and {r["output"] for r in records} == {"kind"}
    for r in records:  # the map of a head's component: the gradient of that component alone
        with np.load(tmp_path / "kind" / r["file"]) as saved:
            reference = sk.explain(model, x, "gradient", sk.targets.output("kind", [[r["class"]]])).maps[0, 0]
            np.testing.assert_allclose(saved["map"], reference, rtol=1e-4, atol=1e-7)
    capsys.readouterr()
    for extra, expected in (
        (["--output", "nope"], "has no such output; its outputs: age, kind"),
        ([], "has several outputs (age, kind); pick one with --output NAME"),
        (["--output", "age", "--target", "star"], "with --output, a target is topK"),
    ):
        assert main([*base, *extra, "--out", str(tmp_path / "bad")]) == 2
        lines = own_lines(capsys.readouterr().err, "explain")
        assert len(lines) == 1 and expected in lines[0], lines


def test_two_boxes_of_one_class_are_two_outputs_and_two_gallery_maps(tmp_path):
    from saliency_kit.batch import gallery
    from saliency_kit.targets.tasks import Subject

    original = np.full((64, 64, 3), 90, np.uint8)
    subjects = [
        Subject("box", 3, "star", f"box{n}", {"box": list(box), "detection": n}, box=box)
        for n, box in ((1, (2.0, 2.0, 12.0, 12.0)), (2, (16.0, 16.0, 30.0, 30.0)))
    ]
    maps = np.random.default_rng(0).random((2, 16, 16)).astype(np.float32)
    result = outputs.MethodMaps("gradient", maps, np.array([3, 3]), np.array([0.5, 0.25]), subjects=subjects)
    written = outputs.write_image_outputs(
        str(tmp_path), "img", original, [result], ["a", "b", "c", "star"], ("png",), input_size=(32, 32)
    )
    assert [w.file for w in written] == [
        f"img/gradient-c3-star-box{n}-{kind}.png" for n in (1, 2) for kind in ("heatmap", "overlay")
    ]
    cyan = cyan_pixels(tmp_path / "img" / "gradient-c3-star-box2-overlay.png")
    assert cyan[32:60, 32].all() and cyan[59, 32:60].all()  # the box (16..30 of 32 px), scaled to 32..59 of 64 px
    assert not cyan[34:58, 34:58].any()
    lines = outputs.manifest_lines("img.png", written)
    assert [line["target"] for line in lines] == ["box1", "box1", "box2", "box2"]
    assert lines[2]["box"] == [16.0, 16.0, 30.0, 30.0] and lines[2]["detection"] == 2
    (tmp_path / outputs.MANIFEST).write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = gallery.gallery_data(tmp_path)
    shown = data["images"][0]["outputs"]
    assert [(o["class_name"], o["subject"]) for o in shown] == [("star", "box1"), ("star", "box2")]
    assert all(o["overlay"].endswith(f"{o['subject']}-overlay.png") for o in shown)
    html = gallery.write_gallery(tmp_path).read_text()
    assert '"box1"' in html and '"box2"' in html


def test_names_of_regions_and_boxes_stay_distinct(tmp_path, scene_files):
    from saliency_kit import zoo
    from saliency_kit.cli import tasks
    from saliency_kit.targets.tasks import subjects_from_outputs

    root, data, first = scene_files
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        Image.fromarray(first.astype(np.uint8) * 255).save(tmp_path / folder / "m.png")
    spec = zoo.get_spec("shapes_seg")
    plan = tasks.parse(
        [
            "star@" + str(tmp_path / "a" / "m.png"),
            "star@" + str(tmp_path / "b" / "m.png"),
            "star@" + str(tmp_path / "a" / "m.png"),
        ],
        None,
        None,
        spec,
    )
    logits = np.zeros((1, 64, 64, 6), np.float32)
    asked = subjects_from_outputs(plan, spec, logits, [(64, 64)])[0]
    names = [q.name for q in asked]
    assert len(names) == 2 and names[0] != names[1] and all(n.startswith("mask-m-") for n in names)
    spec = dataclasses.replace(zoo.get_spec("shapes_det"), input_size=(64, 64))  # as load_model completes it
    plan = tasks.parse(["star@10.2,12,40,44", "star@10.4,12,40,44", "star@10,12,40,44"], None, None, spec)
    raw = np.zeros((1, 4, 10), np.float32)
    asked = subjects_from_outputs(plan, spec, raw, [(64, 64)])[0]
    assert [q.name for q in asked] == ["box-10.2-12-40-44", "box-10.4-12-40-44", "box-10-12-40-44"]


def test_an_image_with_nothing_to_explain_is_recorded_once_and_complete(tmp_path, scene_files):
    """A detector that finds no box in an image: the batch records it as empty (no files), a
    resumed run counts it complete and writes nothing again; ``explain`` records it the same way."""
    root, _, _ = scene_files
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "scene0.png").write_bytes((root / "scene0.png").read_bytes())
    Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(folder / "blank.png")
    out = tmp_path / "batch"
    code, _, err = run("batch", folder, "--out", out, "--model", "shapes_det", "--method", "gradient")
    assert code == 0, err
    records = manifest_records(out / "manifest.jsonl")
    blank = [r for r in records if r["image"] == "blank.png"]
    assert blank == [outputs.nothing_line("blank.png")]
    assert blank[0]["status"] == "empty" and blank[0]["outputs"] == 0
    scene = [r for r in records if r["image"] == "scene0.png"]
    assert scene and {r["status"] for r in scene} == {"ok"}
    before = (out / "manifest.jsonl").read_bytes()
    code, out_text, err = run(
        "batch", folder, "--out", out, "--model", "shapes_det", "--method", "gradient", "--resume"
    )
    assert code == 0 and "2 already complete" in out_text, (out_text, err)
    assert (out / "manifest.jsonl").read_bytes() == before

    code, out_text, err = run(
        "explain", folder / "blank.png", "--model", "shapes_det", "--method", "gradient", "--out", tmp_path / "one"
    )
    assert code == 0 and "nothing to explain" in out_text, (out_text, err)
    assert manifest_records(tmp_path / "one" / "manifest.jsonl") == [outputs.nothing_line(str(folder / "blank.png"))]
