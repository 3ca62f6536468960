"""The metric declarations: :func:`sk.evaluate.metric`, :func:`sk.evaluate.metrics`, and every list
made from them (``sk.evaluate``'s names, ``compare``, the docs' table)."""

import dataclasses
import pathlib
import subprocess
import sys

import pytest

from saliency_kit import evaluate
from saliency_kit.evaluate import registry

REPO = pathlib.Path(__file__).resolve().parents[2]
#: The metrics the package promises, by the name compare and saliency evaluate know them.
CONTRACT = (
    "faithfulness_correlation",
    "infidelity",
    "road",
    "monotonicity_correlation",
    "region_perturbation",
    "pixel_flipping",
    "deletion",
    "insertion",
    "max_sensitivity",
    "avg_sensitivity",
    "relative_input_stability",
    "pointing_game",
    "relevance_mass_accuracy",
    "relevance_rank_accuracy",
    "top_k_intersection",
    "attribution_localisation",
    "auc",
    "sparseness",
    "complexity",
    "effective_complexity",
    "random_logit",
    "randomization",
    "completeness",
    "non_sensitivity",
    "input_invariance",
)


def test_every_builtin_metric_is_declared_once_and_listed():
    declared = evaluate.metrics()
    names = [m.name for m in declared]
    assert len(names) == len(set(names))
    assert set(CONTRACT) <= set(names)
    assert {m.family for m in declared} == set(registry.FAMILIES)
    for m in declared:
        assert m.builtin and getattr(evaluate, m.function.__name__) is m.function
        assert m.function.__name__ in evaluate.__all__
        assert m.direction == ("higher" if m.higher_is_better else "lower")
        assert m.needs_masks == (m.family == "localisation")
    model_free = {m.name for m in declared if m.takes_maps}
    assert model_free == {
        "relevance_mass_accuracy",
        "relevance_rank_accuracy",
        "top_k_intersection",
        "attribution_localisation",
        "auc",
        "pointing_game",
        "sparseness",
        "complexity",
        "effective_complexity",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        declared[0].higher_is_better = not declared[0].higher_is_better  # type: ignore[misc]


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="already registered"):

        @evaluate.metric("sparseness", family="complexity", higher_is_better=True)
        def sparseness_again(model=None, inputs=None, explanation_or_method="gradient", targets="top1", **options):
            return None

    assert registry.get("sparseness").function is evaluate.sparseness
    with pytest.raises(ValueError, match="identifier"):
        evaluate.metric("not a name", family="complexity", higher_is_better=True)
    with pytest.raises(ValueError, match="built-in metrics cannot be unregistered"):
        registry.unregister("sparseness")
    with pytest.raises(ValueError, match="did you mean 'sparseness'"):
        registry.get("sparsenes")


def test_readme_metric_table_is_the_declarations():
    """The docs' metric table (docs/guide/evaluation.md) is what scripts/metric_table.py makes from the registry."""
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "metric_table.py")], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, f"stale metric table (run scripts/metric_table.py --write): {out.stdout}{out.stderr}"
    text = (REPO / "docs" / "guide" / "evaluation.md").read_text(encoding="utf-8")
    assert registry.markdown() in text
    assert all(f"| `{m.name}` |" in text for m in evaluate.metrics())
