"""One rank of tests/test_distributed.py's run: ``torchrun --nproc_per_node=2 --max-restarts=1 this.py OUT``.

tl.train on 2 CPU processes (gloo). Rank 0 writes what each run found into OUT; a run already done is
skipped when torchrun starts the processes again after the kill below.

* ``ddp``, ``fsdp``, ``ddp_accum``, ``fsdp_accum``: 6 steps (accumulation: 2 micro-batches per rank).
  Saved: the parameters, the evaluations, the first step's gradient before clipping (averaged over
  the ranks; gathered from the shards under FSDP), and each rank's share of the first batch.
* ``errors``: the messages of what cannot work (batches the processes cannot share equally, an
  FSDP-sharded model run by one rank alone).
* ``fault_ddp``: checkpoints every 2 steps; in step 6 every rank crashes (its batch function raises),
  and the same processes call tl.train again, which continues from step 4.
* ``fault_fsdp``: sharded checkpoints (torch.distributed.checkpoint) every 2 steps; the first attempt is
  killed with SIGKILL in the middle of writing the checkpoint of step 6 (its files are written, its
  folder not renamed), and torchrun starts both processes again (``--max-restarts=1``).
* ``reference_ddp``, ``reference_fsdp``: the same two runs, never interrupted.
"""

import json
import os
import signal
import sys
from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib import checkpoints, distributed

OUT = Path(sys.argv[1])
RANK = int(os.environ["RANK"])
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.set_num_threads(1)
STEPS = dict(max_steps=6, lr=3e-3, warmup_steps=2, eval_interval=3, eval_steps=2, device="cpu", progress=False)


def make_model(dropout=0.0):
    torch.manual_seed(0)
    return tl.GPT2(tl.GPT2Config(vocab_size=29, n_ctx=16, d_model=32, n_layers=2, n_heads=4, dropout=dropout))


def sampler(seed, batch=8):
    data = (torch.arange(4000) * 7 + torch.arange(4000) // 5) % 29  # a pattern with something to learn
    return tl.BatchSampler(data, batch, 16, seed=seed)


def done(name):
    return (OUT / f"{name}.json").exists()


class FirstGradient:
    """Wraps clip_grad_norm_ (which TrainStep calls after the all-reduce): keeps the first step's gradients."""

    def __init__(self):
        self.model, self.grads, self.clip = None, None, torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = self

    def __call__(self, parameters, *args, **kwargs):
        parameters = list(parameters)
        if self.model is not None and self.grads is None:
            names = [n for n, _ in self.model.named_parameters()]
            grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in parameters]
            self.grads = {n: g.detach().clone() for n, g in zip(names, grads)}
        return self.clip(parameters, *args, **kwargs)


first_gradient = FirstGradient()


def recording(name):
    """The default loss, keeping this rank's first batch (its share of the first draw)."""
    seen = []

    def loss_fn(model, batch):
        if not seen:
            seen.append(batch)
            torch.save(batch, OUT / f"{name}-batch-{RANK}.pt")
        return tl.training.default_loss(model, batch)

    return loss_fn


def finish(name, model, state, **more):
    weights = distributed.full_state_dict(model)  # every rank takes part; rank 0 gets the weights
    if RANK == 0:
        torch.save({"weights": weights, "grads": first_gradient.grads}, OUT / f"{name}.pt")
        (OUT / f"{name}.json").write_text(json.dumps({"history": state.history, **more}))


for name, parallel, accumulate in (("ddp", "ddp", 1), ("fsdp", "fsdp", 1), ("ddp_accum", "ddp", 2),
                                   ("fsdp_accum", "fsdp", 2)):
    if not done(name):
        model = first_gradient.model = make_model()
        first_gradient.grads = None
        config = tl.TrainConfig(parallel=parallel, gradient_accumulation_steps=accumulate, **STEPS)
        state = tl.train(model, sampler(0), sampler(1), config, loss_fn=recording(name))
        finish(name, model, state)
first_gradient.model = None

if not done("errors"):
    messages = {}
    for name, batch, accumulate in (("world", 7, 1), ("accumulation", 6, 2)):
        try:
            tl.train(make_model(), sampler(0, batch), None,
                     tl.TrainConfig(parallel="ddp", gradient_accumulation_steps=accumulate, **STEPS))
        except ValueError as e:
            messages[name] = str(e)
    model = make_model()
    tl.train(model, sampler(0), None, tl.TrainConfig(parallel="fsdp", **{**STEPS, "max_steps": 1, "warmup_steps": 0}))
    try:
        model(torch.zeros(1, 4, dtype=torch.long))  # what a callback on rank 0 would do
    except RuntimeError as e:
        messages["sharded"] = str(e)
    if RANK == 0:
        (OUT / "errors.json").write_text(json.dumps(messages))


class StepLosses(tl.Callback):
    """Rank 0's loss at every step, appended to a file that outlives the process."""

    def __init__(self, name):
        self.file = OUT / f"{name}.losses"

    def on_step(self, state, model):
        with self.file.open("a") as f:
            f.write(json.dumps({"attempt": ATTEMPT, "step": state.step, "loss": state.loss.item()}) + "\n")


class Crash(RuntimeError):
    pass


def crashing(batches, at):
    """``batches`` that raise at draw ``at``, on every rank: a crash in the same step everywhere."""
    drawn = [0]

    def draw():
        drawn[0] += 1
        if drawn[0] == at:
            raise Crash(f"draw {at}")
        return batches()

    return draw


real_write = checkpoints.write_atomically


def write_then_die(path, obj):
    real_write(path, obj)
    if (ATTEMPT == 0 and path.name == "trainer.pt" and path.parent.name == ".step-00000006.partial"
            and path.parent.parent.name == "ckpt-fault_fsdp"):
        os.kill(os.getpid(), signal.SIGKILL)  # every file of step 6 is written; the folder is not renamed


checkpoints.write_atomically = write_then_die


def resumable(name, parallel, batches):
    model = make_model(dropout=0.1)  # dropout draws random numbers: resuming must restore the generators
    config = tl.TrainConfig(parallel=parallel, checkpoint_dir=OUT / f"ckpt-{name}", checkpoint_every=2,
                            **{**STEPS, "max_steps": 8})
    return model, tl.train(model, batches, sampler(1), config, callbacks=[StepLosses(name)])


def record(name, model, state):
    finish(name, model, state, checkpoints=sorted(p.name for p in (OUT / f"ckpt-{name}").iterdir()))


if not done("fault_ddp"):
    try:  # the 10th draw is step 6's batch (evaluations at steps 0 and 3 draw 2 each): the last checkpoint is step 4's
        resumable("fault_ddp", "ddp", crashing(sampler(0), at=10))
    except Crash:
        record("fault_ddp", *resumable("fault_ddp", "ddp", sampler(0)))  # the same processes, from step 4
for name, parallel in (("reference_ddp", "ddp"), ("fault_fsdp", "fsdp"), ("reference_fsdp", "fsdp")):
    if not done(name):
        record(name, *resumable(name, parallel, sampler(0)))
