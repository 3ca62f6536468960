"""What every kind of explanation shows in a notebook (``_repr_png_`` and ``_repr_html_``): an image,
several inputs, token ids (with and without their tokens), a time series and a volume. Each PNG is
decoded with Pillow and measured against the pictures of its parts; each HTML fragment is parsed
back with an HTML parser, and no name or token adds markup to it."""

import base64
import dataclasses
import io
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
from PIL import Image
from render.html_elements import Elements

import saliency_kit as sk
from saliency_kit.explanation import Explanation
from saliency_kit.render import explanation_png

RNG = np.random.default_rng(7)
B, K, T = 3, 2, 6
HOSTILE = '<script>alert("x")</script>&"\''


def decoded(data) -> Image.Image:
    assert isinstance(data, bytes)
    picture = Image.open(io.BytesIO(data))
    picture.load()
    assert picture.format == "PNG"
    return picture


def made(maps, attributions=None, method="gradient", parts=None):
    return Explanation(
        attributions=maps if attributions is None else attributions,
        maps=maps,
        targets=np.tile(np.arange(K), (B, 1)),
        scores=RNG.normal(size=(B, K)).astype("float32"),
        method=method,
        parts=parts,
    )


def alone(e, maps, attributions=None):
    """Explanation ``e``'s part of these maps by itself, as a plain explanation."""
    return dataclasses.replace(e, maps=maps, attributions=maps if attributions is None else attributions, parts=None)


def image_maps(h=10, w=14):
    return RNG.random((B, K, h, w)).astype("float32")


def tabular():
    attributions = RNG.normal(size=(B, K, 5)).astype("float32")
    return np.abs(attributions).max(axis=-1), attributions


# -- one part: the grid, the slices, no HTML ---------------------------------------------------------------
def test_an_image_explanation_shows_its_grid_and_no_html():
    e = made(image_maps())
    png = decoded(e._repr_png_())
    assert png.size == decoded(explanation_png(e)).size and np.asarray(png.convert("L")).std() > 10
    assert e._repr_html_() is None  # Jupyter falls back to the PNG
    photos = RNG.integers(0, 256, (B, 20, 28, 3), dtype=np.uint8)
    assert decoded(e.with_originals(photos)._repr_png_()).size[0] > png.size[0]  # the input column


def test_a_time_series_shows_strips_and_a_volume_its_slices():
    series = made(RNG.random((B, K, 24)).astype("float32"), RNG.random((B, K, 24, 3)).astype("float32"))
    png = decoded(series._repr_png_())
    assert png.size == decoded(explanation_png(series)).size and series._repr_html_() is None
    with_inputs = decoded(series.with_originals(RNG.normal(size=(B, 24, 3)))._repr_png_())
    assert with_inputs.size[0] > png.size[0]

    volume = made(RNG.random((B, K, 5, 6, 7)).astype("float32"), method="gradcam")
    slices = decoded(volume._repr_png_())
    expected = decoded(sk.render.png_bytes(sk.render.volume(volume)))
    assert slices.size == expected.size and slices.size[0] > 3 * slices.size[1]  # a row of 5 slices
    assert volume._repr_html_() is None


# -- several inputs ------------------------------------------------------------------------------------------
def test_two_inputs_show_each_inputs_picture_under_its_name():
    image, (meta_maps, meta_attributions) = image_maps(), tabular()
    e = made(
        [image, meta_maps], [image, meta_attributions], parts={"image": "input", HOSTILE: "input"}
    )  # a hand-made explanation with a name no page may parse
    own = [decoded(explanation_png(alone(e, image))), decoded(explanation_png(alone(e, meta_maps, meta_attributions)))]
    png = decoded(e._repr_png_()).convert("RGB")
    header = 26
    assert png.size == (max(p.size[0] for p in own), sum(header + p.size[1] for p in own))
    top = 0
    for picture in own:  # each part's own picture, pixel for pixel, under a band holding its name
        band = np.asarray(png.crop((0, top, png.size[0], top + header)).convert("L"))
        assert band.min() < 128, "the part's name is written in its band"
        crop = png.crop((0, top + header, picture.size[0], top + header + picture.size[1]))
        np.testing.assert_array_equal(np.asarray(crop), np.asarray(picture.convert("RGB")))
        top += header + picture.size[1]

    fragment = e._repr_html_()
    parsed = Elements(fragment)
    assert "<script" not in fragment
    names = [n["text"] for n in parsed.of_class("saliency-part-name")]
    assert names == ["image (input)", f"{HOSTILE} (input)"]  # escaped, read back as text
    images = parsed.of_class("saliency-part-image")
    assert [i["attrs"]["alt"] for i in images] == ["image", HOSTILE]
    for element, picture in zip(images, own):
        source = element["attrs"]["src"]
        assert source.startswith("data:image/png;base64,")
        assert decoded(base64.b64decode(source.split(",", 1)[1])).size == picture.size
    assert {e["tag"] for e in parsed.elements} == {"div", "img"}


def test_originals_of_several_inputs_come_in_their_structure():
    image, (meta_maps, meta_attributions) = image_maps(), tabular()
    photos = RNG.integers(0, 256, (B, 20, 28, 3), dtype=np.uint8)
    as_list = made(
        [image, None, meta_maps], [image, None, meta_attributions], parts={"image": "input", "meta": "input"}
    )
    as_dict = dataclasses.replace(
        as_list, maps={"image": image, "meta": meta_maps}, attributions={"image": image, "meta": meta_attributions}
    )
    bare = decoded(as_list._repr_png_()).size
    for e, originals in ((as_list, [photos, None, None]), (as_dict, {"image": photos})):
        shown = decoded(e.with_originals(originals)._repr_png_()).size
        assert shown[0] > bare[0]  # the image part's photo column
        with_photo = decoded(explanation_png(alone(e, image), photos)).size
        assert shown[0] == max(with_photo[0], decoded(explanation_png(alone(e, meta_maps, meta_attributions))).size[0])


# -- token ids -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def text_explanation():
    """A dict-input classifier fed token ids and a padding mask, explained at its embedding."""
    keras.utils.set_random_seed(7)
    ids, mask = (
        keras.Input((T,), dtype="int32", name="token_ids"),
        keras.Input((T,), dtype="int32", name="padding_mask"),
    )
    hidden = keras.layers.Dense(4, activation="tanh")(keras.layers.Embedding(11, 5)(ids))
    kept = hidden * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    model = keras.Model({"token_ids": ids, "padding_mask": mask}, keras.layers.Dense(K)(keras.layers.Flatten()(kept)))
    x = {"token_ids": RNG.integers(1, 11, (B, T)).astype("int32"), "padding_mask": np.ones((B, T), "int32")}
    return sk.explain(model, x, "gradient_x_input", targets=np.tile(np.arange(K), (B, 1)))


def test_a_token_explanation_without_tokens_shows_its_positions(text_explanation):
    e = text_explanation
    assert e.parts == {"token_ids": "embedding"} and e._repr_png_() is None  # HTML only
    fragment = e._repr_html_()
    parsed = Elements(fragment)
    spans = parsed.of_class("saliency-token")
    assert [s["text"] for s in spans] == [str(t) for t in range(T)] * B  # each position, as its label
    values = e.map_of("token_ids")[:, 0].reshape(-1)
    assert [float(s["attrs"]["title"].split(": ")[1]) for s in spans] == pytest.approx(values, rel=1e-3, abs=1e-6)
    assert "no tokens were given" in parsed.of_class("saliency-tokens-note")[0]["text"]
    assert len(parsed.of_class("saliency-tokens-legend")) == 1


def test_a_token_explanation_with_tokens_shows_them_escaped(text_explanation):
    tokens = [[HOSTILE, "a & b", "it's", "<b>", "x", "y"]] * B
    shown = text_explanation.with_tokens(tokens)
    assert shown._repr_png_() is None
    fragment = shown._repr_html_()
    parsed = Elements(fragment)
    assert [s["text"] for s in parsed.of_class("saliency-token")] == tokens[0] * B
    assert "<script" not in fragment and "<b>" not in fragment and not parsed.of_class("saliency-tokens-note")
    assert {e["tag"] for e in parsed.elements} == {"div", "span"}


def test_tokens_beside_an_image_show_as_spans_and_the_image_as_its_picture():
    image = image_maps()
    tokens = RNG.normal(size=(B, K, T)).astype("float32")
    e = made(
        {"image": image, "text": tokens},
        {"image": image, "text": tokens[..., None]},
        parts={"image": "input", "text": "embedding"},
    )
    parsed = Elements(e._repr_html_())
    assert [n["text"] for n in parsed.of_class("saliency-part-name")] == ["image (input)", "text (embedding)"]
    assert len(parsed.of_class("saliency-part-image")) == 1 and len(parsed.of_class("saliency-token")) == B * T
    words = [[f"w<{t}>" for t in range(T)]] * B
    worded = Elements(e.with_tokens(words)._repr_html_())
    assert [s["text"] for s in worded.of_class("saliency-token")] == words[0] * B
    png = decoded(e._repr_png_())  # for front ends without HTML: both parts, the tokens as strips
    strips = decoded(explanation_png(alone(e, tokens, tokens[..., None]))).size
    assert png.size[1] == 26 * 2 + decoded(explanation_png(alone(e, image))).size[1] + strips[1]


def test_only_the_first_eight_inputs_are_drawn():
    many = Explanation(
        attributions=RNG.random((12, 1, T, 2)).astype("float32"),
        maps=RNG.random((12, 1, T)).astype("float32"),
        targets=np.zeros((12, 1), int),
        scores=np.ones((12, 1), "float32"),
        method="gradient",
        parts={"token_ids": "embedding"},
    )
    assert len(Elements(many._repr_html_()).of_class("saliency-tokens-row")) == 8
