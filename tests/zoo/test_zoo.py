"""The model zoo: every named config, preprocessing against Keras' own, weights files, user models
and configs, safe mode, and the fast offline error."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import zoo
from saliency_kit.zoo import WeightsUnavailableError

IMAGENET = [
    "resnet50",
    "resnet101",
    "resnet50v2",
    "vgg16",
    "vgg19",
    "mobilenet_v2",
    "densenet121",
    "inception_v3",
    "xception",
    "efficientnet_b0",
    "convnext_tiny",
]
KERAS_PREPROCESS = {  # the keras.applications module each model's preprocessing must match
    "resnet50": "resnet50",
    "resnet101": "resnet",
    "resnet50v2": "resnet_v2",
    "vgg16": "vgg16",
    "vgg19": "vgg19",
    "mobilenet_v2": "mobilenet_v2",
    "densenet121": "densenet",
    "inception_v3": "inception_v3",
    "xception": "xception",
    "efficientnet_b0": "efficientnet",
    "convnext_tiny": "convnext",
}


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No network, and an empty Keras cache, for every test here."""
    monkeypatch.setenv("SALIENCY_KIT_OFFLINE", "1")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv("SALIENCY_KIT_CONFIGS", raising=False)


def test_list_models():
    assert set(IMAGENET) | {"shapes"} <= set(sk.list_models())


def test_imagenet_class_names():
    names = zoo.get_spec("resnet50").class_names
    assert len(names) == 1000 and len(set(names)) == 1000  # Keras' list names 'crane' and 'maillot' twice
    assert (names[134], names[517], names[638], names[639]) == (
        "crane_(bird)",
        "crane_(machine)",
        "maillot",
        "tank_suit",
    )
    assert (names[0], names[1], names[281], names[999]) == ("tench", "goldfish", "tabby", "toilet_tissue")


@pytest.mark.parametrize("name", IMAGENET)
def test_config_builds_with_random_weights(name):
    """One build per config: input size, class count, and the Grad-CAM layer is a 4-D map."""
    model, spec = sk.load_model(name, weights="random")
    try:
        assert spec.name == name
        assert model.input_shape[1:3] == spec.input_size
        assert model.output_shape == (None, 1000) == (None, len(spec.class_names))
        layer = model.get_layer(spec.gradcam_layer)
        assert len(layer.output.shape) == 4 and layer.output.shape[1] > 1
    finally:
        keras.backend.clear_session()


@pytest.mark.parametrize("name", IMAGENET)
def test_preprocessing_matches_keras(name):
    module = getattr(keras.applications, KERAS_PREPROCESS[name])
    images = np.random.default_rng(0).integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    ours = zoo.get_spec(name).preprocess(images)
    theirs = np.asarray(module.preprocess_input(images.astype(np.float32).copy()))
    assert ours.dtype == np.float32 and ours.shape == images.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("name", IMAGENET)
def test_weights_file_is_the_one_keras_requests(name, monkeypatch):
    """The file the offline check looks for is exactly the one Keras' constructor would fetch.
    (The download itself cannot run here, so Keras' file fetcher is replaced by a recorder.)"""
    from keras.src.utils import file_utils

    class Requested(Exception):
        pass

    def record(fname, origin=None, **kwargs):
        raise Requested(fname)

    monkeypatch.setattr(file_utils, "get_file", record)
    spec = zoo.get_spec(name)
    with pytest.raises(Requested) as info:
        getattr(keras.applications, spec.constructor)(weights="imagenet")
    keras.backend.clear_session()
    assert str(info.value) == spec.weights_file


@pytest.mark.parametrize("how", ["probe", "env"])
def test_offline_error_is_quick_and_clear(tmp_path, monkeypatch, how):
    """``probe``: the real reachability check, pointed at a host that can never resolve (the
    reserved .invalid domain), so no test can start a download even on a machine with network.
    Quick means bounded: the probe passes a timeout of at most 3 s to its one request, and with
    $SALIENCY_KIT_OFFLINE set no request is made at all (no wall clock is measured here)."""
    import urllib.request

    requests = []
    real_urlopen = urllib.request.urlopen

    def urlopen(request, *args, timeout=None, **kwargs):
        requests.append(timeout)
        return real_urlopen(request, *args, timeout=timeout, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    if how == "probe":
        monkeypatch.delenv("SALIENCY_KIT_OFFLINE")
        monkeypatch.setattr(zoo.weights, "KERAS_WEIGHTS_URL", "https://weights.saliency-kit.invalid/")
    with pytest.raises(WeightsUnavailableError) as info:
        sk.load_model("resnet50")
    if how == "probe":
        assert len(requests) == 1 and requests[0] is not None and requests[0] <= 3
    else:
        assert requests == []
    message = str(info.value)
    expected = tmp_path / "keras_home" / "models" / "resnet50_weights_tf_dim_ordering_tf_kernels.h5"
    assert str(expected) in message
    for option in ("--weights PATH", "random", "shapes"):
        assert option in message
    assert isinstance(info.value, FileNotFoundError) and "\n" not in message


def test_cached_weights_pass_the_check(tmp_path):
    spec = zoo.get_spec("resnet50")
    cache = tmp_path / "keras_home" / "models"
    cache.mkdir(parents=True)
    with pytest.raises(WeightsUnavailableError):
        zoo.weights.check_imagenet_weights(spec)
    (cache / spec.weights_file).write_bytes(b"placeholder")
    zoo.weights.check_imagenet_weights(spec)  # found: Keras is left to load it


def _small_cnn(classes=3, lambda_layer=False):
    inputs = keras.Input((12, 10, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu", name="features")(inputs)
    if lambda_layer:
        x = keras.layers.Lambda(lambda t: t * 2.0, name="double")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x))


def test_local_weights_round_trip_shapes(tmp_path):
    trained, _ = sk.load_model("shapes")
    random_model, _ = sk.load_model("shapes", weights="random")
    x = np.random.default_rng(0).uniform(size=(2, 64, 64, 3)).astype(np.float32)
    assert not np.allclose(trained(x), random_model(x))
    for file in ("w.weights.h5", "legacy.h5"):  # Keras 3 weights; Keras-applications style .h5
        path = tmp_path / file
        if file.endswith(".weights.h5"):
            trained.save_weights(path)
        else:
            trained.save(path)  # legacy HDF5, the format of Keras' ImageNet downloads
        reloaded, _ = sk.load_model("shapes", weights=path)
        for a, b in zip(trained.get_weights(), reloaded.get_weights()):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(reloaded(x), trained(x), rtol=1e-6, atol=1e-6)


def test_local_weights_round_trip_application(tmp_path):
    model, _ = sk.load_model("mobilenet_v2", weights="random")
    path = tmp_path / "mobilenet.weights.h5"
    model.save_weights(path)
    reloaded, spec = sk.load_model("mobilenet_v2", weights=path)
    assert spec.name == "mobilenet_v2"
    for a, b in zip(model.get_weights(), reloaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    keras.backend.clear_session()


def test_bad_weights_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.weights.h5"):
        sk.load_model("shapes", weights=tmp_path / "nope.weights.h5")
    junk = tmp_path / "junk.weights.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="junk.weights.h5"):
        sk.load_model("shapes", weights=junk)


def test_user_model_file_defaults(tmp_path):
    path = tmp_path / "tiny_net.keras"
    _small_cnn(classes=3).save(path)
    model, spec = sk.load_model(path)
    assert spec.name == "tiny_net" and spec.input_size == (12, 10)
    assert spec.class_names == ["0", "1", "2"] and spec.gradcam_layer == "features"
    images = np.full((1, 12, 10, 3), 255, np.uint8)
    np.testing.assert_allclose(spec.preprocess(images), 1.0)


def test_user_model_sidecar_config(tmp_path):
    path = tmp_path / "tiny_net.h5"
    _small_cnn(classes=2).save(path)
    (tmp_path / "tiny_net.h5.toml").write_text(
        'name = "tiny"\npreprocess = "tf"\nclasses = ["cat", "dog"]\ngradcam_layer = "features"\n'
    )
    _, spec = sk.load_model(path)
    assert spec.name == "tiny" and spec.class_names == ["cat", "dog"]
    np.testing.assert_allclose(spec.preprocess(np.zeros((1, 2, 2, 3), np.uint8)), -1.0)
    (tmp_path / "tiny_net.h5.toml").write_text('classes = ["just one"]\n')
    with pytest.raises(ValueError, match="1 class names for 2 model outputs"):
        sk.load_model(path)
    (tmp_path / "tiny_net.h5.toml").write_text('gradcam_layer = "conv9"\n')
    with pytest.raises(ValueError, match="conv9"):
        sk.load_model(path)
    (tmp_path / "tiny_net.h5.toml").write_text('clases = ["typo"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        sk.load_model(path)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_safe_mode_refuses_code_unless_unsafe(tmp_path, suffix):
    path = tmp_path / f"lambda_net{suffix}"
    _small_cnn(lambda_layer=True).save(path)
    with pytest.raises(ValueError, match="unsafe=True"):
        sk.load_model(path)
    model, _ = sk.load_model(path, unsafe=True)
    assert any(layer.name == "double" for layer in model.layers)


def test_user_config_directory_and_config_path(tmp_path, monkeypatch):
    configs = tmp_path / "my_configs"
    configs.mkdir()
    _small_cnn(classes=2).save(configs / "weights_and_all.keras")
    (configs / "labels.txt").write_text("left\nright\n")
    (configs / "mynet.toml").write_text(
        'description = "a user model"\nmodel_file = "weights_and_all.keras"\n'
        'classes = "labels.txt"\npreprocess = { scale = 0.5, mean = [1, 2, 3] }\n'
    )
    monkeypatch.setenv("SALIENCY_KIT_CONFIGS", str(configs))
    assert "mynet" in sk.list_models() and "resnet50" in sk.list_models()
    for source in ("mynet", configs / "mynet.toml"):
        _, spec = sk.load_model(source)
        assert spec.name == "mynet" and spec.class_names == ["left", "right"]
        assert spec.input_size == (12, 10) and spec.description == "a user model"
        np.testing.assert_allclose(spec.preprocess(np.full((1, 1, 1, 3), 10, np.uint8)), [[[[4, 3, 2]]]])


def test_unknown_names_and_paths():
    with pytest.raises(ValueError, match="Did you mean resnet50"):
        sk.load_model("resnet5")
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        sk.load_model("missing.keras")
    with pytest.raises(ValueError, match="unknown preprocess mode"):
        zoo.Preprocessing.from_config("caffee")


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("cat\n\ndog\n", 2, "a blank line"),
        ("cat\n  \ndog\n", 2, "a blank line"),
    ],
)
def test_class_names_file_with_a_blank_line_is_refused_naming_the_line(tmp_path, text, line, what):
    """A blank line would shift every later class by one."""
    (tmp_path / "classes.txt").write_text(text)
    (tmp_path / "net.toml").write_text('constructor = "MobileNetV2"\ninput_size = [32, 32]\nclasses = "classes.txt"\n')
    with pytest.raises(ValueError, match=rf"classes.txt, line {line}: .*{what}.*; received"):
        zoo.get_spec(str(tmp_path / "net.toml"))


def test_class_names_file_may_give_a_name_twice_with_one_warning(tmp_path):
    with pytest.warns(UserWarning, match=r"x.txt: 1 class name\(s\) given to several classes: 'cat' \(classes 0, 2\)"):
        assert zoo.read_class_names("cat\ndog\ncat\n", "x.txt") == ["cat", "dog", "cat"]


def test_class_names_file_may_end_with_blank_lines(tmp_path):
    assert zoo.read_class_names("cat\ndog\n\n\n", "x.txt") == ["cat", "dog"]
    assert zoo.read_class_names(" cat \r\ndog", "x.txt") == ["cat", "dog"]
