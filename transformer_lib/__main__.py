"""``python -m transformer_lib``: a quick self-check that the installed library works on this machine."""

import time

import torch

import transformer_lib as tl


def main() -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    print(f"transformer_lib {tl.__version__}, torch {torch.__version__}, device {device}")
    for name, model in [
        ("GPT-2 small", tl.GPT2(tl.GPT2Config())),
        ("BERT-base", tl.BERT(tl.BERTConfig())),
        ("Transformer-base", tl.EncoderDecoder(tl.EncoderDecoderConfig())),
    ]:
        print(f"  {name:<17} {model.num_parameters():>12,} parameters")
    model = tl.GPT2(tl.GPT2Config(vocab_size=256, n_ctx=64, d_model=64, n_layers=2, n_heads=4)).to(device)
    prompt = torch.tensor([list(b"Hello")], device=device)
    start = time.perf_counter()
    cached = tl.generate(model, prompt, 50, do_sample=False)
    full = tl.generate(model, prompt, 50, do_sample=False, use_cache=False)
    ok = torch.equal(cached, full)
    print(f"  generation with and without KV cache agree: {ok} ({time.perf_counter() - start:.2f}s)")
    if not ok:
        raise SystemExit("self-check failed")


if __name__ == "__main__":
    main()
