"""``sk.explain_generation``: greedy tokens against a hand decoding loop on the backbone's own
layers, the explanation of the generated tokens, token strings, and the errors."""

import numpy as np
import pytest
from causal_lm_support import T, log_softmax, prefix_mean_lm, tiny_gpt2

import saliency_kit as sk
from saliency_kit.pipeline.generation import generated_text


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(seed=7)


def hand_logits(lm, ids):
    """``[T, V]``: GPT-2's logits from its layers, called one by one (no padding mask: every token counts)."""
    backbone = lm.backbone
    vectors = backbone.token_embedding(ids[None])
    hidden = backbone.embeddings_add([vectors, backbone.position_embedding(vectors)])
    for block in backbone.transformer_layers:
        hidden = block(hidden)
    return np.asarray(backbone.token_embedding(backbone.layer_norm(hidden), reverse=True))[0]


def hand_greedy(lm, ids, count, stop):
    ids = list(ids)
    for _ in range(count):
        token = int(np.argmax(hand_logits(lm, np.array(ids, np.int32))[-1]))
        if token == stop:
            break
        ids.append(token)
    return ids


def test_greedy_tokens_match_a_hand_decoding_loop_and_are_explained(gpt2):
    e = sk.explain_generation(gpt2, "ab a c b", max_new_tokens=6, method="integrated_gradients", steps=6)
    prompt = [0, 5, 3, 8, 4]  # the start token, then "ab", " a", " c", " b"
    sequence = hand_greedy(gpt2, prompt, 6, stop=0)
    start = e.options["start"]
    assert start == len(prompt)
    assert len(e.tokens[0]) == len(sequence) > start
    K, T_ = len(sequence) - start, len(sequence)
    assert e.attributions.shape == (1, K, T_, 8) and e.maps.shape == (1, K, T_)
    np.testing.assert_array_equal(e.targets[0], sequence[start:])
    log_p = log_softmax(hand_logits(gpt2, np.array(sequence, np.int32)).astype(np.float64))
    np.testing.assert_allclose(e.scores[0], [log_p[p - 1, sequence[p]] for p in range(start, T_)], rtol=1e-4, atol=1e-4)
    for k in range(K):
        assert not e.maps[0, k, start + k :].any()
    assert e.tokens[0][:start] == ["<|endoftext|>", "ab", " a", " c", " b"]
    assert generated_text(e) == "".join(e.tokens[0][start:])


def test_token_ids_prompts_and_models_without_a_preprocessor():
    model, _, _ = prefix_mean_lm(seed=3)
    prompt = np.array([3, 1, 4], np.int32)
    e = sk.explain_generation(model, prompt, max_new_tokens=T - 3, method="gradient")
    sequence = list(prompt)
    for _ in range(T - 3):
        logits = np.asarray(model(np.array([sequence], np.int32)))[0]
        sequence.append(int(np.argmax(logits[-1])))
    np.testing.assert_array_equal(e.targets[0], sequence[3:])
    assert e.tokens[0] == [str(i) for i in sequence]
    with pytest.raises(ValueError, match="preprocessor"):
        sk.explain_generation(model, "some text")
    with pytest.raises(ValueError, match="max_new_tokens"):
        sk.explain_generation(model, prompt, max_new_tokens=0)
    with pytest.raises(ValueError, match="token ids"):
        sk.explain_generation(model, np.array([[1.5, 2.0]]))
