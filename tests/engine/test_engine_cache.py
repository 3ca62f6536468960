"""Cache keys by value: equal values share a kernel, different values never do."""

import functools

import numpy as np

from saliency_kit.engine.cache import ModelCache, value_key


def _scale(k):
    return lambda out: out * k


def test_equal_functions_share_a_key_and_different_ones_do_not():
    assert value_key(_scale(2)) == value_key(_scale(2))
    assert value_key(_scale(2)) != value_key(_scale(3))
    assert value_key(lambda o: o[:, 1]) != value_key(lambda o: o[:, 2])
    assert value_key(functools.partial(max, 1)) == value_key(functools.partial(max, 1))
    assert value_key(functools.partial(max, 1)) != value_key(functools.partial(max, 2))
    assert value_key(functools.partial(max, key=abs)) != value_key(functools.partial(max, key=len))


def test_objects_by_class_and_attributes():
    class Rule:
        def __init__(self, alpha):
            self.alpha = alpha

    assert value_key(Rule(1.0)) == value_key(Rule(1.0)) != value_key(Rule(2.0))
    unhashable = np.zeros(3)
    assert value_key(unhashable) is unhashable  # its own key (identity), never a wrong match


def test_the_model_cache_is_a_bounded_lru_per_model():
    class Model:
        pass

    cache, model, built = ModelCache(size=3), Model(), []
    for key in range(5):
        cache.get(model, key, lambda: built.append(1) or len(built))
    assert cache.count(model) == 3 and len(built) == 5
    cache.get(model, 4, lambda: built.append(1))  # most recent: kept, not rebuilt
    assert len(built) == 5
    cache.get(model, 0, lambda: built.append(1))  # dropped earlier: rebuilt
    assert len(built) == 6
    del model
    import gc

    gc.collect()
    assert cache.count() == 0


def test_structure_facts_are_kept_per_model_and_fingerprint_errors_never_and_the_model_is_not_held():
    import gc
    import weakref

    import keras
    import pytest

    from saliency_kit.engine.views import structure_fact

    inputs = keras.Input((3,))
    dense = keras.layers.Dense(2, activation="relu")
    model = keras.Model(inputs, dense(inputs))
    computed: list = []

    def fact():
        computed.append(1)
        return len(computed)

    assert structure_fact(model, "fact", fact) == structure_fact(model, "fact", fact) == 1
    dense.activation = keras.activations.linear  # an edit the fingerprint sees: computed afresh
    assert structure_fact(model, "fact", fact) == 2 and structure_fact(model, "other", fact) == 3

    def refused():
        computed.append(1)
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError, match="no"):
            structure_fact(model, "refused", refused)
    assert len(computed) == 5  # an error is raised again, never kept
    ref = weakref.ref(model)
    del model, inputs, dense
    gc.collect()
    assert ref() is None
