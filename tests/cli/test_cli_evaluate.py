"""`saliency evaluate` run for real on the shipped model and generated shape images."""

import csv
import json
import os

import numpy as np
import pytest
from cli_support import SHAPES, own_lines, python, run
from PIL import Image


@pytest.fixture(scope="module")
def shapes_dir(tmp_path_factory):
    from saliency_kit.data.shapes import make_dataset

    images, masks, _ = make_dataset(3, seed=8)
    folder = tmp_path_factory.mktemp("shapes")
    for i in range(3):
        Image.fromarray(images[i]).save(folder / f"s{i}.png")
        if i < 2:  # the last image has no mask
            Image.fromarray((masks[i] * 255).astype(np.uint8)).save(folder / f"s{i}_mask.png")
    return folder


ARGS = ["--method", "gradient", "--metric", "sparseness", "--metric", "faithfulness_correlation", "--metric", "auc"]


def test_evaluate_writes_the_table_the_chart_and_resumes(shapes_dir, tmp_path, capsys):
    from saliency_kit.cli import main

    images = sorted(str(p) for p in shapes_dir.glob("s?.png"))
    out = tmp_path / "out"
    assert main(["evaluate", *images, *ARGS, "--out", str(out)]) == 0
    cells = 3 * 2 * 3  # images x (gradient, random) x metrics
    assert f"saliency evaluate: {cells}/{cells} cells (100%)" in capsys.readouterr().err  # not a terminal: lines
    table = json.loads((out / "metrics.json").read_text())
    assert table["images"] == [os.path.abspath(p) for p in images]
    rows = {(r["method"], r["metric"]): r for r in table["rows"]}
    assert set(rows) == {
        (m, n) for m in ("gradient", "random") for n in ("sparseness", "faithfulness_correlation", "auc")
    }
    assert rows["gradient", "auc"]["per_input"][2] is None  # no mask: no localisation value (JSON null)
    assert rows["random", "auc"]["higher_is_better"] and rows["random", "auc"]["mean"] is not None
    assert rows["gradient", "sparseness"]["mean"] > rows["random", "sparseness"]["mean"]
    with open(out / "metrics.csv", newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert len(lines) == 2 * 3 * 3 and {line["method"] for line in lines} == {"gradient", "random"}
    chart = Image.open(out / "metrics.png")
    assert chart.size[0] > 400 and chart.size[1] > 200
    assert "Read the numbers with care" in table["caveats"]

    # a run stopped after two images: --resume scores only the third, and the table is the same
    parts = sorted((out / "metrics_parts").iterdir())
    assert len(parts) == 3
    kept = {p: p.stat().st_mtime_ns for p in parts}
    last = max(parts, key=lambda p: json.loads(p.read_text())["image"])
    last.unlink()
    del kept[last]
    (out / "metrics.json").unlink()
    capsys.readouterr()
    assert main(["evaluate", *images, *ARGS, "--out", str(out), "--resume"]) == 0
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    again = json.loads((out / "metrics.json").read_text())
    assert json.dumps(again["rows"]) == json.dumps(table["rows"])

    # other settings in the same --out are refused; unknown metrics and unreadable images are reported
    capsys.readouterr()
    assert main(["evaluate", *images, *ARGS, "--metric", "complexity", "--out", str(out), "--resume"]) == 2
    assert "other settings" in own_lines(capsys.readouterr().err, "evaluate")[0]
    assert main(["evaluate", *images, "--metric", "sparsenes", "--out", str(tmp_path / "x")]) == 2
    assert "did you mean 'sparseness'" in own_lines(capsys.readouterr().err, "evaluate")[0]
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    assert (
        main(
            [
                "evaluate",
                images[0],
                str(broken),
                "--method",
                "gradient",
                "--metric",
                "sparseness",
                "--out",
                str(tmp_path / "partial"),
            ]
        )
        == 1
    )
    assert "skipped" in " ".join(own_lines(capsys.readouterr().err, "evaluate"))
    assert (tmp_path / "partial" / "metrics.csv").exists()
    # a batch run's gallery in --out is rebuilt to link the table
    from saliency_kit.batch.gallery import write_gallery

    fresh = tmp_path / "with_gallery"
    fresh.mkdir()
    write_gallery(fresh)
    assert '"metrics.png"' not in (fresh / "index.html").read_text()
    assert main(["evaluate", images[0], "--method", "gradient", "--metric", "sparseness", "--out", str(fresh)]) == 0
    assert '"metrics.png"' in (fresh / "index.html").read_text()


def test_a_run_prints_the_table_it_wrote_and_its_progress_once(shapes_dir, tmp_path):
    out = tmp_path / "out"
    image = str(shapes_dir / "s2.png")  # no mask: the metrics it asked for are all scored
    status, stdout, stderr = run(
        "evaluate", image, "--model", SHAPES, "--method", "gradient", "--metric", "sparseness", "--out", out
    )
    assert status == 0, stderr
    progress = [line for line in own_lines(stderr, "evaluate") if " cells " in line]
    assert len(progress) == 1 and progress[0].startswith("saliency evaluate: 2/2 cells (100%)"), stderr
    lines = stdout.splitlines()
    paths = [str(out / name) for name in ("metrics.csv", "metrics.json", "metrics.png")]
    assert lines[-7:-4] == paths and lines[-4] == "mean over 1 image:"
    assert lines[-3].split() == ["method", "sparseness", "(higher", "is", "better)"]
    printed = {line.split()[0]: line.split()[1] for line in lines[-2:]}
    table = json.loads((out / "metrics.json").read_text())
    assert printed == {r["method"]: f"{r['mean']:.4g}" for r in table["rows"]} and set(printed) == {
        "gradient",
        "random",
    }
    with open(out / "metrics.csv", newline="") as handle:
        written = {line["method"]: float(line["value"]) for line in csv.DictReader(handle)}
    assert {method: f"{value:.4g}" for method, value in written.items()} == printed


def test_help_states_the_caveats(capsys):
    from saliency_kit.cli import main

    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "baseline" in text and "random" in text and "sensitivity metrics do not flag" in text


def test_the_parser_offers_every_declared_metric_and_builds_without_importing_them(capsys):
    """--metric's choices and the --help list are the registry's; building the parser imports none."""
    from saliency_kit import evaluate
    from saliency_kit.cli import main
    from saliency_kit.cli.evaluate import metric_names

    assert metric_names() == [declared.name for declared in evaluate.metrics()]
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(declared.name in text for declared in evaluate.metrics())
    assert "localisation, higher is better: relevance_mass_accuracy (needs masks)" in text
    code = "import sys\nfrom saliency_kit.cli import build_parser\nbuild_parser()\nprint('scipy' in sys.modules)"
    status, out, err = python(code)
    assert status == 0 and out.strip() == "False", err
