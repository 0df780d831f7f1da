"""exercises.ch06: each check accepts a right answer, waits for a stub, and names each known mistake."""

import itertools

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.exercises import ch06 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- (a) tie_weights


def tie(model):
    model.lm_head.weight = model.token_embedding.weight


def tie_and_return(model):
    tie(model)
    return model


def tie_with_new_shared_parameter(model):
    """A new Parameter holding the embedding's values, used by both: a tie, though not the usual one."""
    shared = nn.Parameter(model.token_embedding.weight.detach().clone())
    model.token_embedding.weight = shared
    model.lm_head.weight = shared


def copy_data(model):
    model.lm_head.weight.data.copy_(model.token_embedding.weight.data)


def clone_parameter(model):
    model.lm_head.weight = nn.Parameter(model.token_embedding.weight.detach().clone())


def share_data(model):
    model.lm_head.weight.data = model.token_embedding.weight.data


def wrap_in_new_parameter(model):
    model.lm_head.weight = nn.Parameter(model.token_embedding.weight)


def wrong_direction(model):
    model.token_embedding.weight = model.lm_head.weight


def embedding_replaced_by_head_shaped_weight(model):
    """The head thought of as (d_model, vocab): a new 'head weight' put into the embedding."""
    model.token_embedding.weight = nn.Parameter(model.lm_head.weight.detach().T.clone())
    model.lm_head.weight = model.token_embedding.weight


def transposed_head(model):
    model.lm_head.weight = nn.Parameter(model.token_embedding.weight.T)


def plain_tensor(model):
    model.lm_head.weight = model.token_embedding.weight.T  # TypeError: not a Parameter


def tie_then_reinit(model):
    tie(model)
    tl.init_weights_(model)


def tie_then_init_head(model):
    tie(model)
    nn.init.normal_(model.lm_head.weight, std=0.02)


def new_head_with_bias(model):
    model.lm_head = nn.Linear(model.config.d_model, model.config.vocab_size)
    model.lm_head.weight = model.token_embedding.weight


def copy_wrong_direction(model):
    model.token_embedding.weight.data.copy_(model.lm_head.weight.data)


def does_nothing(model):
    w = model.lm_head.weight  # noqa: F841 (rebinding a local changes nothing)
    w = model.token_embedding.weight  # noqa: F841


def returns_new_model(model):
    return tl.GPT2(model.config)


def tie_and_change_other_weights(model):
    tie(model)
    with torch.no_grad():
        model.norm_f.weight.mul_(2.0)


def test_tie_weights_right_answers_pass(capsys):
    assert ex.check_tie_weights(tie).passed is True
    assert "Correct" in capsys.readouterr().out
    assert ex.check_tie_weights(tie_and_return).passed is True
    assert ex.check_tie_weights(tie_with_new_shared_parameter).passed is True


def test_tie_weights_stub_is_pending(capsys):
    assert ex.check_tie_weights(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (copy_data, r"copied the embedding's values into the head"),
        (clone_parameter, r"copied the embedding's values into the head"),
        (share_data, r"share their memory but are two different Parameter objects"),
        (wrap_in_new_parameter, r"share their memory but are two different Parameter objects"),
        (wrong_direction, r"(?s)holds the \*head's\* values: you tied in the wrong direction.*are lost"),
        (embedding_replaced_by_head_shaped_weight, r"embedding's weight now has shape \(8, 23\).*wrong direction"),
        (plain_tensor, r"(?s)TypeError.*only be replaced by an nn.Parameter"),
        (tie_then_reinit, r"re-initialised it after tying"),
        (tie_then_init_head, r"re-initialised it after tying"),
        (new_head_with_bias, r"head now has a bias"),
        (copy_wrong_direction, r"copied the head's values into the embedding"),
        (does_nothing, r"did not change the model"),
        (returns_new_model, r"returned a different object"),
        (tie_and_change_other_weights, r"no longer computes what a tied GPT-2 computes"),
    ],
)
def test_tie_weights_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_tie_weights(mistake)


def test_tie_weights_wrong_shape_raises():
    with pytest.raises(ExerciseFailed, match=r"lm_head.weight has shape \(8, 23\).*transposed"):
        ex.check_tie_weights(transposed_head)


def test_untied_model_has_distinct_recognisable_weights():
    a, b = ex.untied_model(), ex.untied_model()
    assert a.lm_head.weight is not a.token_embedding.weight
    assert torch.equal(a.token_embedding.weight, b.token_embedding.weight)  # deterministic
    assert not torch.allclose(a.token_embedding.weight, a.lm_head.weight)


def test_untied_model_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.untied_model()
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- (b) the parameter count, written independently


def count(vocab_size, n_ctx, d_model, n_layers, tied=True, *, linear_bias=True, norm_params=2, block_norms=True,
          final_norm=True, positions=True, ffn_mult=4, w_o=True, head="auto", head_bias=False, token_embedding=True):
    """GPT-2's parameter count group by group, with switches for the mistakes the check should name."""
    d = d_model
    n_mats = 4 if w_o else 3
    attn = n_mats * d * d + (n_mats * d if linear_bias else 0)
    ffn = 2 * ffn_mult * d * d + ((ffn_mult * d + d) if linear_bias else 0)
    norms = (2 if block_norms else 0) * norm_params * d
    per_block = attn + ffn + norms
    total = n_layers * per_block
    total += vocab_size * d if token_embedding else 0
    total += n_ctx * d if positions else 0
    total += norm_params * d if final_norm else 0
    if head == "auto":
        head = not tied
    if head:
        total += vocab_size * d + (vocab_size if head_bias else 0)
    return total


@pytest.mark.slow
def test_num_parameters_right_answer_passes(capsys):
    assert ex.check_gpt2_num_parameters(count).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "124,439,808" in out
    assert ex.check_gpt2_num_parameters(lambda *a: float(count(*a))).passed is True  # an integral float is fine


def test_formula_matches_gpt2_small():
    assert count(50257, 1024, 768, 12, True) == 124_439_808


def test_num_parameters_stub_is_pending(capsys):
    assert ex.check_gpt2_num_parameters(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(linear_bias=False), r"forgot the biases of the linear layers"),
        (dict(linear_bias=False, norm_params=1), r"forgot all the biases"),
        (dict(norm_params=1), r"LayerNorm as d_model parameters"),
        (dict(block_norms=False, final_norm=False), r"forgot the LayerNorms: two per block"),
        (dict(block_norms=False), r"LayerNorms inside the blocks"),
        (dict(final_norm=False), r"forgot the final LayerNorm"),
        (dict(positions=False), r"forgot the position embeddings"),
        (dict(ffn_mult=1), r"hidden size is 4 x d_model"),
        (dict(w_o=False), r"output projection W_O"),
        (dict(head=True), r"counted the tied head as well"),
        (dict(token_embedding=False), r"left out the token embedding"),
    ],
)
def test_num_parameters_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_gpt2_num_parameters(lambda *a: count(*a, **mistake))


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(head=False), r"Untied, the head is a second"),
        (dict(head_bias=True), r"it has no bias"),
    ],
)
def test_num_parameters_untied_mistakes_are_named(mistake, hint):
    """Right when tied, wrong only when untied: the check's second case catches these."""
    with pytest.raises(ExerciseFailed, match=rf"tied=False.*{hint}"):
        ex.check_gpt2_num_parameters(lambda *a: count(*a, **mistake))


def test_num_parameters_unknown_error_reports_the_difference():
    with pytest.raises(ExerciseFailed, match=r"off by \+1\b"):
        ex.check_gpt2_num_parameters(lambda *a: count(*a) + 1)


def test_num_parameters_wrong_type_raises():
    with pytest.raises(ExerciseFailed, match="one int"):
        ex.check_gpt2_num_parameters(lambda *a: (count(*a), 0))
    with pytest.raises(ExerciseFailed, match="one int"):
        ex.check_gpt2_num_parameters(lambda *a: count(*a) + 0.5)


def test_num_parameters_mistakes_are_distinguishable():
    """On every case of the check, each mistake gives a count different from the answer and from each other."""
    for case in ex.PARAM_CASES:
        counts = [ex._count(*case)] + list(ex.param_mistakes(*case).values())
        for a, b in itertools.combinations(counts, 2):
            assert a != b, case


def test_independent_formula_agrees_with_the_library_on_real_models():
    """The test's formula against models actually built (not on the meta device)."""
    for tied in (True, False):
        model = tl.GPT2(tl.GPT2Config(vocab_size=37, n_ctx=11, d_model=12, n_layers=2, n_heads=3, tie_weights=tied))
        assert model.num_parameters() == count(37, 11, 12, 2, tied)


def tie_and_add_a_parameter(model):
    tie(model)
    model.extra = nn.Linear(2, 2)


def test_tie_weights_extra_parameters_are_named():
    with pytest.raises(ExerciseFailed, match=r"Did it add or replace other modules"):
        ex.check_tie_weights(tie_and_add_a_parameter)


@pytest.mark.parametrize("with_positions, hint", [
    (True, r"That is the chapter's approximation, 12 L d_model\^2 \+ \(vocab \+ n_ctx\) d_model"),
    (False, r"the chapter's approximation without the position table"),
])
def test_num_parameters_the_chapters_approximation_is_named(with_positions, hint):
    """The approximation the chapter checks its counts against: the old check only said 'off by'."""
    def approximation(vocab_size, n_ctx, d_model, n_layers, tied=True):
        head = 0 if tied else vocab_size * d_model
        positions = n_ctx * d_model if with_positions else 0
        return 12 * n_layers * d_model**2 + vocab_size * d_model + positions + head

    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_gpt2_num_parameters(approximation)
