import pytest
import torch

import transformer_lib as tl

ATOL = RTOL = 1e-5  # float32 throughout


def pytest_collection_modifyitems(config, items):
    """Tests marked ``network`` need the Hugging Face Hub; ``offline`` ones check the offline error."""
    from transformer_lib.models._hub import hub_reachable

    online = hub_reachable()
    for item in items:
        if "network" in item.keywords and not online:
            item.add_marker(pytest.mark.skip(reason="needs the Hugging Face Hub, which is not reachable (offline)"))
        if "offline" in item.keywords and online:
            item.add_marker(pytest.mark.skip(reason="checks the offline error, but the Hugging Face Hub is reachable"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def close(actual, expected, atol=ATOL, rtol=RTOL):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def tiny_gpt2(**overrides) -> tl.GPT2:
    settings = dict(vocab_size=97, n_ctx=24, d_model=32, n_layers=2, n_heads=4)
    return tl.GPT2(tl.GPT2Config(**{**settings, **overrides})).eval()


LLAMA_STYLE = dict(norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False, ffn_multiple_of=16)


def tiny_bert(**overrides) -> tl.BERT:
    settings = dict(vocab_size=101, n_ctx=24, d_model=32, n_layers=2, n_heads=4, d_ff=64, mask_token_id=3)
    return tl.BERT(tl.BERTConfig(**{**settings, **overrides})).eval()


def snapshot(module):
    """Copies of every parameter and buffer, to prove a forward pass changed none of them."""
    state = {f"param:{n}": p.detach().clone() for n, p in module.named_parameters()}
    state.update({f"buffer:{n}": b.detach().clone() for n, b in module.named_buffers()})
    return state


def assert_unchanged(module, before):
    after = snapshot(module)
    assert after.keys() == before.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), f"{name} changed during forward"
