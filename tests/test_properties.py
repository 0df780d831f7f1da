"""Property-based tests (Hypothesis) of the public API off the happy path.

Each test draws arguments, good and bad: shapes, dtypes, token ids, settings. The property, for
every call:

* if every argument is within its documented range, the call returns finite results of the
  promised kind (or, for a combination the docs refuse, raises as below);
* otherwise it raises one of the library's documented errors, ``TypeError`` or ``ValueError``
  (``transformer_lib/_checks.py``), whose message names one of the arguments that were out of
  range: never an internal error (``IndexError``, ``RuntimeError`` from deep inside torch), never
  NaN, never a silent acceptance.

Derandomised, so CI draws the same examples every run. On the library before issue 23 (commit
f5a8e47) every test here fails; among what they find: float64 input to ``LayerNorm`` accepted and
to ``FeedForward`` raising torch's "mat1 and mat2 must have the same dtype", a loss of NaN for
all-ignored targets and ``IndexError`` for -1 targets, a ``TrainConfig`` whose rate never reaches
``lr`` (``max_steps`` below the default 100 warm-up steps), sampling from NaN weights raising
torch's "probability tensor contains inf, nan", ``do_sample="False"`` taken as true, a list to
``get_batch`` or ``MLMCollator`` raising ``AttributeError``, ``CharTokenizer.from_text("")``
accepted with 0 tokens, ``tok.encode(2024)`` raising "'int' object is not iterable",
``set_cpu_threads(1)`` raising ``RuntimeError``.
"""

import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import transformer_lib as tl

DOCUMENTED = (TypeError, ValueError)
PROPERTY = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
V, N_CTX = 11, 8  # the tiny models' vocabulary and context

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES = FLOAT_DTYPES + [torch.int64, torch.int32, torch.bool]


class Silent(AssertionError):
    """An input outside its documented range was accepted."""


def check(call, bad: list[str], names: list[str]):
    """Run ``call``. ``bad``: the arguments drawn outside their documented range. Returns the result,
    or None if it raised a documented error naming one of ``bad`` (or of ``names`` when none is bad)."""
    try:
        result = call()
    except DOCUMENTED as e:
        allowed = bad or names
        assert any(re.search(rf"\b{re.escape(name)}\b", str(e)) for name in allowed), \
            f"{type(e).__name__} names none of {allowed}: {e}"
        return None
    except Exception as e:  # an internal error: a bug
        raise AssertionError(f"internal error {type(e).__name__}: {e} (bad arguments: {bad})") from e
    if bad:
        raise Silent(f"accepted {bad} outside their documented range, returned {summary(result)}")
    return result


def summary(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {value.dtype} {value.flatten()[:4].tolist()}"
    return repr(value)[:120]


def finite(t: torch.Tensor) -> bool:
    return bool(t.float().isfinite().all())


@st.composite
def arrays(draw, last: int, dims=(1, 2, 3, 4)):
    """A tensor (or nested list) of some dtype and shape, its last dimension ``last`` or another."""
    n_dims = draw(st.sampled_from(dims))
    shape = [draw(st.integers(1, 3)) for _ in range(n_dims - 1)]
    shape.append(draw(st.sampled_from([last, last, last + 1, max(1, last - 1)])))
    dtype = draw(st.sampled_from(DTYPES))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x = torch.randn(shape, generator=g).to(dtype) if dtype.is_floating_point else \
        torch.randint(0, 3, shape, generator=g).to(dtype)
    return x.tolist() if draw(st.booleans()) and draw(st.booleans()) else x


# ---- layers: float input of the layer's dtype, or a clear error ------------------------------------
LAYERS = {
    "LayerNorm": (lambda d: tl.LayerNorm(d), (1, 2, 3, 4)),
    "RMSNorm": (lambda d: tl.RMSNorm(d), (1, 2, 3, 4)),
    "FeedForward": (lambda d: tl.FeedForward(d, 8), (1, 2, 3, 4)),
    "GatedFeedForward": (lambda d: tl.GatedFeedForward(d, 8), (1, 2, 3, 4)),
    "MultiHeadAttention": (lambda d: tl.MultiHeadAttention(d, 2, kind="causal"), (2, 3, 4)),
}


@PROPERTY
@given(data=st.data(), kind=st.sampled_from(list(LAYERS)), d_model=st.sampled_from([4, 8]))
def test_layers_take_float_vectors_or_say_why(data, kind, d_model):
    make, dims = LAYERS[kind]
    layer = make(d_model).eval()
    x = data.draw(arrays(d_model, dims))
    bad = []
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        bad.append("x")
    elif x.shape[-1] != d_model or (kind == "MultiHeadAttention" and x.dim() != 3):
        bad.append("x")
    with torch.no_grad():
        out = check(lambda: layer(x), bad, ["x"])
    if out is not None:
        assert out.dtype == torch.float32 and out.shape == x.shape and finite(out)


@PROPERTY
@given(q_dtype=st.sampled_from(DTYPES), k_dtype=st.sampled_from(DTYPES), v_dtype=st.sampled_from(DTYPES),
       seq=st.integers(1, 4), d_k=st.sampled_from([2, 4]), d_k2=st.sampled_from([2, 4]))
def test_attention_function_takes_float_tensors_or_says_why(q_dtype, k_dtype, v_dtype, seq, d_k, d_k2):
    def make(dtype, d):
        t = torch.randn(2, seq, d)
        return t.to(dtype) if dtype.is_floating_point else (t > 0).to(dtype)

    q, k, v = make(q_dtype, d_k), make(k_dtype, d_k2), make(v_dtype, 3)
    bad = [n for n, t in (("q", q), ("k", k), ("v", v)) if not t.dtype.is_floating_point]
    if not bad and len({q_dtype, k_dtype, v_dtype}) > 1:
        bad = ["q, k, v"]
    if not bad and d_k != d_k2:
        bad = ["d_k"]
    out = check(lambda: tl.scaled_dot_product_attention(q, k, v), bad, ["q", "k", "v"])
    if out is not None:
        assert all(finite(t) for t in out)


# ---- losses: ids or IGNORE_INDEX, at least one id: finite; else a clear error ----------------------
@PROPERTY
@given(entries=st.lists(st.sampled_from([-100, -100, -1, -2, 0, 1, V - 1, V, V + 3]), min_size=1, max_size=8),
       smoothing=st.sampled_from([0.0, 0.1]))
def test_losses_are_finite_or_say_why(entries, smoothing):
    targets = torch.tensor([entries])
    logits = torch.randn(1, len(entries), V)
    in_range = all(0 <= t < V or t == -100 for t in entries)
    bad = [] if in_range and any(0 <= t < V for t in entries) else ["targets"]
    loss = check(lambda: tl.causal_lm_loss(logits, targets, smoothing), bad, ["targets"])
    if loss is not None:
        assert loss.dim() == 0 and finite(loss) and loss >= 0
    labels_bad = [] if in_range and any(0 <= t < V for t in entries) else ["labels"]
    loss = check(lambda: tl.masked_lm_loss(logits[0], targets[0], smoothing), labels_bad, ["labels"])
    if loss is not None:
        assert finite(loss)


# ---- TrainConfig: every accepted config has a schedule that peaks and decays ------------------------
@PROPERTY
@given(max_steps=st.one_of(st.integers(-1, 400), st.just(50.0)),
       warmup_steps=st.one_of(st.none(), st.integers(-1, 500)),
       weight_decay=st.sampled_from([0.0, 0.1, -0.1, float("nan"), "0.1"]),
       compile=st.sampled_from([False, True, "no", 0]),
       betas=st.sampled_from([(0.9, 0.95), [0.9, 0.99], 0.9, (0.9,), (0.9, 1.2)]),
       lr=st.sampled_from([1e-3, 0.0, -1e-3, float("inf")]),
       schedule=st.sampled_from(["cosine", "inverse_sqrt"]))
def test_train_configs_are_coherent_or_refused(max_steps, warmup_steps, weight_decay, compile, betas, lr,
                                                schedule):
    drawn = dict(max_steps=max_steps, warmup_steps=warmup_steps, weight_decay=weight_decay, compile=compile,
                 betas=betas, lr=lr, schedule=schedule)
    kwargs = {k: v for k, v in drawn.items() if v is not None}
    bad = []
    if not isinstance(max_steps, int) or max_steps < 1:
        bad.append("max_steps")
    if warmup_steps is not None and (warmup_steps < 0 or (not bad and warmup_steps >= max_steps)):
        bad.append("warmup_steps")
    if not isinstance(weight_decay, float) or not weight_decay >= 0:
        bad.append("weight_decay")
    if not isinstance(compile, bool):
        bad.append("compile")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        bad.append("betas")
    if not (0 < lr < math.inf):
        bad.append("lr")
    config = check(lambda: tl.TrainConfig(progress=False, device="cpu", **kwargs), bad, list(drawn))
    if config is None:
        return
    if schedule == "cosine":
        lrs = [tl.lr_at(s, config.lr, config.min_lr, config.warmup_steps, config.max_steps)
               for s in range(config.max_steps)]
    else:
        lrs = [tl.inverse_sqrt_lr(s, config.lr, config.warmup_steps) for s in range(config.max_steps)]
    peak = max(range(len(lrs)), key=lambda s: lrs[s])
    assert lrs[peak] == pytest.approx(config.lr), "the schedule never reaches lr"
    assert all(a >= b - 1e-15 for a, b in zip(lrs[peak:], lrs[peak + 1:])), "it rises after its peak"
    assert config.weight_decay >= 0 and isinstance(config.compile, bool) and len(config.betas) == 2


# ---- generation: tokens of the vocabulary, or a clear error -----------------------------------------
def tiny_gpt(diverged: bool) -> tl.GPT2:
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=V, n_ctx=N_CTX, d_model=16, n_layers=1, n_heads=2)).eval()
    if diverged:  # what a diverged training run leaves
        with torch.no_grad():
            model.blocks[0].ffn.W_in.weight.fill_(float("nan"))
    return model


MODELS = {False: tiny_gpt(False), True: tiny_gpt(True)}


@PROPERTY
@given(ids=st.lists(st.integers(-2, V + 1), min_size=1, max_size=N_CTX + 2),
       batch_dim=st.booleans(), as_float=st.booleans(),
       max_new_tokens=st.integers(0, 4),
       temperature=st.sampled_from([1.0, 0.7, 0.0, -1.0]),
       top_k=st.sampled_from([None, 1, 5, 0]), top_p=st.sampled_from([None, 0.9, 1.0, 0.0, 1.5]),
       do_sample=st.sampled_from([True, False, "False"]),
       num_beams=st.sampled_from([1, 1, 2]),
       eos_token_id=st.one_of(st.none(), st.integers(-1, V + 40)),
       diverged=st.booleans())
def test_generate_returns_vocabulary_tokens_or_says_why(ids, batch_dim, as_float, max_new_tokens, temperature,
                                                         top_k, top_p, do_sample, num_beams, eos_token_id,
                                                         diverged):
    model = MODELS[diverged]
    input_ids = torch.tensor([ids] if batch_dim else ids, dtype=torch.float32 if as_float else torch.long)
    bad = []
    if not batch_dim or as_float or not all(0 <= i < V for i in ids):
        bad.append("input_ids")
    if not isinstance(do_sample, bool):
        bad.append("do_sample")
    if eos_token_id is not None and not 0 <= eos_token_id < V:
        bad.append("eos_token_id")
    if do_sample is True and num_beams == 1:
        if not temperature > 0:
            bad.append("temperature")
        if top_k == 0:
            bad.append("top_k")
        if top_p is not None and not 0 < top_p <= 1:
            bad.append("top_p")
    if diverged and max_new_tokens > 0 and not bad:
        bad.append("model")  # its weights are NaN: "the model's weights are not finite"
    out = check(lambda: tl.generate(model, input_ids, max_new_tokens, temperature=temperature, top_k=top_k,
                                    top_p=top_p, do_sample=do_sample, num_beams=num_beams,
                                    eos_token_id=eos_token_id),
                bad, ["input_ids", "max_new_tokens", "temperature", "top_k", "top_p", "do_sample", "num_beams",
                      "eos_token_id"])
    if out is not None:
        assert out.dtype == torch.long and out.shape[0] == 1
        assert len(ids) <= out.shape[1] <= len(ids) + max_new_tokens
        assert out.min() >= 0 and out.max() < V, "a token outside the vocabulary"


# ---- data: integer ids in, batches of ids out -------------------------------------------------------
@PROPERTY
@given(values=st.lists(st.integers(0, V - 1), min_size=0, max_size=40), kind=st.sampled_from(
    ["long", "int32", "float", "list", "2-D"]), batch_size=st.integers(0, 3), block_size=st.integers(0, 6))
def test_batches_are_ids_or_say_why(values, kind, batch_size, block_size):
    data = {"long": lambda: torch.tensor(values, dtype=torch.long),
            "int32": lambda: torch.tensor(values, dtype=torch.int32),
            "float": lambda: torch.tensor(values, dtype=torch.float32) / 2,
            "list": lambda: list(values), "2-D": lambda: torch.tensor([values], dtype=torch.long)}[kind]()
    bad = []
    if kind in ("float", "list", "2-D"):
        bad.append("data")
    if batch_size < 1:
        bad.append("batch_size")
    if block_size < 1:
        bad.append("block_size")
    if not bad and len(values) < block_size + 1:
        bad.append("data")
    batch = check(lambda: tl.get_batch(data, batch_size, block_size), bad, ["data", "block_size"])
    if batch is not None:
        x, y = batch
        assert x.dtype == y.dtype == torch.long and x.shape == y.shape == (batch_size, block_size)
        assert torch.equal(x[:, 1:], y[:, :-1])


@PROPERTY
@given(text=st.one_of(st.text(max_size=12), st.integers(), st.lists(st.text(max_size=3), max_size=3)),
       query=st.one_of(st.text(max_size=6), st.integers(), st.none()))
def test_tokenizers_round_trip_or_say_why(text, query):
    bad = [] if isinstance(text, str) and text else ["text", "chars"]
    tok = check(lambda: tl.CharTokenizer.from_text(text), bad, ["text"])
    if tok is None:
        return
    assert tok.vocab_size >= 1
    q_bad = [] if isinstance(query, str) and set(query) <= set(tok.chars) else ["text", "character"]
    ids = check(lambda: tok.encode(query), q_bad, ["text"])
    if ids is not None:
        assert tok.decode(ids) == query and all(0 <= i < tok.vocab_size for i in ids)


@PROPERTY
@given(text=st.one_of(st.text(max_size=16), st.integers(), st.lists(st.text(max_size=3), max_size=3), st.binary()),
       n_merges=st.one_of(st.integers(-2, 6), st.floats(0, 3), st.booleans()),
       ids=st.lists(st.integers(-2, 300), max_size=5))
def test_bpe_trains_round_trips_and_decodes_or_says_why(text, n_merges, ids):
    bad = [] if isinstance(text, str) and text else ["text"]
    if isinstance(n_merges, bool) or not isinstance(n_merges, int) or n_merges < 0:
        bad.append("n_merges")  # either may be named when both are bad
    # with good arguments, more merges than the text has pairs is refused naming n_merges
    tok = check(lambda: tl.train_bpe(text, n_merges), bad, ["n_merges"])
    if tok is None:
        return
    assert tok.vocab_size == 256 + n_merges and tok.decode(tok.encode(text)) == text
    id_bad = [] if all(0 <= i < tok.vocab_size for i in ids) else ["token ids"]
    check(lambda: tok.decode(ids), id_bad, ["token ids"])


@PROPERTY
@given(vocab=st.integers(1, 14), mask_id=st.integers(-1, 14), pad_id=st.one_of(st.none(), st.integers(-1, 14)),
       batch=st.lists(st.lists(st.integers(0, 16), min_size=3, max_size=3), min_size=1, max_size=3),
       as_list=st.booleans())
def test_mlm_batches_are_valid_or_say_why(vocab, mask_id, pad_id, batch, as_list):
    bad = []
    if vocab < 2:
        bad.append("vocab_size")
    if not 0 <= mask_id < vocab and not bad:
        bad.append("mask_token_id")
    if pad_id is not None and not 0 <= pad_id < vocab and not bad:
        bad.append("pad_token_id")
    collator = check(lambda: tl.MLMCollator(vocab, mask_id, pad_token_id=pad_id), bad,
                     ["vocab_size", "random_fraction"])
    if collator is None:
        return
    ids = batch if as_list else torch.tensor(batch)
    call_bad = ["input_ids"] if as_list or any(not 0 <= i < vocab for row in batch for i in row) else []
    out = check(lambda: collator(ids), call_bad, ["input_ids"])
    if out is not None:
        assert out["input_ids"].min() >= 0 and out["input_ids"].max() < vocab
        chosen = out["labels"] != tl.IGNORE_INDEX
        assert torch.equal(out["labels"][chosen], torch.tensor(batch)[chosen])


# ---- threads: the name says a count ----------------------------------------------------------------
@PROPERTY
@given(value=st.sampled_from([1, 2, 0, -1, "cpu", "cuda", "two", None, 1.5, True]))
def test_set_cpu_threads_sets_threads_or_says_why(value):
    bad = [] if value in (1, 2, "cpu", "cuda", None) and value is not True else ["device", "threads"]
    before = torch.get_num_threads()
    try:
        check(lambda: tl.set_cpu_threads(value), bad, ["device"])
        if not bad and isinstance(value, int):
            assert torch.get_num_threads() == value
    finally:
        torch.set_num_threads(before)
