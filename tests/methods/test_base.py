"""Method declarations: the registry, option checking driven by the declarations, methods
registered from outside the package, entry points, and no TensorFlow for reading declarations."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit import methods
from saliency_kit.methods import Option, register, table

REPO = Path(__file__).resolve().parents[2]

BUILTINS = methods.builtins()  # the methods defined in saliency_kit/methods/, in registration order


# -- a method written outside the package (the Python guide's example) -------------------------------------
def gradient_power(ctx, power):
    return tf.abs(ctx.gradients(ctx.inputs)) ** power  # [B, K, *input]


def int_steps(ctx, steps):
    return ctx.gradients(ctx.inputs) * steps


@pytest.fixture(scope="module", autouse=True)
def outside_methods():
    """Registered for this module's tests only: other modules see the registry as it was."""
    register("gradient_power", summary="|∂s/∂x| to a power", options={"power": 2.0}, reduce="sum")(gradient_power)
    register("int_steps", summary="a method sharing integrated gradients' int option 'steps'", options={"steps": 3})(
        int_steps
    )
    yield
    methods.unregister("gradient_power")
    methods.unregister("int_steps")


def test_an_outside_method_works_with_explain(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient_power", [[0, 2]] * len(x), power=3.0)
    expected = np.abs(np.broadcast_to(w[[0, 2]], expl.attributions.shape)) ** 3
    np.testing.assert_allclose(expl.attributions, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(expl.maps, expected.sum(-1), rtol=1e-5, atol=1e-6)  # reduce="sum"
    assert expl.options == {"power": 3.0, "score": "logits"} and expl.method == "gradient_power"
    default = sk.explain(model, x, "gradient_power", 1)
    np.testing.assert_allclose(default.attributions[:, 0], np.broadcast_to(w[1] ** 2, x.shape), rtol=1e-5, atol=1e-7)
    assert "gradient_power" in methods.names()
    assert methods.get("gradient_power").title == "Gradient power"
    with pytest.raises(TypeError, match="'power' must be float; received 'x'"):
        sk.explain(model, x, "gradient_power", 1, power="x")


def test_an_outside_method_is_a_smoothgrad_base(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "smoothgrad", 1, base="gradient_power", power=1.0, samples=4, seed=0)
    np.testing.assert_allclose(expl.attributions[:, 0], np.broadcast_to(np.abs(w[1]), x.shape), rtol=1e-5, atol=1e-6)
    assert methods.get("smoothgrad").reduction(expl.options) == "sum"  # reduced like its base


# -- the registry --------------------------------------------------------------------------------
def test_builtins_come_first_in_a_fixed_order():
    assert len(BUILTINS) >= 21 and {"gradient", "smoothgrad", "gradcam", "rise"} <= set(BUILTINS)
    assert methods.names()[: len(BUILTINS)] == BUILTINS
    assert not methods.get("gradient_power").builtin and "gradient_power" not in BUILTINS
    for name in methods.names():
        method = methods.get(name)
        assert method.summary and method.title and method.reduce in ("abs_max", "sum", "mean", "none")
    assert methods.get("gradcam").cam and not methods.get("guided_gradcam").cam
    assert methods.get("gradcam").title == "Grad-CAM"


def test_registering_a_name_twice_is_a_value_error():
    with pytest.raises(ValueError, match="'gradient' is already registered"):
        register("gradient", summary="again")(lambda ctx: ctx.gradients(ctx.inputs))


def test_an_unknown_keyword_is_a_type_error_listing_the_keywords():
    with pytest.raises(TypeError, match="register\\('typo'\\) takes no keyword 'sigend'; its keywords are summary"):
        register("typo", summary="x", sigend=True)
    assert "typo" not in methods.names()


def test_the_rarely_given_keywords_reach_the_declaration():
    register("traits_given", summary="x", title="Given", signed=True, spatial=True, warn_zero=False)(
        lambda ctx: ctx.inputs
    )
    try:
        method = methods.get("traits_given")
        assert (method.title, method.signed, method.spatial, method.warn_zero, method.cam) == (
            "Given",
            True,
            True,
            False,
            False,
        )
    finally:
        methods.unregister("traits_given")


@pytest.mark.parametrize("reserved", ["model", "target", "batch_size", "out", "sign", "workers"])
def test_an_option_named_like_a_command_line_flag_is_refused(reserved):
    assert reserved in methods.RESERVED_OPTION_NAMES
    with pytest.raises(ValueError, match="collides with the command line's own"):
        register(f"uses_{reserved}", summary="x", options={reserved: 1})(lambda ctx, **o: ctx.inputs)
    assert f"uses_{reserved}" not in methods.names()


def test_one_option_name_with_two_types_is_refused():
    with pytest.raises(ValueError, match="'steps' is declared int by method 'integrated_gradients'"):
        register("float_steps", summary="x", options={"steps": 0.5})(lambda ctx, steps: ctx.inputs)
    # the same name with the same type is shared (one --steps flag serves both): int_steps above
    assert methods.get("int_steps").option("steps").type is int


def test_a_method_registered_for_a_while_can_be_unregistered():
    before = methods.names()
    register("for_a_while", summary="x", options={"wobble": 0.5})(lambda ctx, wobble: ctx.inputs)
    assert methods.names() == before + ["for_a_while"] and "for_a_while" in dict(methods.describe())
    removed = methods.unregister("for_a_while")
    assert removed.name == "for_a_while" and methods.names() == before
    # its option's type is forgotten with it: another method may now declare 'wobble' an int
    register("for_a_while", summary="x", options={"wobble": 1})(lambda ctx, wobble: ctx.inputs)
    methods.unregister("for_a_while")
    with pytest.raises(ValueError, match="built-in methods cannot be unregistered; received 'gradient'"):
        methods.unregister("gradient")
    with pytest.raises(ValueError, match="no method called 'nothing' is registered"):
        methods.unregister("nothing")
    assert methods.names() == before


def test_unknown_methods_and_options_list_the_allowed_ones():
    with pytest.raises(ValueError, match="did you mean 'gradcam'"):
        methods.get("gradcan")
    with pytest.raises(ValueError, match="its options are: baseline, rule, steps; received sample"):
        methods.get("integrated_gradients").check_options({"sample": 3})


def test_options_are_checked_by_their_declared_type():
    relu = methods.get("gradcam").option("relu")
    assert relu.type is bool and relu.flag == "--relu"
    with pytest.raises(TypeError, match="'relu' must be bool; received 'no'"):
        relu.check("no")
    assert relu.check(False) is False
    with pytest.raises(ValueError, match="'aggregate' must be one of 'mean', 'square', 'variance'; received 'max'"):
        methods.get("smoothgrad").check_options({"aggregate": "max"})
    with pytest.raises(TypeError, match="'samples' must be int; received True"):
        methods.get("smoothgrad").check_options({"samples": True})
    assert Option("max_sigma", 50.0).flag == "--max-sigma" and Option("max_sigma", 50.0).type is float
    assert Option("steps", 5).check(np.int64(4)) == 4
    assert Option("noise", 0.1).check(1) == 1  # an int is a fine float
    with pytest.raises(ValueError, match="give its type"):
        Option("layer", None)
    with pytest.raises(TypeError, match="cannot infer a type"):
        Option("window", (2, 2))


# -- reading declarations without TensorFlow; entry points ---------------------------------------
def _run(code: str, extra_path: str = "") -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(REPO)) if p)}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_reading_every_declaration_imports_neither_tensorflow_nor_keras():
    code = """
        import json, sys
        from saliency_kit import methods
        table = [(m.name, m.summary, m.title, m.cam, m.reduce, [(o.name, o.type.__name__, o.default if not
                 isinstance(o.default, float) else str(o.default), o.help, o.choices) for o in m.options])
                 for m in map(methods.get, methods.names())]
        methods.get("smoothgrad").check_options({"samples": 3, "base": "integrated_gradients", "steps": 4})
        print(json.dumps([len(table), "tensorflow" in sys.modules, "keras" in sys.modules]))
    """
    assert json.loads(_run(code)) == [len(BUILTINS), False, False]


def test_methods_of_installed_distributions_are_loaded_from_the_entry_point_group(tmp_path):
    (tmp_path / "outside_plugin.py").write_text(
        textwrap.dedent("""
        from saliency_kit.methods import register

        @register("outside_gradient", summary="a plugin's gradient", options={"scale": 2.0})
        def outside_gradient(ctx, scale):
            return scale * ctx.gradients(ctx.inputs)
    """)
    )
    info = tmp_path / "outside_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[saliency_kit.methods]\noutside = outside_plugin\n")
    code = """
        import json, sys
        from saliency_kit import methods
        names = methods.names()
        print(json.dumps([names[-1], names[:3], methods.get("outside_gradient").option("scale").type.__name__,
                          "tensorflow" in sys.modules]))
    """
    assert json.loads(_run(code, str(tmp_path))) == ["outside_gradient", BUILTINS[:3], "float", False]


def test_the_order_does_not_depend_on_which_method_module_is_imported_first():
    code = """
        import json
        import saliency_kit.methods.rise
        import saliency_kit.methods.smoothgrad
        from saliency_kit import methods
        print(json.dumps(methods.names()))
    """
    assert json.loads(_run(code)) == BUILTINS


def test_the_doc_tables_are_generated_from_the_declarations():
    """The methods table of docs/guide/python.md and the package docstring's are what
    scripts/method_tables.py makes; every method the other tables of the README and the docs' pages
    name is a registered one."""
    import re

    out = subprocess.run([sys.executable, str(REPO / "scripts" / "method_tables.py")], capture_output=True, text=True)
    assert out.returncode == 0, f"stale method tables (run scripts/method_tables.py --write): {out.stdout}"
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "guide").glob("*.md"))]
    readme = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    guide = (REPO / "docs" / "guide" / "python.md").read_text(encoding="utf-8")
    assert table.markdown() in guide and table.rst() in methods.__doc__
    named = set()
    for block in re.findall(r"(?m)^\| method \|.*\n(?:\|.*\n)+", readme):  # every table of methods
        for row in block.splitlines()[2:]:
            named |= set(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    assert named and named <= set(BUILTINS), sorted(named - set(BUILTINS))


# -- option ranges and seeds ---------------------------------------------------------------------
def test_option_ranges_are_checked_and_stated():
    steps = methods.get("integrated_gradients").option("steps")
    assert steps.range_text == "a positive int"
    with pytest.raises(ValueError, match=r"integrated_gradients: steps must be a positive int; received 0\.$"):
        methods.get("integrated_gradients").check_options({"steps": 0})
    p = methods.get("rise").option("p")
    assert p.range_text == "a number in (0, 1]" and p.check(1) == 1
    for bad in (0, 0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"p must be a number in \(0, 1\]"):
            p.check(bad)
    noise = methods.get("smoothgrad").option("noise")
    assert noise.check(0.0) == 0.0 and noise.range_text == "a non-negative number"
    with pytest.raises(ValueError, match="noise must be a non-negative number; received inf"):
        noise.check(float("inf"))
    limit = methods.get("scorecam").option("max_channels")
    assert limit.check(None) is None and limit.check(3) == 3
    with pytest.raises(ValueError, match=r"max_channels must be a positive int or None; received 0"):
        limit.check(0)
    assert Option("k", 3, low=2, low_open=True).range_text == "an int > 2"
    assert Option("t", 0.5, high=1.0).range_text == "a number ≤ 1"
    assert Option("t", 0.5, low=-1, high=2.5, high_open=True).range_text == "a number in [-1, 2.5)"
    with pytest.raises(ValueError, match="x must be a positive int; received 0"):
        Option("x", 0, low=1)  # a default outside its own range is refused
    with pytest.raises(TypeError, match="only int and float options take low="):
        Option("name", "a", low=1)


def test_a_seed_option_draws_a_seed_when_none_is_given():
    seed = Option.seed()
    assert seed.kind == "seed" and seed.default is None and seed.type is int
    drawn = {seed.resolve(None) for _ in range(5)}
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in drawn) and len(drawn) > 1
    assert seed.resolve(np.int64(4)) == 4 and type(seed.resolve(np.int64(4))) is int
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        seed.check(-1)
    # the declaration says which methods are noisy; smoothgrad is noisy whatever its base
    assert [m for m in BUILTINS if methods.get(m).noisy] == [
        "smoothgrad",
        "squaregrad",
        "vargrad",
        "expected_gradients",
        "rise",
    ]
    assert methods.get("xrai").seed_option() is None
    assert methods.get("xrai").seed_option({"base": "expected_gradients"}) == "seed"


def test_prepare_draws_the_seed_and_prepares_the_base_once(linear_image):
    model, x, _ = linear_image
    request = methods.Request(model, x)
    smooth = methods.get("smoothgrad")
    values = smooth.prepare(request, smooth.check_options({"base": "integrated_gradients", "baseline": 0.5}))
    assert isinstance(values["seed"], int)
    assert values["baseline"].shape == x.shape[1:] and values["baseline"].dtype == x.dtype  # the base's prepare ran
    with pytest.raises(ValueError, match=r"base must be a pixel method \(gradient, .*\); received 'gradcam'"):
        smooth.prepare(request, smooth.check_options({"base": "gradcam"}))
    with pytest.raises(ValueError, match=r"base must be a pixel method .*received 'vargrad'"):
        methods.get("xrai").prepare(request, methods.get("xrai").check_options({"base": "vargrad"}))


def test_method_modules_import_no_other_method_module_and_no_private_registry():
    """Shared helpers live in methods/_common.py; the registry is read through get() and names()."""
    import ast

    folder = REPO / "saliency_kit" / "methods"
    method_modules = {m.compute.__module__.rpartition(".")[2] for m in map(methods.get, BUILTINS)}
    assert {"gradient", "smoothgrad", "rise"} <= method_modules and "_common" not in method_modules
    offenders = []
    for name in sorted(method_modules):
        tree = ast.parse((folder / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported = {node.module} if node.module else {alias.name for alias in node.names}
                offenders += [f"{name} imports {other}" for other in imported & method_modules]
            if isinstance(node, ast.alias) and node.name.startswith("_") and node.name != "_common":
                offenders.append(f"{name} imports the private {node.name}")
            if isinstance(node, ast.Name) and node.id == "_REGISTRY":
                offenders.append(f"{name} reads _REGISTRY")
    assert not offenders


def test_the_small_settings_table_shortens_every_long_option():
    """The tests that run many methods share one table of small settings: any int option a method
    declares with a default above 8 (samples, steps, masks) is set lower there."""
    from method_support import SMALL

    long = [
        (name, option.name)
        for name in methods.names()
        for option in methods.get(name).options
        if option.type is int and isinstance(option.default, int) and option.default > 8
        if not SMALL.get(name, {}).get(option.name, option.default) < option.default
    ]
    assert not long, f"add these to tests/method_support.py's SMALL: {long}"
