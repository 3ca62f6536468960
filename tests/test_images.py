"""load_images / load_image: real files through Pillow, every odd mode, every bad file."""

from concurrent import futures

import numpy as np
import pytest
from PIL import Image

from saliency_kit.images import ImageLoadError, load_image, load_images, read_rgb
from saliency_kit.zoo import ModelSpec, Preprocessing


def spec(h=16, w=24, mode="unit"):
    return ModelSpec(
        name="t", input_size=(h, w), preprocess=Preprocessing.from_config(mode), class_names=["a"], gradcam_layer=None
    )


def save(tmp_path, name, image, **kw):
    path = tmp_path / name
    image.save(path, **kw)
    return path


# ---------------------------------------------------------------------------------- modes
def test_rgb_png_is_read_exactly(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (10, 7, 3), dtype=np.uint8)
    np.testing.assert_array_equal(read_rgb(save(tmp_path, "a.png", Image.fromarray(rgb))), rgb)


def test_grey_and_bilevel(tmp_path):
    grey = np.arange(0, 240, 2, dtype=np.uint8).reshape(8, 15)
    out = read_rgb(save(tmp_path, "g.png", Image.fromarray(grey, "L")))
    assert out.shape == (8, 15, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, np.repeat(grey[..., None], 3, -1))
    bits = Image.fromarray((grey > 100).astype(np.uint8) * 255, "L").convert("1")
    out = read_rgb(save(tmp_path, "b.png", bits))
    np.testing.assert_array_equal(out[..., 0], np.where(grey > 100, 255, 0))


def test_alpha_is_composited_on_white(tmp_path):
    rgba = np.zeros((2, 3, 4), np.uint8)
    rgba[0, 0] = (200, 100, 0, 255)  # opaque: unchanged
    rgba[0, 1] = (200, 100, 0, 0)  # transparent: white
    rgba[0, 2] = (0, 0, 0, 128)  # half: 255 * (1 - 128/255) = 127
    out = read_rgb(save(tmp_path, "a.png", Image.fromarray(rgba, "RGBA")))
    np.testing.assert_array_equal(out[0, 0], (200, 100, 0))
    np.testing.assert_array_equal(out[0, 1], (255, 255, 255))
    np.testing.assert_allclose(out[0, 2], (127, 127, 127), atol=1)


def test_grey_with_alpha(tmp_path):
    la = np.zeros((2, 2, 2), np.uint8)
    la[..., 0] = 40
    la[0, 0, 1] = 255
    out = read_rgb(save(tmp_path, "la.png", Image.fromarray(la, "LA")))
    np.testing.assert_array_equal(out[0, 0], (40, 40, 40))
    np.testing.assert_array_equal(out[1, 1], (255, 255, 255))


def test_palette_with_and_without_transparency(tmp_path):
    image = Image.new("P", (4, 2))
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    image.putpixel((1, 0), 1)
    out = read_rgb(save(tmp_path, "p.png", image))
    np.testing.assert_array_equal(out[0, 0], (255, 0, 0))
    np.testing.assert_array_equal(out[0, 1], (0, 0, 255))
    out = read_rgb(save(tmp_path, "pt.png", image, transparency=1))  # index 1 is transparent
    np.testing.assert_array_equal(out[0, 0], (255, 0, 0))
    np.testing.assert_array_equal(out[0, 1], (255, 255, 255))
    out = read_rgb(save(tmp_path, "p.gif", image))
    np.testing.assert_array_equal(out[0, 1], (0, 0, 255))


def test_16_bit_grey_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    path = save(tmp_path, "deep.png", Image.fromarray(values))
    with Image.open(path) as check:
        assert check.mode in ("I;16", "I")  # really 16-bit on disk
    out = read_rgb(path)
    np.testing.assert_array_equal(out[0, :, 0], (0, 1, 128, 255))


def test_16_bit_rgb(tmp_path):
    """A 48-bit RGB PNG (written by hand: Pillow cannot write one); Pillow keeps the high byte."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = np.array([[[65535, 0, 257], [4000, 30000, 60000]]], dtype=">u2")
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)  # filter type 0 per row
    path = tmp_path / "rgb48.png"
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 1, 16, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    out = read_rgb(path)
    assert out.shape == (1, 2, 3) and out.dtype == np.uint8
    np.testing.assert_allclose(out, pixels.astype(float) / 257, atol=1)


def test_cmyk(tmp_path):
    cmyk = np.zeros((1, 3, 4), np.uint8)
    cmyk[0, 1] = (255, 0, 0, 0)  # cyan
    cmyk[0, 2] = (0, 0, 0, 255)  # black
    out = read_rgb(save(tmp_path, "c.tif", Image.fromarray(cmyk, "CMYK")))
    np.testing.assert_array_equal(out[0], [(255, 255, 255), (0, 255, 255), (0, 0, 0)])


@pytest.mark.parametrize(
    "orientation, turn",
    [(1, lambda a: a), (3, lambda a: np.rot90(a, 2)), (6, lambda a: np.rot90(a, -1)), (8, lambda a: np.rot90(a, 1))],
)
def test_exif_orientation_is_applied(tmp_path, orientation, turn):
    """Tag 6 means the stored image must turn 90 degrees clockwise to be upright, 8 anticlockwise."""
    stored = np.random.default_rng(1).integers(0, 256, (5, 9, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = save(tmp_path, "o.png", Image.fromarray(stored), exif=exif)
    np.testing.assert_array_equal(read_rgb(path), turn(stored))


# ----------------------------------------------------------------------- resize & preprocess
def test_inputs_are_resized_and_preprocessed_originals_kept(tmp_path):
    big = np.zeros((60, 100, 3), np.uint8)
    big[..., 0] = np.linspace(0, 255, 100).astype(np.uint8)[None, :]  # horizontal ramp
    big[..., 1] = 77
    paths = [
        save(tmp_path, "big.png", Image.fromarray(big)),
        save(tmp_path, "small.png", Image.fromarray(big[:16, :24])),
    ]
    s = spec(16, 24, "caffe")
    inputs, originals = load_images(paths, s)
    assert inputs.shape == (2, 16, 24, 3) and inputs.dtype == np.float32
    np.testing.assert_array_equal(originals[0], big)
    np.testing.assert_array_equal(originals[1], big[:16, :24])
    # caffe: BGR order, mean subtracted; the constant green channel stays constant
    np.testing.assert_allclose(inputs[0, ..., 1], 77 - 116.779, atol=1e-4)
    red = inputs[0, ..., 2] + 123.68  # back to 0..255
    np.testing.assert_allclose(red[0], red[-1], atol=1)  # rows agree: no vertical change
    assert np.all(np.diff(red[0]) > 0)  # the ramp survives, monotone
    np.testing.assert_allclose(red[0, [0, -1]], [5, 250], atol=6)  # spans the whole width: no crop
    # an image already at the input size is not resampled
    np.testing.assert_allclose(inputs[1], s.preprocess(big[None, :16, :24])[0], atol=0)


def test_load_image_single_file_matches_batch(tmp_path):
    rgb = np.random.default_rng(2).integers(0, 256, (30, 20, 3), dtype=np.uint8)
    path = save(tmp_path, "x.png", Image.fromarray(rgb))
    one, original = load_image(path, spec())
    batch, _ = load_images([path], spec())
    np.testing.assert_array_equal(one, batch[0])
    np.testing.assert_array_equal(original, rgb)
    batch_str, _ = load_images(str(path), spec())  # a single path works too
    np.testing.assert_array_equal(batch_str, batch)


# ----------------------------------------------------------------------------- bad files
def _png_bytes(tmp_path):
    rgb = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return save(tmp_path, "good.png", Image.fromarray(rgb)).read_bytes()


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("empty", "empty"),
        ("text", "not an image"),
        ("truncated", "truncated"),
        ("corrupt", "corrupt"),
        ("missing", "no such file"),
        ("directory", "not a regular file"),
    ],
)
def test_bad_files_raise_a_clear_error_naming_the_file(tmp_path, kind, reason):
    good = _png_bytes(tmp_path)
    path = tmp_path / f"{kind}.png"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("hello, I am not a picture\n")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "corrupt":
        path.write_bytes(good[:40] + bytes(range(256)) * 40)
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(ImageLoadError) as info:
        load_image(path, spec())
    assert isinstance(info.value, ValueError)
    assert info.value.path == str(path)
    assert str(path) in str(info.value) and reason in str(info.value)


def test_decompression_bomb_guard(tmp_path, monkeypatch):
    path = save(tmp_path, "wide.png", Image.new("RGB", (300, 200)))
    with pytest.raises(ImageLoadError, match="over the limit"):
        load_image(path, spec(), max_pixels=50_000)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)  # Pillow's own guard, made small
    with pytest.raises(ImageLoadError) as info:
        load_image(path, spec())
    assert str(path) in str(info.value) and "decompression-bomb" in str(info.value)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60_000)  # raising Pillow's limit lets it through
    assert load_image(path, spec())[1].shape == (200, 300, 3)


def test_max_pixels_raises_pillows_limit_for_that_read_only(tmp_path, monkeypatch):
    path = save(tmp_path, "wide.png", Image.new("RGB", (300, 200)))  # 60,000 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)  # Pillow's limit, as a user may have set it
    with pytest.raises(ImageLoadError) as info:
        read_rgb(path)
    assert str(path) in str(info.value) and "--max-pixels" in str(info.value)
    with pytest.raises(ImageLoadError, match="59999.*--max-pixels"):
        read_rgb(path, max_pixels=59_999)
    assert read_rgb(path, max_pixels=60_000).shape == (200, 300, 3)
    assert load_image(path, spec(), max_pixels=60_000)[1].shape == (200, 300, 3)
    assert Image.MAX_IMAGE_PIXELS == 20_000  # put back
    with pytest.raises(ImageLoadError, match="--max-pixels"):
        read_rgb(path)


def test_reads_raising_the_limit_in_threads_leave_it_as_it_was(tmp_path, monkeypatch):
    small = save(tmp_path, "small.png", Image.new("RGB", (100, 100)))  # 10,000 pixels
    wide = save(tmp_path, "wide.png", Image.new("RGB", (300, 200)))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)

    def read(k):
        if k % 2:
            return read_rgb(wide, max_pixels=60_000 + k).shape
        with pytest.raises(ImageLoadError, match="--max-pixels"):
            read_rgb(wide)  # another thread's raised limit is not this read's
        return read_rgb(small).shape

    with futures.ThreadPoolExecutor(4) as pool:
        shapes = list(pool.map(read, range(40)))
    assert shapes == [(100, 100, 3), (200, 300, 3)] * 20
    assert Image.MAX_IMAGE_PIXELS == 20_000


def test_batch_names_the_bad_file(tmp_path):
    good = save(tmp_path, "ok.png", Image.new("RGB", (8, 8)))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(ImageLoadError) as info:
        load_images([good, bad], spec())
    assert info.value.path == str(bad)
    with pytest.raises(ValueError, match="at least one"):
        load_images([], spec())


def test_a_grey_model_gets_grey_inputs_from_grey_and_colour_files(tmp_path):
    import keras

    import saliency_kit as sk

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 1))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu")(inputs))
    keras.Model(inputs, keras.layers.Dense(3)(x)).save(tmp_path / "grey.keras")
    model, spec = sk.load_model(tmp_path / "grey.keras")
    assert spec.channels == 1
    rng = np.random.default_rng(5)
    grey, colour = rng.integers(0, 256, (16, 16), dtype=np.uint8), rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(grey).save(tmp_path / "grey.png")
    Image.fromarray(colour).save(tmp_path / "colour.png")
    batch, originals = load_images([tmp_path / "grey.png", tmp_path / "colour.png"], spec)
    assert batch.shape == (2, 16, 16, 1) and [o.shape for o in originals] == [(16, 16, 3)] * 2
    luminance = (colour.astype(np.int64) * [299, 587, 114]).sum(-1) / 1000  # ITU-R 601-2, as Pillow's "L"
    np.testing.assert_array_equal(batch[0, ..., 0], grey.astype(np.float32) / 255)
    np.testing.assert_allclose(batch[1, ..., 0] * 255, luminance, atol=0.51)
    single, _ = load_image(tmp_path / "colour.png", spec)
    np.testing.assert_array_equal(single, batch[1])
    explanation = sk.explain(model, batch, "gradient")
    assert explanation.maps.shape == (2, 1, 16, 16)


def test_grey_inputs_need_one_mean_for_every_channel():
    rgb_means = Preprocessing.from_config("torch")
    with pytest.raises(ValueError, match="grey images"):
        rgb_means(np.zeros((1, 2, 2, 1), np.uint8))
    np.testing.assert_allclose(Preprocessing.from_config("tf")(np.full((1, 2, 2, 1), 255, np.uint8)), 1.0)
