"""Break one thing at a time in transformer_lib and check that the test suite notices.

    .venv/bin/python scripts/mutation_check.py      (about 3 minutes; exits 1 if a mutation survives)

Each mutation is a plausible bug (a missing scale, an off-by-one mask, eps outside the square
root, ...). A mutation that no test catches marks a hole in the tests.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
M = [
 ("layers/attention.py", "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)", "scores = q @ k.transpose(-2, -1)"),
 ("layers/masks.py", ".tril(diagonal=seq_k - seq_q)", ".tril(diagonal=seq_k - seq_q + 1)"),
 ("layers/normalization.py", "torch.sqrt(var + self.eps)", "(torch.sqrt(var) + self.eps)"),
 ("layers/normalization.py", "rms = torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)", "rms = torch.sqrt(h.var(dim=-1, keepdim=True) + self.eps)"),
 ("layers/feedforward.py", "0.044715", "0.04"),
 ("layers/positions.py", "x1 * sin + x2 * cos", "-x1 * sin + x2 * cos"),
 ("layers/positions.py", "pe[:, 0::2] = torch.sin(pos * freq)", "pe[:, 0::2] = torch.cos(pos * freq)"),
 ("init.py", "std=std / math.sqrt(2 * n_layers)", "std=std"),
 ("models/gpt2.py", "            self.lm_head.weight = self.token_embedding.weight  # one tensor, two uses", "            self.lm_head.weight = nn.Parameter(self.token_embedding.weight.clone())"),
 ("layers/positions.py", "return self(q, offset), self(k, offset)", "return self(q), self(k)"),
 ("layers/attention.py", "q, k = self.positions.rotate(q, k, offset)", "q, k = self.positions.rotate(q, k, 0)"),
 ("layers/attention.py", "bias = self.positions.score_bias(q, k, offset)", "bias = self.positions.score_bias(q, k, 0)"),
 ("layers/attention.py", "scores = scores + bias", "scores = scores"),
 ("layers/fused_attention.py", "keep = bias if keep is None else bias.masked_fill(~keep, -math.inf)", "pass"),
 ("layers/fused_attention.py", "positions.score_bias(q, k, 0), attn.kind", "None, attn.kind"),
 ("layers/fused_attention.py", "q, k = positions.rotate(q, k, 0)", "pass"),
 ("generation.py", "drop_sorted = (cum - sorted_logits.softmax(dim=-1)) >= top_p", "drop_sorted = cum > top_p"),
 ("models/gpt2.py", "mask = padding_mask(mask) if mask is not None else None", "mask = None"),
 ("layers/attention.py", "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)", "pass"),
 ("models/gpt2.py", 'for j, name in enumerate(("W_Q", "W_K", "W_V")):', 'for j, name in enumerate(("W_K", "W_Q", "W_V")):'),
 ("layers/block.py", "return x + self.drop(fn(norm(x)))", "return norm(x + self.drop(fn(x)))"),
 ("models/bert.py", "h = h[masked_positions]  # (n_masked, d_model)", "h = h.flatten(0, 1)[: int(masked_positions.sum())]"),
 ("layers/kv_cache.py", "self.k = torch.cat([self.k, k], dim=-2)", "self.k = torch.cat([k, self.k], dim=-2)"),
 ("layers/fused_attention.py", "if mask is None and bias is None and (not causal or seq_q == seq_k):", "if mask is None and bias is None:"),
 ("models/encoder_decoder.py", "self.scale = math.sqrt(config.d_model)", "self.scale = 1.0"),
 ("models/bert.py", "x = self.drop(self.embedding_norm(x))", "x = self.drop(x)"),
 ("layers/attention.py", "rearrange(self.W_Q(x), \"b s (h d) -> b h s d\", h=self.n_heads)", "rearrange(self.W_Q(x), \"b s (d h) -> b h s d\", h=self.n_heads)"),
]
root = str(ROOT / "transformer_lib") + "/"
survived = []
for path, old, new in M:
    src = open(root + path).read()
    assert src.count(old) == 1, (path, old)
    open(root + path, "w").write(src.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True, text=True)
    finally:
        open(root + path, "w").write(src)
    caught = r.returncode != 0
    line = [l for l in r.stdout.splitlines() if l.startswith("FAILED")][:1]
    print(("CAUGHT  " if caught else "SURVIVED") , path, "|", new[:60], "|", line[0][:90] if line else "")
    if not caught: survived.append((path, new))
print("survived:", len(survived))
sys.exit(1 if survived else 0)
