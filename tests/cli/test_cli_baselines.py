"""Expected gradients from the command line, run for real: ``--baselines`` names a folder of images
or a ``.npy`` file of model inputs; XRAI's ``segments`` has no flag, and ``saliency methods`` says so."""

import numpy as np
from cli_support import SHAPES, manifest_records, own_lines, run
from PIL import Image

import saliency_kit as sk
from saliency_kit.data.shapes import make_dataset


def test_expected_gradients_reads_baselines_from_a_folder_or_an_npy_file(tmp_path):
    images, _, _ = make_dataset(4, seed=21)
    (tmp_path / "refs").mkdir()
    for i, image in enumerate(images[1:]):
        Image.fromarray(image).save(tmp_path / "refs" / f"ref{i}.png")
    Image.fromarray(images[0]).save(tmp_path / "x.png")
    model, spec = sk.load_model(SHAPES)
    references, _ = sk.load_images(sorted((tmp_path / "refs").glob("*.png")), spec)
    np.save(tmp_path / "refs.npy", references)
    x, _ = sk.load_images([tmp_path / "x.png"], spec)
    expected = sk.explain(model, x, "expected_gradients", "top1", baselines=references, samples=8, seed=0).maps[0, 0]
    base = ("explain", tmp_path / "x.png", "--model", SHAPES, "--method", "expected_gradients", "--format", "npz")
    for given in ("refs", "refs.npy"):
        out = tmp_path / f"out-{given}"
        status, _, err = run(*base, "--baselines", tmp_path / given, "--samples", "8", "--seed", "0", "--out", out)
        assert status == 0, err
        (record,) = manifest_records(out / "manifest.jsonl")
        with np.load(out / record["file"]) as saved:
            np.testing.assert_allclose(saved["map"], expected, rtol=1e-4, atol=1e-7)
    status, _, err = run(*base, "--baselines", tmp_path / "x.png", "--out", tmp_path / "bad")
    (line,) = own_lines(err, "explain")
    assert status == 2 and "--baselines" in line and "a .npy file or a folder of images" in line, err


def test_segments_has_no_flag_and_methods_says_so(tmp_path):
    status, _, err = run("explain", tmp_path / "x.png", "--method", "xrai", "--segments", "a")
    assert status == 2 and "unrecognized arguments: --segments" in err, err
    status, out, _ = run("methods")
    assert status == 0 and "option 'segments' is not on the command line" in next(
        line for line in out.splitlines() if line.startswith("xrai ")
    ), out
    status, out, _ = run("explain", "--help")
    assert "--segments" not in out and "--baselines PATH" in out
