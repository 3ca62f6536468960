"""saliency_kit.cli.main and .startup: the parser, exit statuses, one-line errors, listing without
TensorFlow, TensorFlow's start-up noise kept out of the output, and the Keras backend check."""

import json
import os

import pytest
from cli_support import command, environment, finish, own_lines, python

BAD_ARGUMENTS = [
    ((), "required: COMMAND"),
    (("explain",), "required: IMAGE"),
    (("explain", "x.png", "--bogus"), "unrecognized arguments: --bogus"),
    (("explain", "x.png", "--batch-size", "0"), "--batch-size"),
    (("explain", "x.png", "--steps", "many"), "--steps"),
    (("explain", "x.png", "--alpha", "2"), "--alpha"),
    (("explain", "x.png", "--sign", "up"), "--sign"),
    (("explain", "x.png", "--cmap", "infernoo"), "did you mean 'inferno'"),
    (("explain", "x.png", "--format", "gif"), "--format"),
    (("explain", "no_such_file.png"), "no such file: no_such_file.png"),
    (("batch", "in"), "required: --out"),
    (("batch", "no_such_dir", "--out", "o"), "is not a folder"),
    (("batch", ".", "--out", "o", "--shard", "2/2"), "0 <= I < N"),
    (("batch", ".", "--out", "o"), "no images under"),
    (("sanity", "no_such_file.png"), "no such file: no_such_file.png"),
    (("evaluate", "no_such_file.png"), "no such file: no_such_file.png"),
]


def test_bad_arguments_exit_2_with_one_line(tmp_path):
    """Each run is a real command; they are started together (none of them imports TensorFlow)."""
    processes = [command(*args, cwd=tmp_path) for args, _ in BAD_ARGUMENTS]
    for (args, needle), process in zip(BAD_ARGUMENTS, processes):
        code, out, err = finish(process)
        assert code == 2, (args, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("saliency") and needle in err, (args, err)
    assert os.listdir(tmp_path) == []  # nothing written


NO_TENSORFLOW = """
import sys
from saliency_kit.cli import main
try:
    status = main({argv!r})
except SystemExit as exit_:
    status = exit_.code
loaded = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
print("STATUS", status, "LOADED", ",".join(loaded) or "-")
"""


def _without_tensorflow(argv, **kw):
    code, out, err = python(NO_TENSORFLOW.format(argv=list(map(str, argv))), **kw)
    assert code == 0, err
    status, loaded = out.strip().splitlines()[-1].split()[1::2]
    return int(status), loaded, out, err


def test_methods_and_models_list_without_importing_tensorflow():
    status, loaded, out, _ = _without_tensorflow(["methods"])
    assert status == 0 and loaded == "-"
    listed = [line.split()[0] for line in out.splitlines()[:-1]]
    code, names, _ = python("from saliency_kit import methods; print(' '.join(methods.names()))")
    assert listed == names.split()
    assert all(len(line.split(None, 1)) == 2 for line in out.splitlines()[:-1])  # name, then a summary
    status, loaded, out, _ = _without_tensorflow(["models"])
    assert status == 0 and loaded == "-" and "shapes" in [line.split()[0] for line in out.splitlines()[:-1]]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--method", "guided_backprob"], "unknown method 'guided_backprob' (did you mean 'guided_backprop'"),
        (["--method", "gradient", "--steps", "8"], "--steps only applies to"),
        (["--method", "smoothgrad", "--aggregate", "median"], "--aggregate"),
        (["--target", "circel"], "did you mean 'circle'"),
    ],
)
def test_unknown_names_are_refused_before_the_model_loads(argv, needle, tmp_path):
    """Refused from the declarations and the model's config alone, before TensorFlow starts and
    before the model loads (the target parser imports neither TensorFlow nor Keras: see the next
    test)."""
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "x.png")
    unloadable = tmp_path / "not_a_model.keras"  # loading it would fail: the error must come first
    unloadable.write_bytes(b"not a zip archive")
    unloadable.with_name(unloadable.name + ".toml").write_text('classes = ["circle", "square"]\n')
    status, loaded, _, err = _without_tensorflow(
        ["explain", tmp_path / "x.png", "--model", unloadable, *argv, "--out", tmp_path / "o"]
    )
    assert status == 2, err
    assert loaded == "-", err
    lines = own_lines(err, "explain")
    assert len(lines) == 1 and needle.lower() in lines[0].lower(), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "command_name, model, misspelt, needle",
    [
        ("explain", "shapes", "circel", "did you mean 'circle'"),
        ("batch", "shapes", "circel", "did you mean 'circle'"),
        ("sanity", "shapes", "circel", "did you mean 'circle'"),
        ("evaluate", "shapes", "circel", "did you mean 'circle'"),
        ("explain", "resnet50", "tabbycat", "did you mean 'tabby'"),
    ],
)
def test_a_misspelt_class_of_a_named_model_is_refused_before_tensorflow_starts(
    command_name, model, misspelt, needle, tmp_path
):
    """The shipped model and the zoo's know their class names without TensorFlow."""
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "x.png")
    given = tmp_path if command_name == "batch" else tmp_path / "x.png"
    status, loaded, _, err = _without_tensorflow(
        [command_name, given, "--model", model, "--target", misspelt, "--out", tmp_path / "o"]
    )
    assert status == 2 and loaded == "-", err
    lines = own_lines(err, command_name)
    assert len(lines) == 1 and needle in lines[0].lower(), err
    assert not (tmp_path / "o").exists()


def test_the_target_parser_does_not_import_tensorflow():
    code, out, err = python("import sys\nimport saliency_kit.targets\nprint('keras' in sys.modules)")
    assert code == 0 and out.strip() == "False", err


def test_method_option_flags_come_from_the_declarations():
    from saliency_kit import methods
    from saliency_kit.cli import build_parser

    explain = build_parser()._subparsers._group_actions[0].choices["explain"]
    flags = {option for action in explain._actions for option in action.option_strings}
    from saliency_kit.cli.options import PYTHON_ONLY_OPTIONS

    for name in methods.names():
        for option in methods.get(name).options:
            assert (option.flag in flags) == (option.name not in PYTHON_ONLY_OPTIONS), (name, option.name)
    help_text = explain.format_help()
    assert "integrated_gradients" in help_text and "--clip-percentile" in help_text


@pytest.mark.parametrize("backend", ["numpy", "openvino"])
def test_another_keras_backend_is_one_clear_error(backend, tmp_path):
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "x.png")
    code, out, err = finish(
        command("explain", tmp_path / "x.png", cwd=tmp_path, env=environment(KERAS_BACKEND=backend))
    )
    assert code == 2, err
    lines = own_lines(err, "explain")
    assert len(lines) == 1 and "KERAS_BACKEND" in lines[0] and repr(backend) in lines[0], err
    assert "Traceback" not in err and "ModuleNotFoundError" not in err


def test_the_library_names_the_backend_it_needs(tmp_path):
    """``KERAS_BACKEND`` or a keras.json choosing another backend: a BackendError (a RuntimeError)."""
    check = (
        "from saliency_kit.keras_backend import require_supported_backend, BackendError\n"
        "try:\n    require_supported_backend()\nexcept BackendError as e:\n"
        "    print('REFUSED', isinstance(e, RuntimeError), e)\nelse:\n    print('OK')\n"
    )
    code, out, err = python(check, env=environment(KERAS_BACKEND="numpy"))
    assert code == 0 and out.startswith("REFUSED True") and "'numpy'" in out, err
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "numpy", "floatx": "float32"}))
    env = environment(KERAS_HOME=str(tmp_path))
    env.pop("KERAS_BACKEND", None)
    code, out, err = python(check, env=env)
    assert out.startswith("REFUSED True") and "keras.json" in out, (out, err)
    env = environment()
    env.pop("KERAS_BACKEND", None)
    code, out, err = python(check, env=dict(env, KERAS_HOME=str(tmp_path / "none")))
    assert out.strip() == "OK", err


BANNER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795402126.726742   12627 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    "2026-11-23 02:45:10.123456: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "E0000 00:00:1795402126.1 12627 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register "
    "factory for plugin cuDNN when one has already been registered",
]


def test_start_up_noise_is_recognised_and_other_lines_are_kept():
    from saliency_kit.cli.startup import is_noise

    assert all(is_noise(line) for line in BANNER)
    for line in [
        "saliency explain: error: no such file: x.png",
        "cannot load image a.png: the file is empty",
        "UserWarning: something the user should see",
        "I like tensorflow",
    ]:
        assert not is_noise(line)


def test_importing_tensorflow_for_a_command_leaves_no_noise_and_changes_no_numerics():
    """In a fresh interpreter, with TF_CPP_MIN_LOG_LEVEL unset (so machines that print a banner
    do): nothing TensorFlow prints at start-up reaches stderr, a line written after it does, and
    oneDNN is left as TensorFlow chose (TF_ENABLE_ONEDNN_OPTS untouched)."""
    code, out, err = python(
        "import os, sys\n"
        "from saliency_kit.cli.startup import import_tensorflow\n"
        "import_tensorflow()\n"
        "os.write(2, b'after the import\\n')\n"
        "print('ONEDNN', os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset'))\n"
    )
    assert code == 0, err
    assert "ONEDNN unset" in out
    from saliency_kit.cli.startup import is_noise

    assert [line for line in err.splitlines() if line.strip()] == ["after the import"], err
    assert not any(is_noise(line) for line in err.splitlines())
