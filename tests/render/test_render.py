"""sk.render: scaling, colours, overlays, grids and atomic PNG files, checked against hand-made
expectations (the colormap applied by hand, Pillow's own resize, explicit blends)."""

import io
import os

import matplotlib
import numpy as np
import pytest
from PIL import Image

from saliency_kit import files, render
from saliency_kit.render.colour import colorize


def colour(cmap: str, value: float) -> np.ndarray:
    return np.array(matplotlib.colormaps[cmap](value, bytes=True)[:3])


def explanation(method, maps, targets, scores):
    """A real sk.Explanation when the engine's class is there, with the fields grid() reads."""
    maps = np.asarray(maps, np.float32)
    try:
        from saliency_kit.explanation import Explanation
    except ImportError:  # pragma: no cover - before the engine lands
        import types

        return types.SimpleNamespace(
            method=method, maps=maps, targets=np.asarray(targets), scores=np.asarray(scores, np.float32)
        )
    fields = dict(
        attributions=maps,
        maps=maps,
        targets=np.asarray(targets),
        method=method,
        scores=np.asarray(scores, np.float32),
        options={},
    )
    import dataclasses

    names = {f.name for f in dataclasses.fields(Explanation)} if dataclasses.is_dataclass(Explanation) else set(fields)
    return Explanation(**{k: v for k, v in fields.items() if k in names})


# ------------------------------------------------------------------------------ heatmap
def test_heatmap_extremes_get_the_ends_of_the_colormap():
    m = np.zeros((4, 5), np.float32)
    m[1, 2] = 3.0
    m[2, 3] = -3.0
    rgb = render.heatmap(m, clip_percentile=100)
    assert rgb.shape == (4, 5, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[1, 2], colour("inferno", 1.0))
    np.testing.assert_array_equal(rgb[2, 3], colour("inferno", 1.0))  # abs: the sign is dropped
    np.testing.assert_array_equal(rgb[0, 0], colour("inferno", 0.0))


def test_positive_and_negative_keep_one_sign_each():
    m = np.array([[2.0, -1.0], [0.0, -2.0]])
    pos = render.heatmap(m, sign="positive", clip_percentile=100)
    neg = render.heatmap(m, sign="negative", clip_percentile=100)
    np.testing.assert_array_equal(pos[0, 0], colour("Reds", 1.0))
    np.testing.assert_array_equal(pos[0, 1], colour("Reds", 0.0))
    np.testing.assert_array_equal(neg[1, 1], colour("Blues", 1.0))
    np.testing.assert_array_equal(neg[0, 1], colour("Blues", 0.5))
    np.testing.assert_array_equal(neg[0, 0], colour("Blues", 0.0))


def test_all_is_diverging_with_zero_at_the_centre_and_symmetric():
    m = np.array([[0.0, 1.0, -1.0, 0.5]])
    unit = render.normalize(m, sign="all", clip_percentile=100)
    np.testing.assert_allclose(unit, [[0.5, 1.0, 0.0, 0.75]])
    rgb = render.heatmap(m, sign="all", clip_percentile=100)
    np.testing.assert_array_equal(rgb[0, 0], colour("RdBu_r", 0.5))
    np.testing.assert_allclose(render.normalize(-m, sign="all", clip_percentile=100), 1.0 - unit)


def test_clip_percentile_scales_by_the_percentile_not_the_outlier():
    m = np.linspace(0, 1, 100).reshape(10, 10)
    m[0, 0] = 1000.0
    p = np.percentile(np.abs(m), 90)
    np.testing.assert_allclose(render.normalize(m, clip_percentile=90), np.clip(np.abs(m) / p, 0, 1), rtol=1e-6)
    assert render.normalize(m, clip_percentile=100).max() == 1.0
    assert render.normalize(m, clip_percentile=100)[5, 5] < 0.001  # the outlier crushes the rest


def test_sparse_map_falls_back_to_its_maximum():
    m = np.zeros((20, 20))
    m[3, 4] = 0.25  # the 99th percentile is 0
    unit = render.normalize(m)
    assert unit[3, 4] == 1.0 and unit.sum() == 1.0


@pytest.mark.parametrize("sign", ["abs", "positive", "negative", "all"])
def test_all_zero_and_non_finite_maps_render_without_nan(sign):
    zero = render.heatmap(np.zeros((6, 6)), sign=sign)
    centre = 0.5 if sign == "all" else 0.0
    assert (zero == colour(render.DEFAULT_CMAPS[sign], centre)).all()
    weird = np.array([[np.nan, np.inf], [-np.inf, 1.0]])
    unit = render.normalize(weird, sign=sign)
    assert np.isfinite(unit).all() and unit.min() >= 0 and unit.max() <= 1
    assert unit[0, 0] == centre  # NaN is no evidence
    render.heatmap(np.full((3, 3), np.nan), sign=sign)
    render.overlay(np.zeros((5, 5, 3), np.uint8), np.full((3, 3), np.inf), sign=sign)


def test_sequence_maps_render_as_strip_and_matrix():
    assert render.heatmap(np.arange(7.0)).shape == (1, 7, 3)
    assert render.heatmap(np.ones((7, 3))).shape == (7, 3, 3)
    with pytest.raises(ValueError, match="explanation.maps"):
        render.heatmap(np.zeros((2, 3, 4, 5)))


def test_bad_options_are_clear():
    with pytest.raises(ValueError, match="sign"):
        render.heatmap(np.ones((2, 2)), sign="both")
    with pytest.raises(ValueError, match="clip_percentile"):
        render.heatmap(np.ones((2, 2)), clip_percentile=0)
    with pytest.raises(ValueError, match="colormap"):
        render.heatmap(np.ones((2, 2)), cmap="no-such-map")


# ------------------------------------------------------------------------------ overlay
def test_overlay_blends_the_resized_heatmap_over_the_image():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (30, 45, 3), dtype=np.uint8)
    small = rng.random((6, 9)).astype(np.float32)
    assert render.overlay(image, small, alpha=0.0).tolist() == image.tolist()

    # Independent expectation: scale, resize with Pillow, colour with matplotlib, blend.
    unit = np.clip(small / np.percentile(small, 99), 0, 1).astype(np.float32)
    resized = np.clip(np.asarray(Image.fromarray(unit, mode="F").resize((45, 30), Image.Resampling.BILINEAR)), 0, 1)
    heat = matplotlib.colormaps["inferno"](resized, bytes=True)[..., :3].astype(np.float64)
    expected = np.round(0.7 * image + 0.3 * heat)
    got = render.overlay(image, small, alpha=0.3)
    assert got.shape == (30, 45, 3) and got.dtype == np.uint8
    assert np.abs(got.astype(int) - expected).max() <= 1


def test_overlay_scales_a_16_bit_image_to_8_bits_instead_of_clipping():
    ramp = np.linspace(0, 65535, 8 * 8).reshape(8, 8).astype(np.uint16)
    image = np.repeat(ramp[..., None], 3, axis=-1)
    got = render.overlay(image, np.zeros((2, 2)), alpha=0.0)
    expected = np.round(ramp.astype(np.float64) / 257.0)  # 65535 -> 255, 257 -> 1
    assert (got[..., 0] == expected).all() and got.max() == 255 and got.min() == 0
    assert len(np.unique(got)) > 50  # not clipped: most of the ramp is distinct grey levels
    pillow_i16 = render.overlay(image.astype(np.int32), np.zeros((2, 2)), alpha=0.0)  # Pillow's "I;16"
    assert (pillow_i16 == got).all()


def test_overlay_accepts_grey_and_rgba_images():
    assert render.overlay(np.zeros((8, 8), np.uint8), np.ones((4, 4))).shape == (8, 8, 3)
    assert render.overlay(np.zeros((8, 8, 4), np.uint8), np.ones((4, 4))).shape == (8, 8, 3)
    with pytest.raises(TypeError, match="alpha"):
        render.overlay(np.zeros((8, 8, 3), np.uint8), np.ones((4, 4)), beta=1)


# ------------------------------------------------------------------------------ grid
def _no_pyplot_figures():
    from matplotlib import _pylab_helpers

    return _pylab_helpers.Gcf.get_num_fig_managers() == 0


def _boxes(fig):
    """Pixel boxes of every title, header and tick label after drawing, with their text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [
        t for ax in fig.axes if ax.axison for t in [ax.title, *ax.texts, *ax.get_yticklabels()] if t.get_text().strip()
    ]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def _assert_no_overlap(fig):
    boxes = _boxes(fig)
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            assert not box_a.overlaps(box_b), f"{a!r} runs into {b!r}"
    return boxes


def _panels(fig):
    """(axes, displayed array) of every axes that shows a picture."""
    return [(ax, ax.get_images()[0].get_array()) for ax in fig.axes if ax.get_images()]


def test_grid_lays_methods_by_classes_in_rows_with_every_title(tmp_path):
    rng = np.random.default_rng(1)
    originals = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    guided = explanation(
        "guided_backprop", rng.normal(size=(2, 2, 16, 16)), [[1, 0], [2, 1]], [[7.25, 1.5], [3.0, -2.0]]
    )
    cam = explanation("gradcam", rng.random((2, 1, 16, 16)), [[1], [2]], [[7.25], [3.0]])
    fig = render.grid([guided, cam], originals, ["circle", "square", "triangle"], row_labels=["a", "b"])
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    # Two inputs x (a guided row with two classes, a Grad-CAM row with one): 4 rows of input + 2.
    assert len(fig.axes) == 4 * 3
    shown = [(ax.get_title(), [t.get_text() for t in ax.texts]) for ax in fig.axes if ax.axison]
    assert shown == [
        (" \n ", ["a"]),
        ("square\n7.25", ["Guided Backprop"]),
        ("circle\n1.5", ["Guided Backprop"]),
        ("square\n7.25", ["Grad-CAM"]),
        (" \n ", ["b"]),
        ("triangle\n3", ["Guided Backprop"]),
        ("square\n-2", ["Guided Backprop"]),
        ("triangle\n3", ["Grad-CAM"]),
    ]
    _assert_no_overlap(fig)
    path = render.save_png(fig, tmp_path / "grid.png")
    with Image.open(path) as png:
        png.load()
        assert png.size[1] > png.size[0] > 100  # 4 rows of 3: taller than wide
    assert _no_pyplot_figures()


@pytest.mark.parametrize("methods, classes, shape", [(1, 1, (1, 2)), (4, 1, (1, 5)), (4, 3, (4, 4)), (1, 12, (3, 6))])
def test_grids_of_1_4_and_12_panels_fit_keep_the_input_aspect_and_titles_apart(tmp_path, methods, classes, shape):
    rng = np.random.default_rng(2)
    photo = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)  # 4:3, explained at 32 x 32
    names = ["gradient", "gradcam", "integrated_gradients", "smoothgrad"][:methods]
    items = [
        explanation(name, rng.random((1, classes, 32, 32)), [list(range(classes))], [list(rng.normal(size=classes))])
        for name in names
    ]
    long_names = [f"a rather long class name number {i} (Canis familiaris)" for i in range(classes)]
    fig = render.grid(items, [photo], long_names, score_name="logit")
    rows, cols = shape
    assert fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (rows, cols)
    boxes = _assert_no_overlap(fig)  # draws the figure: axes boxes are final after this
    panels = _panels(fig)
    assert len(panels) == 1 + methods * classes
    for ax, array in panels:  # every panel, heatmap or overlay, has the photo's aspect
        assert array.shape[0] / array.shape[1] == pytest.approx(0.75, abs=0.02)
        box = ax.get_window_extent()
        assert box.height / box.width == pytest.approx(0.75, abs=0.03)
    for text, box in boxes:
        assert box.width <= fig.axes[1].get_window_extent().width * 1.02, text
    width, height = fig.get_size_inches()
    assert width <= 6 * 1.9 + 0.01  # rows wrap instead of growing without end
    render.save_png(fig, tmp_path / f"grid-{methods}x{classes}.png")


def test_inputs_with_one_map_each_sit_side_by_side():
    rng = np.random.default_rng(7)
    photos = rng.integers(0, 256, (4, 20, 20, 3), dtype=np.uint8)
    e = explanation("gradient", rng.random((4, 1, 20, 20)), [[0]] * 4, [[1.0], [2.0], [3.0], [4.0]])
    fig = render.grid(e, photos, row_labels=["p", "q", "r", "s"])
    assert fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (2, 6)
    shown = [(ax.get_title(), [t.get_text() for t in ax.texts]) for ax in fig.axes if ax.axison]
    assert shown == [
        (" \n ", ["p"]),
        ("class 0\n1", ["Gradient"]),
        (" \n ", ["q"]),
        ("class 0\n2", ["Gradient"]),
        (" \n ", ["r"]),
        ("class 0\n3", ["Gradient"]),
        (" \n ", ["s"]),
        ("class 0\n4", ["Gradient"]),
    ]
    pictures = [np.asarray(a) for _, a in _panels(fig)]
    assert all((p == photo).all() for p, photo in zip(pictures[::2], photos))  # each input beside its map
    _assert_no_overlap(fig)


def test_inputs_stacked_one_per_line_have_method_headers_once():
    rng = np.random.default_rng(9)
    photos = rng.integers(0, 256, (3, 20, 30, 3), dtype=np.uint8)
    items = [
        explanation(m, rng.random((3, 1, 20, 30)), [[0]] * 3, [[1.0]] * 3)
        for m in ("gradient", "smoothgrad", "integrated_gradients", "gradcam")
    ]
    fig = render.grid(items, photos)
    assert fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (3, 5)
    headers = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert headers[:5] == [["Input"], ["Gradient"], ["SmoothGrad"], ["Integrated Gradients"], ["Grad-CAM"]]
    assert headers[5:] == [[]] * 10
    assert [ax.get_title() for ax in fig.axes][5:10] == [" \n ", "class 0\n1", "class 0\n1", "class 0\n1", "class 0\n1"]
    labelled = render.grid(items, photos, row_labels=["x", "y", "z"])
    assert [[t.get_text() for t in ax.texts] for ax in labelled.axes][5::5] == [["y"], ["z"]]
    _assert_no_overlap(fig)


def test_a_heatmap_panel_is_the_map_resized_to_the_image_as_shown():
    rng = np.random.default_rng(3)
    photo = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
    map_ = rng.random((12, 12)).astype(np.float32)
    fig = render.grid(explanation("gradient", map_[None, None], [[0]], [[1.0]]), [photo])
    (_, picture), (_, heat) = _panels(fig)
    assert picture.shape == (60, 90, 3) and (np.asarray(picture) == photo).all()
    unit = np.clip(map_ / np.percentile(map_, 99), 0, 1).astype(np.float32)
    resized = np.clip(np.asarray(Image.fromarray(unit, mode="F").resize((90, 60), Image.Resampling.BILINEAR)), 0, 1)
    expected = matplotlib.colormaps["inferno"](resized, bytes=True)[..., :3].astype(int)
    assert np.abs(np.asarray(heat).astype(int) - expected).max() <= 1


def test_tabular_explanations_get_bars_per_feature(tmp_path):
    rng = np.random.default_rng(4)
    attributions = rng.normal(size=(2, 2, 15)).astype(np.float32)
    features = rng.normal(size=(2, 15))
    e = explanation("gradient_x_input", attributions, [[0, 2], [1, 0]], [[1.0, 0.5], [2.0, -1.0]])
    e.maps = attributions.sum(-1)  # the engine's maps of a flat input: one number per target
    names = [f"feature {i}" for i in range(15)]
    fig = render.grid(e, features, ["low", "mid", "high"], feature_names=names, max_features=6)
    drawn = [ax for ax in fig.axes if ax.patches]
    assert len(drawn) == 4 and not _panels(fig)  # bars, no image column
    for ax, (i, k) in zip(drawn, [(0, 0), (0, 1), (1, 0), (1, 1)]):
        values = attributions[i, k]
        top = sorted(range(15), key=lambda f: -abs(values[f]))[:6]  # largest magnitudes first
        heights = [p.get_width() for p in ax.patches]
        assert heights == pytest.approx([values[f] for f in reversed(top)])
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [f"feature {f} = {features[i, f]:.3g}" for f in reversed(top)]
        colours = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches]
        assert colours == ["#c0392b" if values[f] >= 0 else "#2e6db4" for f in reversed(top)]
    assert fig.axes[0].get_title() == "low\n1"
    _assert_no_overlap(fig)
    render.save_png(fig, tmp_path / "tabular.png")


def test_grid_without_class_names_and_with_sequences(tmp_path):
    seq = explanation(
        "gradient", np.random.default_rng(2).normal(size=(3, 1, 40)), [[0], [1], [0]], [[1.0], [2.0], [3.0]]
    )
    seq.attributions = np.zeros((3, 1, 40, 4), np.float32)
    fig = render.grid(seq, np.random.default_rng(3).normal(size=(3, 40, 4)))
    assert fig.axes[1].get_title() == "class 0\n1"
    render.save_png(fig, tmp_path / "seq.png")
    with pytest.raises(ValueError, match="originals"):
        render.grid(seq, np.zeros((2, 40, 4)))


def test_fit_text_wraps_and_shortens_within_the_width():
    assert render.fit_text("conv", 1.0, 8) == "conv"
    two = render.fit_text("block5_conv3 re-initialised with a long layer name", 1.25, 7, lines=2)
    lines = two.split("\n")
    assert len(lines) == 2 and lines[1].endswith("\u2026")
    assert all(len(line) <= int(1.25 * 72 / (7 * 0.6)) for line in lines)
    assert render.fit_text("costs $5", 3, 8) == r"costs \$5"  # shown as typed, not as mathtext


# ------------------------------------------------------------------------------ display
def test_an_explanation_shows_itself_as_a_png_grid():
    import io

    from saliency_kit.explanation import Explanation

    rng = np.random.default_rng(5)
    maps = rng.random((12, 2, 16, 24)).astype(np.float32)
    e = Explanation(
        attributions=maps,
        maps=maps,
        targets=np.zeros((12, 2), np.int64),
        scores=np.ones((12, 2), np.float32),
        method="gradient",
    )
    bare = Image.open(io.BytesIO(e._repr_png_()))
    assert bare.format == "PNG" and bare.size[0] > 100
    shown = e.with_originals(rng.integers(0, 256, (12, 32, 48, 3), dtype=np.uint8), ["cat", "dog"])
    assert shown.maps is e.maps and "_display" not in e.__dict__
    with_input = Image.open(io.BytesIO(shown._repr_png_()))
    assert with_input.size[0] > bare.size[0]  # the input column was added
    # Only the first 8 inputs are drawn: the height is 8 rows' worth, not 12.
    eight = Image.open(io.BytesIO(render.explanation_png(e, max_inputs=8)))
    four = Image.open(io.BytesIO(render.explanation_png(e, max_inputs=4)))
    assert eight.size == bare.size and 1.8 < eight.size[1] / four.size[1] < 2.2
    assert np.asarray(bare.convert("L")).std() > 10  # a picture, not a blank page


def test_show_saves_and_warns_without_a_display(tmp_path):
    import warnings

    e = explanation("gradcam", np.random.default_rng(6).random((1, 1, 8, 8)), [[0]], [[1.0]])
    with pytest.warns(UserWarning, match="no display"):
        assert render.show(e, np.zeros((1, 8, 8, 3), np.uint8)) is None
    assert _no_pyplot_figures()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        render.show(e, path=tmp_path / "shown.png")
    with Image.open(tmp_path / "shown.png") as png:
        assert png.format == "PNG"


# ------------------------------------------------------------------------------ files
def test_save_png_round_trips_and_leaves_no_temporary_files(tmp_path):
    rgb = render.heatmap(np.arange(12.0).reshape(3, 4))
    path = render.save_png(rgb, tmp_path / "sub" / "h.png")
    with Image.open(path) as png:
        assert np.array_equal(np.asarray(png.convert("RGB")), rgb)
    assert os.listdir(tmp_path / "sub") == ["h.png"]
    with pytest.raises(ValueError, match="uint8"):
        render.save_png(np.zeros((3, 3), np.float32), tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_atomic_path_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with files.atomic_path(target) as temp:
            with open(temp, "wb") as handle:
                handle.write(b"half")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.png"]


@pytest.mark.parametrize("cmap", ["inferno", "Reds", "RdBu_r", "gray", "viridis"])
def test_colours_are_exactly_matplotlibs(cmap):
    unit = np.concatenate([np.linspace(0, 1, 2001), [0.0, 1.0, 0.5, 1 / 256, 255 / 256]]).astype(np.float32)
    expected = matplotlib.colormaps[cmap](unit, bytes=True)[..., :3]
    np.testing.assert_array_equal(colorize(unit, cmap, "abs"), expected)


def test_atomic_files_get_the_usual_permissions(tmp_path):
    (tmp_path / "plain.png").write_bytes(b"x")  # what open() gives under this umask
    render.save_png(np.zeros((2, 2, 3), np.uint8), tmp_path / "atomic.png")
    with files.atomic_path(tmp_path / "ctx.bin") as temp:
        with open(temp, "wb") as handle:
            handle.write(b"y")
    mode = (tmp_path / "plain.png").stat().st_mode & 0o777
    assert (tmp_path / "atomic.png").stat().st_mode & 0o777 == mode
    assert (tmp_path / "ctx.bin").stat().st_mode & 0o777 == mode


def test_a_colormap_object_works_like_its_name():
    m = np.random.default_rng(4).normal(size=(9, 7))
    np.testing.assert_array_equal(
        render.heatmap(m, cmap=matplotlib.colormaps["viridis"]), render.heatmap(m, cmap="viridis")
    )


def test_grid_takes_any_object_with_maps_targets_scores_and_method():
    """The command line hands grid() light rows (no attributions): drawn from their maps."""
    import types

    rng = np.random.default_rng(8)
    row = types.SimpleNamespace(
        method="gradcam", maps=rng.random((1, 2, 8, 8)), targets=np.array([[0, 1]]), scores=np.array([[1.0, 0.5]])
    )
    fig = render.grid([row], rng.integers(0, 256, (1, 16, 24, 3), dtype=np.uint8), ["a", "b"])
    assert len(_panels(fig)) == 3 and [ax.get_title() for ax in fig.axes if ax.axison][1:] == ["a\n1", "b\n0.5"]


def test_an_explanation_made_without_scores_is_titled_by_its_class_alone(tmp_path):
    seq = explanation(
        "gradient", np.random.default_rng(2).normal(size=(3, 1, 40)), [[0], [1], [0]], [[1.0], [2.0], [3.0]]
    )
    seq.attributions, seq.scores = np.zeros((3, 1, 40, 4), np.float32), None
    originals = np.random.default_rng(3).normal(size=(3, 40, 4))
    fig = render.grid(seq, originals)
    titles = [ax.get_title() for ax in fig.axes if ax.axison and ax.get_title().strip()]
    assert titles == ["class 0\n", "class 1\n", "class 0\n"]
    render.save_png(fig, tmp_path / "no_scores.png")
    first_two = Image.open(io.BytesIO(render.explanation_png(seq, originals, max_inputs=2)))
    assert first_two.format == "PNG"
