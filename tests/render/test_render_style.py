"""sk.render.Style: the presentation options of grid, series and volume, declared once. The keywords
the figures took before Style draw the very same pixels as the Style they build; an unknown keyword
is a TypeError naming the ones a figure takes, a bad value one ValueError line naming the field."""

import dataclasses
import io

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from saliency_kit import render
from saliency_kit.explanation import Explanation
from saliency_kit.render import Style
from saliency_kit.render.style import FIGURE_DEFAULTS, FIGURE_KEYWORDS

RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (2, 12, 16, 3), dtype=np.uint8)
SERIES = RNG.normal(size=(2, 10, 3))
VOLUMES = RNG.normal(size=(2, 4, 5, 6, 2))


def explanation(method: str, maps: np.ndarray, attributions: np.ndarray | None = None) -> Explanation:
    maps = np.asarray(maps, np.float32)
    b, k = maps.shape[:2]
    return Explanation(
        attributions=maps if attributions is None else attributions,
        maps=maps,
        targets=np.arange(b * k).reshape(b, k) % 2,
        scores=RNG.normal(size=(b, k)).astype(np.float32),
        method=method,
    )


GRADIENT = explanation("integrated_gradients", RNG.normal(size=(2, 2, 12, 16)))
CAM = explanation("gradcam", RNG.random((2, 1, 3, 4)))
SERIES_MAP = explanation("saliency", RNG.normal(size=(2, 1, 10)), attributions=RNG.normal(size=(2, 1, 10, 3)))
VOLUME_MAP = explanation("gradcam", RNG.random((2, 1, 4, 5, 6)))


def pixels(figure) -> np.ndarray:
    """The figure drawn: RGBA ``[H, W, 4]``."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def same(first: np.ndarray, figure) -> bool:
    """Whether ``figure`` draws the pixels ``first`` (each figure is drawn once: a second draw
    may move its constrained layout)."""
    second = pixels(figure)
    return first.shape == second.shape and bool((first == second).all())


# One call per figure with every style keyword it takes, set away from its default.
FIGURES = {
    "grid": (
        lambda **o: render.grid([GRADIENT, CAM], IMAGES, ["a", "b"], score_name="logit", **o),
        dict(
            sign="all",
            clip_percentile=90.0,
            cmap="viridis",
            alpha=0.3,
            overlay_cams=False,
            dpi=60,
            panel_inches=1.2,
            max_columns=1,
            max_features=3,
        ),
    ),
    "series": (
        lambda **o: render.series(SERIES_MAP, SERIES, index=1, per_feature=True, **o),
        dict(
            sign="positive",
            clip_percentile=95.0,
            cmap="magma",
            dpi=50,
            max_features=2,
            width_inches=4.0,
            row_inches=0.6,
        ),
    ),
    "volume": (
        lambda **o: render.volume(VOLUME_MAP, VOLUMES, axis=1, slices=3, **o),
        dict(sign="all", clip_percentile=80.0, cmap="RdBu_r", alpha=0.25, dpi=40, panel_inches=1.0),
    ),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_the_keywords_draw_the_same_pixels_as_the_style_they_build(name):
    draw, options = FIGURES[name]
    assert sorted(options) == sorted(FIGURE_KEYWORDS[name])  # every keyword the figure takes
    by_keywords = pixels(draw(**options))
    assert same(by_keywords, draw(style=Style(**options)))
    # a keyword overrides the same field of the style it is given with
    overridden = {field: value for field, value in options.items() if field != "dpi"}
    assert same(by_keywords, draw(style=Style(**overridden, dpi=300), dpi=options["dpi"]))


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_figure_without_style_draws_with_its_own_defaults(name):
    """The defaults each figure had as keywords: grid sign "abs", 150 dpi, 1.9-inch panels; series
    100 dpi; volume 100 dpi, 1.5-inch panels; 99th percentile, alpha 0.5, 5 columns, 12 features,
    a 7 x 0.9-inch series."""
    draw, _ = FIGURES[name]
    own = {"grid": dict(sign="abs", dpi=150, panel_inches=1.9), "series": dict(dpi=100)}
    own["volume"] = dict(dpi=100, panel_inches=1.5)
    assert FIGURE_DEFAULTS[name] == own[name]
    shared = dict(
        clip_percentile=99.0,
        alpha=0.5,
        overlay_cams=True,
        max_columns=5,
        max_features=12,
        width_inches=7.0,
        row_inches=0.9,
    )
    explicit = {field: value for field, value in {**shared, **own[name]}.items() if field in FIGURE_KEYWORDS[name]}
    plain = draw()
    assert plain.dpi == own[name]["dpi"]
    drawn = pixels(plain)
    assert same(drawn, draw(style=Style()))
    assert same(drawn, draw(**explicit))


def test_one_style_serves_every_figure():
    """A figure ignores the fields it does not draw with (series has no alpha, volume no columns)."""
    style = Style(sign="all", alpha=0.3, max_columns=2, width_inches=5.0, dpi=40)
    assert render.series(SERIES_MAP, SERIES, style=style).get_size_inches()[0] == 5.0
    assert render.volume(VOLUME_MAP, VOLUMES, style=style).dpi == 40
    assert render.grid(GRADIENT, IMAGES, style=style).dpi == 40


def test_the_png_of_an_explanation_is_drawn_at_100_dpi_unless_told():
    def width(data: bytes) -> int:
        return Image.open(io.BytesIO(data)).size[0]

    plain = width(render.explanation_png(CAM, IMAGES))
    assert plain == width(render.explanation_png(CAM, IMAGES, dpi=100))
    assert width(render.explanation_png(CAM, IMAGES, style=Style(dpi=50))) < plain
    assert width(render.explanation_png(CAM, IMAGES, style=Style(dpi=50), dpi=100)) == plain


@pytest.mark.parametrize(
    "call, unknown",
    [
        (lambda: render.grid(GRADIENT, IMAGES, colour="red"), "colour"),
        (lambda: render.series(SERIES_MAP, SERIES, alpha=0.3), "alpha"),  # a Style field, not one series draws with
        (lambda: render.volume(VOLUME_MAP, VOLUMES, max_columns=2), "max_columns"),
    ],
)
def test_an_unknown_keyword_is_a_type_error_naming_the_valid_ones(call, unknown):
    with pytest.raises(TypeError, match=rf"got an unexpected keyword argument '{unknown}'; it takes ") as error:
        call()
    message = str(error.value)
    assert "\n" not in message and "sign, clip_percentile, cmap" in message and "style" in message


def test_a_style_that_is_not_a_style_is_a_type_error():
    with pytest.raises(TypeError, match=r"style must be a sk.render.Style or None; received dict"):
        render.grid(GRADIENT, IMAGES, style={"sign": "all"})


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("sign", "both", r"in \['abs', 'all', 'negative', 'positive'\] or None"),
        ("clip_percentile", 0, r"in \(0, 100\]"),
        ("clip_percentile", float("nan"), r"in \(0, 100\]"),
        ("cmap", 3, "to be a matplotlib colormap name or Colormap, or None"),
        ("alpha", 1.5, r"in \[0, 1\]"),
        ("overlay_cams", "yes", "to be True or False"),
        ("dpi", 0, "> 0 or None"),
        ("panel_inches", -1.0, "> 0 or None"),
        ("max_columns", 0, "to be a whole number >= 1"),
        ("max_features", 2.5, "to be a whole number >= 1"),
        ("width_inches", True, "> 0"),
        ("row_inches", "1", "> 0"),
    ],
)
def test_a_bad_style_value_is_one_value_error_line_naming_the_field(field, value, valid):
    with pytest.raises(ValueError, match=rf"^Style needs {field} {valid}; received ") as error:
        Style(**{field: value})
    assert "\n" not in str(error.value)
    draw = next(draw for name, (draw, _) in sorted(FIGURES.items()) if field in FIGURE_KEYWORDS[name])
    with pytest.raises(ValueError, match=rf"^Style needs {field} {valid}; received "):  # as a keyword too
        draw(**{field: value})


def test_an_unknown_colormap_name_is_refused_when_the_style_is_made():
    with pytest.raises(ValueError, match=r"unknown colormap 'no-such-map'"):
        Style(cmap="no-such-map")
    with pytest.raises(ValueError, match=r"unknown colormap 'no-such-map'"):
        render.volume(VOLUME_MAP, VOLUMES, cmap="no-such-map")


def test_the_style_docstring_states_every_field_and_each_figure_names_its_keywords():
    for field in dataclasses.fields(Style):
        assert f"``{field.name}``" in Style.__doc__
    for name, keywords in FIGURE_KEYWORDS.items():
        doc = " ".join(getattr(render, name).__doc__.split())
        assert all(f"``{keyword}``" in doc for keyword in keywords), name
