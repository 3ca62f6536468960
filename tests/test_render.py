"""sk.render: scaling, colours, overlays, grids and atomic PNG files, checked against hand-made
expectations (the colormap applied by hand, Pillow's own resize, explicit blends)."""
import os

import matplotlib
import numpy as np
import pytest
from PIL import Image

from saliency_kit import render


def colour(cmap: str, value: float) -> np.ndarray:
    return np.array(matplotlib.colormaps[cmap](value, bytes=True)[:3])


def explanation(method, maps, targets, scores):
    """A real sk.Explanation when the engine's class is there, with the fields grid() reads."""
    maps = np.asarray(maps, np.float32)
    try:
        from saliency_kit.explanation import Explanation
    except ImportError:  # pragma: no cover - before the engine lands
        import types
        return types.SimpleNamespace(method=method, maps=maps, targets=np.asarray(targets),
                                     scores=np.asarray(scores, np.float32))
    fields = dict(attributions=maps, maps=maps, targets=np.asarray(targets), method=method,
                  scores=np.asarray(scores, np.float32), options={})
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


def test_overlay_accepts_grey_and_rgba_images():
    assert render.overlay(np.zeros((8, 8), np.uint8), np.ones((4, 4))).shape == (8, 8, 3)
    assert render.overlay(np.zeros((8, 8, 4), np.uint8), np.ones((4, 4))).shape == (8, 8, 3)
    with pytest.raises(TypeError, match="alpha"):
        render.overlay(np.zeros((8, 8, 3), np.uint8), np.ones((4, 4)), beta=1)


# ------------------------------------------------------------------------------ grid
def _no_pyplot_figures():
    from matplotlib import _pylab_helpers

    return _pylab_helpers.Gcf.get_num_fig_managers() == 0


def test_grid_layout_titles_and_no_pyplot_state(tmp_path):
    rng = np.random.default_rng(1)
    originals = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    guided = explanation("guided_backprop", rng.normal(size=(2, 2, 16, 16)), [[1, 0], [2, 1]],
                         [[7.25, 1.5], [3.0, -2.0]])
    cam = explanation("gradcam", rng.random((2, 1, 16, 16)), [[1], [2]], [[7.25], [3.0]])
    fig = render.grid([guided, cam], originals, ["circle", "square", "triangle"], row_labels=["a", "b"])
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2 * (1 + 2 + 1)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[1] == "square  7.25" and titles[2] == "circle  1.5" and titles[3] == "square  7.25"
    assert titles[5] == "triangle  3" and titles[6] == "square  -2"
    headers = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert headers == ["Input", "Guided Backprop", "Guided Backprop", "Grad-CAM"]
    path = render.save_png(fig, tmp_path / "grid.png")
    with Image.open(path) as png:
        png.load()
        assert png.size[0] > png.size[1] > 100
    assert _no_pyplot_figures()


def test_grid_without_class_names_and_with_sequences(tmp_path):
    seq = explanation("gradient", np.random.default_rng(2).normal(size=(3, 1, 40)), [[0], [1], [0]],
                      [[1.0], [2.0], [3.0]])
    fig = render.grid(seq, np.random.default_rng(3).normal(size=(3, 40, 4)))
    assert fig.axes[1].get_title() == "class 0  1"
    render.save_png(fig, tmp_path / "seq.png")
    with pytest.raises(ValueError, match="originals"):
        render.grid(seq, np.zeros((2, 40, 4)))


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
        with render.atomic_path(target) as temp:
            with open(temp, "wb") as handle:
                handle.write(b"half")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.png"]


@pytest.mark.parametrize("cmap", ["inferno", "Reds", "RdBu_r", "gray", "viridis"])
def test_colours_are_exactly_matplotlibs(cmap):
    unit = np.concatenate([np.linspace(0, 1, 2001), [0.0, 1.0, 0.5, 1 / 256, 255 / 256]]).astype(np.float32)
    expected = matplotlib.colormaps[cmap](unit, bytes=True)[..., :3]
    np.testing.assert_array_equal(render._colorize(unit, cmap, "abs"), expected)


def test_atomic_files_get_the_usual_permissions(tmp_path):
    (tmp_path / "plain.png").write_bytes(b"x")  # what open() gives under this umask
    render.save_png(np.zeros((2, 2, 3), np.uint8), tmp_path / "atomic.png")
    with render.atomic_path(tmp_path / "ctx.bin") as temp:
        with open(temp, "wb") as handle:
            handle.write(b"y")
    mode = (tmp_path / "plain.png").stat().st_mode & 0o777
    assert (tmp_path / "atomic.png").stat().st_mode & 0o777 == mode
    assert (tmp_path / "ctx.bin").stat().st_mode & 0o777 == mode


def test_a_colormap_object_works_like_its_name():
    m = np.random.default_rng(4).normal(size=(9, 7))
    np.testing.assert_array_equal(render.heatmap(m, cmap=matplotlib.colormaps["viridis"]),
                                  render.heatmap(m, cmap="viridis"))
