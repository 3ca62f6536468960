"""Pictures of time series, volumes and tokens: real figures and PNGs of the right size, colours read
back from what was drawn, and token HTML that no input text can add markup to."""

import dataclasses
import io

import keras
import matplotlib
import numpy as np
import pytest
from PIL import Image
from render.html_elements import Elements

import saliency_kit as sk
from saliency_kit.render import normalize, png_bytes


def png_size(figure) -> tuple[int, int]:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")  # the figure as laid out (png_bytes trims the margins)
    return Image.open(io.BytesIO(buffer.getvalue())).size


@pytest.fixture(scope="module")
def series_case():
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [
            keras.Input((20, 3)),
            keras.layers.Conv1D(4, 5, strides=2, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(2),
        ]
    )
    x = np.random.default_rng(0).normal(size=(2, 20, 3)).astype("float32")
    return x, sk.explain(model, x, "gradcam", "top2"), sk.explain(model, x, "integrated_gradients", 0, steps=8)


@pytest.fixture(scope="module")
def volume_case():
    keras.utils.set_random_seed(4)
    model = keras.Sequential(
        [
            keras.Input((5, 6, 7, 2)),
            keras.layers.Conv3D(3, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(2),
        ]
    )
    x = np.random.default_rng(1).normal(size=(2, 5, 6, 7, 2)).astype("float32")
    return x, sk.explain(model, x, "gradcam", 1)


# -- time series ---------------------------------------------------------------------------------------
def test_series_draws_each_feature_as_a_line_over_a_band_of_the_map(series_case):
    x, cam, _ = series_case
    fig = sk.render.series(cam, x, k=1, index=1, width_inches=6.0, dpi=80)
    assert isinstance(fig, matplotlib.figure.Figure)
    lines = [ax for ax in fig.axes if ax.lines]
    bands = [ax for ax in fig.axes if ax.images]
    assert len(lines) == len(bands) == 3
    for f, ax in enumerate(lines):
        np.testing.assert_allclose(ax.lines[0].get_ydata(), x[1, :, f])
    expected = normalize(cam.maps[1, 1], sign="abs")  # Grad-CAM is unsigned: the magnitude scale
    for ax in bands:
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array())[0], expected, atol=1e-6)
    width, height = png_size(fig)
    assert width == 6.0 * 80 and abs(height - (3 * 0.9 * 1.3 + 0.7) * 80) <= 1  # three rows of line and band
    png = Image.open(io.BytesIO(png_bytes(fig)))
    assert png.format == "PNG" and abs(png.size[0] - width) <= 0.1 * width  # margins trimmed to 0.05 inch


def test_series_per_feature_bands_signed_scale_and_channels_first_inputs(series_case):
    x, _, ig = series_case
    fig = sk.render.series(ig, x, per_feature=True, feature_names=["a", "b", "c"])
    bands = [ax for ax in fig.axes if ax.images]
    expected = normalize(ig.attributions[0, 0].T, sign="all")  # IG is signed: diverging, 0.5 is zero
    for f, ax in enumerate(bands):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array())[0], expected[f], atol=1e-6)
    assert [ax.get_ylabel() for ax in fig.axes if ax.lines] == ["a", "b", "c"]
    first = sk.render.series(ig, np.moveaxis(x, -1, 1))  # [B, F, T]: found from the map's length
    for a, b in zip([ax for ax in first.axes if ax.lines], [ax for ax in fig.axes if ax.lines]):
        np.testing.assert_allclose(a.lines[0].get_ydata(), b.lines[0].get_ydata())
    capped = sk.render.series(ig, x, max_features=2)
    assert len([ax for ax in capped.axes if ax.lines]) == 2 and "first 2 of 3 features" in capped._suptitle.get_text()


def test_series_refuses_what_it_cannot_draw_in_one_line(series_case, volume_case):
    x, cam, _ = series_case
    for call, message in [
        (lambda: sk.render.series(volume_case[1], volume_case[0]), r"use sk\.render\.volume"),
        (lambda: sk.render.series(cam, x[:, :10]), r"time axis has the map's length 20"),
        (lambda: sk.render.series(cam, x, k=2), r"k in \[0, 2\); received 2"),
        (lambda: sk.render.series(cam, x, per_feature=True), r"a CAM has one value per time step"),
        (lambda: sk.render.series(cam, x, feature_names=["a"]), r"one feature name per feature \(3\)"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert "\n" not in str(err.value)


# -- volumes -------------------------------------------------------------------------------------------
def test_volume_draws_a_row_of_slices_blended_over_the_input(volume_case):
    x, cam = volume_case
    fig = sk.render.volume(cam, None, index=1, slices=[0, 2, 4], panel_inches=1.2, dpi=90)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["depth 0", "depth 2", "depth 4"]
    heat = matplotlib.colormaps["inferno"](normalize(cam.maps[1, 0], sign="abs"))[..., :3]
    for ax, d in zip(panels, (0, 2, 4)):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), heat[d], atol=1e-6)

    blended = sk.render.volume(cam, x, slices=2, axis=2, alpha=0.25)
    panels = [ax for ax in blended.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["width 0", "width 6"]
    grey = x[0].mean(-1)
    grey = (grey - grey.min()) / (grey.max() - grey.min())
    heat = matplotlib.colormaps["inferno"](normalize(cam.maps[0, 0], sign="abs"))[..., :3]
    np.testing.assert_allclose(
        np.asarray(panels[1].images[0].get_array()), 0.75 * grey[:, :, 6, None] + 0.25 * heat[:, :, 6], atol=1e-6
    )
    width, _ = png_size(fig)
    assert width == round((1.2 * 3 + 0.9) * 90)


def test_volumes_are_refused_by_the_grid_and_shown_as_slices_in_notebooks(volume_case, series_case):
    x, cam = volume_case
    with pytest.raises(
        ValueError, match=r"sk\.render\.volume\(explanation, inputs\); received maps of shape \(2, 1, 5, 6, 7\)\."
    ):
        sk.render.grid(cam, x)
    with pytest.raises(ValueError, match=r"use sk\.render\.series"):
        sk.render.volume(series_case[1], series_case[0])
    with pytest.raises(ValueError, match=r"slice indices in \[0, 5\)"):
        sk.render.volume(cam, x, slices=[5])
    with pytest.raises(ValueError, match=r"matching the map \(5, 6, 7\)"):
        sk.render.volume(cam, x[:, :4])
    png = Image.open(io.BytesIO(cam.with_originals(x)._repr_png_()))
    assert png.format == "PNG" and png.size[0] > png.size[1]  # a row of slices


# -- tokens ----------------------------------------------------------------------------------------------
def parse(fragment: str) -> list[dict]:
    return Elements(fragment).elements


def token_explanation(values, method="gradient_x_input"):
    values = np.asarray(values, "float32")
    return sk.Explanation(
        attributions=values[:, None, :, None],
        maps=values[:, None],
        targets=np.zeros((len(values), 1), int),
        scores=np.ones((len(values), 1), "float32"),
        method=method,
    )


HOSTILE = ['<script>alert("x")</script>', "it's", '"><img src=x onerror=alert(1)>', "a & b", "</span></div>", "  "]


def test_tokens_html_escapes_every_token_and_holds_only_its_spans_and_legend():
    expl = token_explanation([[3.0, -1.0, 0.5, 0.0, -2.0, 1.0, 9.0]], method='evil<b onmouseover="x">')
    fragment = sk.render.tokens_html(expl, HOSTILE, class_names=["<i>cls</i>"])
    elements = parse(fragment)
    assert {e["tag"] for e in elements} == {"div", "span"}
    classes = [e["attrs"].get("class") for e in elements]
    assert classes.count("saliency-token") == len(HOSTILE)
    assert set(classes) <= {
        "saliency-tokens",
        "saliency-tokens-title",
        "saliency-tokens-row",
        "saliency-tokens-label",
        "saliency-token",
        "saliency-tokens-legend",
        "saliency-tokens-scale",
        None,
    }
    assert all(set(e["attrs"]) <= {"class", "style", "title"} for e in elements)
    shown = [e["text"] for e in elements if e["attrs"].get("class") == "saliency-token"]
    assert shown == HOSTILE  # the text comes back exactly as given, as text
    assert "<script" not in fragment and "<img" not in fragment and "<b " not in fragment and "<i>" not in fragment
    title = next(e for e in elements if e["attrs"].get("class") == "saliency-tokens-title")
    assert title["text"] == 'evil<b onmouseover="x">'
    label = next(e for e in elements if e["attrs"].get("class") == "saliency-tokens-label")
    assert label["text"] == "input 0 · <i>cls</i>:"


def test_tokens_are_coloured_on_a_diverging_scale_with_zero_at_the_centre_colour():
    expl = token_explanation([[-2.0, 0.0, 1.0, 2.0], [0.5, -1.0, 0.0, 0.0]])
    fragment = sk.render.tokens_html(expl, [["a", "b", "c", "d"], ["e", "f"]], clip_percentile=100)
    spans = [e for e in parse(fragment) if e["attrs"].get("class") == "saliency-token"]
    assert [s["text"] for s in spans] == list("abcdef")  # the second input's padding is not shown
    cmap = matplotlib.colormaps["RdBu_r"]

    def colour(value):  # the scale is shared by both inputs: ±2
        r, g, b = (round(c * 255) for c in cmap(min(int((value / 2 + 1) / 2 * cmap.N), cmap.N - 1))[:3])
        return f"#{r:02x}{g:02x}{b:02x}"

    for span, value in zip(spans, [-2.0, 0.0, 1.0, 2.0, 0.5, -1.0]):
        assert f"background-color:{colour(value)};" in span["attrs"]["style"]
        assert span["attrs"]["title"].endswith(f"{value:+.4g}")
    centre = "#" + "".join(f"{round(c * 255):02x}" for c in cmap(0.5)[:3])
    assert colour(0.0) == centre and min(cmap(0.5)[:3]) > 0.9  # zero: the scale's (near-white) centre colour
    legend = next(e for e in parse(fragment) if e["attrs"].get("class") == "saliency-tokens-legend")
    assert "-2" in fragment and "+2" in fragment and legend["tag"] == "div"


def test_explanations_with_tokens_display_as_html_and_others_as_their_grid():
    expl = token_explanation([[1.0, -1.0, 0.5]])
    assert expl.tokens is None and expl._repr_html_() is None
    assert Image.open(io.BytesIO(expl._repr_png_())).format == "PNG"
    shown = expl.with_tokens(["<script>", "b", "c"])
    assert shown.tokens == [["<script>", "b", "c"]] and expl.tokens is None  # a copy; the original unchanged
    assert shown._repr_html_() == sk.render.tokens_html(expl, ["<script>", "b", "c"]) and shown._repr_png_() is None
    assert shown.maps is expl.maps


def test_tokens_are_checked_in_one_line():
    expl = token_explanation([[1.0, 2.0], [3.0, 4.0]])
    for tokens, error, message in [
        ("ab", TypeError, r"a list of str per input"),
        ([["a"]], ValueError, r"one list per explained input \(2\); received 1\."),
        (["a", "b"], ValueError, r"one list per explained input \(2\); received 1\."),
        ([["a", "b", "c"], ["d"]], ValueError, r"tokens\[0\] has 3 tokens but the map has 2 positions"),
        ([["a", 1], ["b"]], TypeError, r"tokens\[0\] must be a list of str"),
    ]:
        with pytest.raises(error, match=message) as err:
            sk.render.tokens_html(expl, tokens)
        assert "\n" not in str(err.value)
    image_maps = sk.Explanation(
        attributions=np.zeros((1, 1, 4, 4, 3)),
        maps=np.zeros((1, 1, 4, 4)),
        targets=np.zeros((1, 1), int),
        scores=np.zeros((1, 1)),
        method="gradient",
    )
    with pytest.raises(ValueError, match=r"tokens need maps \[B, K, T\]"):
        image_maps.with_tokens(["a"])


def test_a_series_made_without_scores_is_headed_without_one(series_case):
    x, _, ig = series_case
    fig = sk.render.series(dataclasses.replace(ig, scores=None), x)
    heading = fig._suptitle.get_text()
    assert heading.startswith("Integrated Gradients · input 0 · class") and "score" not in heading
    assert "score" in sk.render.series(ig, x)._suptitle.get_text()
