"""A method written outside the package and installed as a distribution (an entry point in the
group ``saliency_kit.methods``): the command line lists it, offers its declared option as a flag,
runs it in ``saliency explain`` and ``saliency batch`` with the value given, and rendering titles
it — with no edit to the package. The distribution is real: a ``.dist-info`` folder with
``entry_points.txt`` on ``PYTHONPATH``, found by ``importlib.metadata`` in each fresh process."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cli_support import ROOT, environment, own_lines, run, save_tiny_model
from PIL import Image

PLUGIN = '''
"""An outside method: |∂s/∂x| to a power (the Python guide's plugin example)."""
import tensorflow as tf

from saliency_kit import methods


@methods.register("gradient_power", summary="|gradient| to a power (a plugin)", title="Gradient Power",
                  options=[methods.Option("power", 2.0, help="the exponent")], reduce="sum")
def gradient_power(ctx, power):
    return tf.abs(ctx.gradients(ctx.inputs)) ** power
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sk_plugin_methods.py").write_text(PLUGIN)
    info = site / "sk_plugin_methods-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sk-plugin-methods\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[saliency_kit.methods]\ngradient_power = sk_plugin_methods\n")
    return environment(PYTHONPATH=f"{ROOT}:{site}")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin_images")
    rng = np.random.default_rng(3)
    for name in ("a.png", "b.png"):
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / name)
    return root


def test_saliency_methods_lists_the_plugin(plugin_env):
    code, out, err = run("methods", env=plugin_env)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.split()[:1] == ["gradient_power"])
    assert "(a plugin)" in line
    code, out, _ = run("methods")  # without the distribution on the path: not there
    assert code == 0 and "gradient_power" not in out


def test_explain_help_offers_the_declared_option(plugin_env):
    code, out, err = run("explain", "--help", env=plugin_env)
    assert code == 0, err
    assert "--power" in out and "gradient_power" in out


def test_batch_runs_the_plugin_with_its_flag_and_the_maps_follow_it(plugin_env, images, tmp_path):
    model = save_tiny_model(tmp_path / "tiny.keras")
    outs = {}
    for power in ("1", "3"):
        out = tmp_path / f"out{power}"
        code, _, err = run(
            "batch",
            images,
            "--out",
            out,
            "--model",
            model,
            "--method",
            "gradient_power",
            "--power",
            power,
            "--format",
            "npz",
            env=plugin_env,
        )
        assert code == 0, own_lines(err, "batch") or err
        records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
        ok = [r for r in records if r.get("status") == "ok"]
        assert {r["image"] for r in ok} == {"a.png", "b.png"} and {r["method"] for r in ok} == {"gradient_power"}
        outs[power] = {r["image"]: np.load(out / r["file"]) for r in ok}
    for image in ("a.png", "b.png"):
        one, three = (outs[p][image] for p in ("1", "3"))
        key = "attributions" if "attributions" in one.files else one.files[0]
        a1, a3 = one[key].astype(np.float64), three[key].astype(np.float64)
        # the flag reached the method: |g|**3 == (|g|**1)**3
        np.testing.assert_allclose(a3, a1**3, rtol=1e-4, atol=1e-12)
        assert np.abs(a1).max() > 0


def test_rendering_titles_the_plugin_by_its_declaration(plugin_env):
    code = textwrap.dedent("""
        import numpy as np, keras
        import saliency_kit as sk
        from saliency_kit import render
        keras.utils.set_random_seed(0)
        inputs = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
        outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x))
        model = keras.Model(inputs, outputs)
        x = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype("float32")
        e = sk.explain(model, x, "gradient_power", targets="top1", power=2.0)
        fig = render.grid(e, (np.clip(x, 0, 1) * 255).astype("uint8"))
        texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
        print(render.method_title("gradient_power"), any("Gradient Power" in t for t in texts))
    """)
    done = subprocess.run([sys.executable, "-c", code], env=plugin_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "Gradient Power True"


METRIC_PLUGIN = '''
"""An outside metric: the mean |map| of each map (model-free; lower is better)."""
import numpy as np

from saliency_kit import evaluate


@evaluate.metric("mean_magnitude", family="complexity", higher_is_better=False)
def mean_magnitude(model=None, inputs=None, explanation_or_method="gradient", targets="top1", *, maps=None, **options):
    values = np.abs(np.asarray(maps if maps is not None else explanation_or_method.maps, dtype=np.float64))
    return values.reshape(*values.shape[:2], -1).mean(axis=-1)
'''


@pytest.fixture(scope="module")
def metric_plugin_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("metric_site")
    (site / "sk_plugin_metrics.py").write_text(METRIC_PLUGIN)
    info = site / "sk_plugin_metrics-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sk-plugin-metrics\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[saliency_kit.metrics]\nmean_magnitude = sk_plugin_metrics\n")
    return environment(PYTHONPATH=f"{ROOT}:{site}")


def test_an_installed_metric_joins_the_registry_the_help_and_saliency_evaluate(metric_plugin_env, images, tmp_path):
    listing = "from saliency_kit import evaluate; print(' '.join(m.name for m in evaluate.metrics()))"
    done = subprocess.run([sys.executable, "-c", listing], env=metric_plugin_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "mean_magnitude"  # after the built-ins
    code, out, err = run("evaluate", "--help", env=metric_plugin_env)
    assert code == 0 and "mean_magnitude" in out, err
    code, out, _ = run("evaluate", "--help")  # without the distribution on the path: not there
    assert code == 0 and "mean_magnitude" not in out
    model = save_tiny_model(tmp_path / "tiny.keras")
    out_dir = tmp_path / "scored"
    code, _, err = run(
        "evaluate",
        images / "a.png",
        "--model",
        model,
        "--method",
        "gradient",
        "--metric",
        "mean_magnitude",
        "--out",
        out_dir,
        env=metric_plugin_env,
    )
    assert code == 0, own_lines(err, "evaluate") or err
    rows = json.loads((out_dir / "metrics.json").read_text())["rows"]
    assert {(r["method"], r["metric"]) for r in rows} == {("gradient", "mean_magnitude"), ("random", "mean_magnitude")}
    assert all(r["mean"] > 0 and r["higher_is_better"] is False for r in rows)
