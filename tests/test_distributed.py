"""tl.train on many processes computes the training of one, and a killed run resumes step for step.

One torchrun launch (2 CPU processes, gloo; tests/distributed_worker.py) trains DDP and FSDP runs,
with and without gradient accumulation, and the fault runs; this process trains the same runs alone
and compares. Tolerances: float32 rounding. Sharing a batch changes the order of the sums (the mean
of two half-batch means, an all-reduce), which moves a gradient by about 1e-7 relative; over 6 AdamW
steps the parameters (of size about 1, moved by about 1e-2 by training) then differ by a few 1e-6.
PARAMETER_ATOL = 2e-5 allows that and nothing like a training difference: one step on another batch
moves them by about lr = 3e-3.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib import checkpoints, distributed
from transformer_lib.distributed import LaunchError

ROOT = Path(__file__).resolve().parent.parent
PARAMETER_ATOL = 2e-5
GRADIENT_RTOL, GRADIENT_ATOL = 1e-5, 1e-7
STEPS = dict(max_steps=6, lr=3e-3, warmup_steps=2, eval_interval=3, eval_steps=2, device="cpu", progress=False)


def make_model(dropout=0.0):
    torch.manual_seed(0)
    return tl.GPT2(tl.GPT2Config(vocab_size=29, n_ctx=16, d_model=32, n_layers=2, n_heads=4, dropout=dropout))


def sampler(seed, batch=8):
    data = (torch.arange(4000) * 7 + torch.arange(4000) // 5) % 29
    return tl.BatchSampler(data, batch, 16, seed=seed)


def torchrun(script, *args, nproc=2, restarts=0, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               f"--max-restarts={restarts}", "--monitor-interval=0.1", str(script), *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed")
    run = torchrun(ROOT / "tests" / "distributed_worker.py", out, restarts=1)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    return out, run


def load(out, name):
    return torch.load(out / f"{name}.pt"), json.loads((out / f"{name}.json").read_text())


class FirstGradient:
    """The first step's gradients before clipping, as the worker records them."""

    def __init__(self, monkeypatch, model):
        self.model, self.grads, self.clip = model, None, torch.nn.utils.clip_grad_norm_
        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", self)

    def __call__(self, parameters, *args, **kwargs):
        parameters = list(parameters)
        if self.grads is None:
            self.grads = {n: p.grad.detach().clone() for (n, _), p in zip(self.model.named_parameters(), parameters)}
        return self.clip(parameters, *args, **kwargs)


def one_process(monkeypatch, **settings):
    """The run of the worker, in this process alone: (weights, first gradients, history)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = make_model()
        spy = FirstGradient(monkeypatch, model)
        state = tl.train(model, sampler(0), sampler(1), tl.TrainConfig(**{**STEPS, **settings}))
    finally:
        torch.set_num_threads(threads)
    return model.state_dict(), spy.grads, state.history


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.mark.slow  # the module's torchrun launches (about 15 s)
@pytest.mark.parametrize("name, accumulate", [("ddp", 1), ("fsdp", 1), ("ddp_accum", 2), ("fsdp_accum", 2)])
def test_two_processes_train_as_one_on_the_whole_batch(worker, monkeypatch, name, accumulate):
    """2 processes x batch 4 (x 2 micro-batches of 2 with accumulation) = 1 process x batch 8."""
    out, _ = worker
    weights, grads, history = one_process(monkeypatch)
    theirs, record = load(out, name)
    # the gradient that the all-reduce (or reduce-scatter) left is the whole batch's, not twice or half of it
    for k in grads:
        torch.testing.assert_close(theirs["grads"][k], grads[k], rtol=GRADIENT_RTOL, atol=GRADIENT_ATOL)
    assert largest_difference(theirs["weights"], weights) < PARAMETER_ATOL
    assert largest_difference(weights, make_model().state_dict()) > 100 * PARAMETER_ATOL  # it trained: 100x the tolerance
    for mine, other in zip(history, record["history"], strict=True):  # evaluations averaged over the ranks
        assert other["val_loss"] == pytest.approx(mine["val_loss"], abs=1e-6)
        assert other["train_loss"] == pytest.approx(mine["train_loss"], abs=1e-6)


@pytest.mark.slow  # the module's torchrun launches (about 15 s)
def test_each_process_trains_on_its_own_share_of_the_batch(worker):
    out, _ = worker
    x, y = sampler(0)()  # the first draw, the same on every rank
    for name in ("ddp", "fsdp"):
        shares = [torch.load(out / f"{name}-batch-{rank}.pt") for rank in (0, 1)]
        assert torch.equal(shares[0][0], x[:4]) and torch.equal(shares[1][0], x[4:])
        assert torch.equal(shares[0][1], y[:4]) and torch.equal(shares[1][1], y[4:])


def test_gradient_accumulation_in_one_process_is_the_whole_batch(monkeypatch):
    weights, grads, _ = one_process(monkeypatch)
    weights_2, grads_2, _ = one_process(monkeypatch, gradient_accumulation_steps=2)  # 2 x 4 = 8
    for k in grads:
        torch.testing.assert_close(grads_2[k], grads[k], rtol=GRADIENT_RTOL, atol=GRADIENT_ATOL)
    assert largest_difference(weights_2, weights) < PARAMETER_ATOL
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=3: the batch has 8 examples, which do not "
                                         r"split into 3 equal parts. Make the batch size a multiple of 3"):
        one_process(monkeypatch, gradient_accumulation_steps=3)


@pytest.mark.slow  # the module's torchrun launches (about 15 s)
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_a_killed_run_resumes_with_the_same_losses_step_for_step(worker, kind):
    """ddp: every rank crashed in step 6 and tl.train was called again; fsdp: SIGKILL while writing step 6's
    checkpoint, and torchrun started the processes again. Both continue from step 4."""
    out, run = worker
    reference = [json.loads(line) for line in (out / f"reference_{kind}.losses").read_text().splitlines()]
    resumed = [json.loads(line) for line in (out / f"fault_{kind}.losses").read_text().splitlines()]
    expected = {r["step"]: r["loss"] for r in reference}
    assert sorted(expected) == list(range(1, 9))
    assert {r["step"] for r in resumed} == set(expected)
    for r in resumed:  # bit for bit, the steps done twice too
        assert r["loss"] == expected[r["step"]], (r, expected[r["step"]])
    steps = [r["step"] for r in resumed]
    assert steps[:6] == [1, 2, 3, 4, 5, 6 if kind == "fsdp" else 5]  # the first attempt got this far
    assert f"resuming from {out / f'ckpt-fault_{kind}' / 'step-00000004'} (step 4 of 8)" in run.stdout
    if kind == "fsdp":
        assert {r["attempt"] for r in resumed} == {0, 1}  # torchrun started the processes again
    (mine, record), (theirs, reference_record) = load(out, f"fault_{kind}"), load(out, f"reference_{kind}")
    assert largest_difference(mine["weights"], theirs["weights"]) == 0
    without_time = [[{k: v for k, v in h.items() if k != "elapsed"} for h in r["history"]]
                    for r in (record, reference_record)]
    assert without_time[0] == without_time[1]
    assert record["checkpoints"] == ["step-00000006", "step-00000008"]  # the two latest; no .partial left
    assert (out / f"ckpt-fault_{kind}" / "step-00000008" / ("dcp" if kind == "fsdp" else "model.pt")).exists()


@pytest.mark.slow  # the module's torchrun launches (about 15 s)
def test_bad_shares_and_a_sharded_model_are_refused_clearly(worker):
    out, _ = worker
    messages = json.loads((out / "errors.json").read_text())
    assert messages["world"] == ("TrainConfig(parallel='ddp') gives each of the 2 processes an equal share of every "
                                 "batch (world size 2): the batch has 7 examples, which do not split into 2 equal "
                                 "parts. Make the batch size a multiple of 2.")
    assert messages["accumulation"].startswith("gradient_accumulation_steps=2: the batch has 3 examples")
    assert "sharded across 2 processes by TrainConfig(parallel='fsdp')" in messages["sharded"]
    assert "tl.distributed.full_state_dict(model)" in messages["sharded"]


@pytest.mark.slow  # the module's torchrun launches (about 15 s)
def test_a_sharded_checkpoint_loads_into_one_process(worker):
    """What FSDP wrote (each rank its shards) loads into an ordinary model here, with tl.load_checkpoint."""
    out, _ = worker
    weights, _ = load(out, "reference_fsdp")
    model = make_model(dropout=0.1)
    info = tl.load_checkpoint(out / "ckpt-reference_fsdp", model)  # the folder: its latest checkpoint
    assert info["step"] == 8 and info["parallel"] == "fsdp" and info["world_size"] == 2
    assert largest_difference(model.state_dict(), weights["weights"]) == 0


# ---- without torchrun --------------------------------------------------------------------------------

def test_launches_that_cannot_work_say_what_to_do(monkeypatch):
    for name in distributed.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    config = tl.TrainConfig(parallel="ddp", **STEPS)
    with pytest.raises(LaunchError, match=r"TrainConfig\(parallel='ddp'\) trains with one process per device, "
                                          r"started by torchrun, and this process was not .* `torchrun "
                                          r"--nproc_per_node=2 train.py`"):
        tl.train(make_model(), sampler(0), None, config)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("LOCAL_RANK", "MASTER_PORT"):
        monkeypatch.setenv(name, "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(LaunchError, match=r"one of 2 that torchrun started, but TrainConfig\(parallel=None\)"):
        tl.train(make_model(), sampler(0), None, tl.TrainConfig(**STEPS))
    with pytest.raises(ValueError, match=r"parallel must be None \(one process\), 'ddp' or 'fsdp', got 'DDP'"):
        tl.TrainConfig(parallel="DDP")
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps must be in \[1, inf\], got 0"):
        tl.TrainConfig(gradient_accumulation_steps=0)
    with pytest.raises(ValueError, match="checkpoint_every=10 needs checkpoint_dir"):
        tl.TrainConfig(checkpoint_every=10)


def test_more_processes_than_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(LaunchError, match=r"torchrun started 4 processes on this node, which has 2 GPU\(s\): .* "
                                          r"--nproc_per_node=2"):
        distributed._device_for_rank("cuda", 3, torch.device("cpu"))
    with pytest.raises(LaunchError, match="'mps' has no distributed backend"):
        distributed._device_for_rank("mps", 0, torch.device("cpu"))


def test_split_batch_takes_equal_shares_of_every_tensor():
    batch = {"input_ids": torch.arange(12).view(6, 2), "labels": torch.arange(6), "note": "kept"}
    parts = distributed.split_batch(batch, 3, "test")
    assert [p["labels"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert parts[2]["input_ids"].tolist() == [[8, 9], [10, 11]] and parts[0]["note"] == "kept"
    with pytest.raises(ValueError, match=r"every tensor in the batch needs the same first dimension; "
                                         r"this batch has first dimensions \[3, 6\]"):
        distributed.split_batch((torch.zeros(6, 2), torch.zeros(3)), 2, "test")


def checkpointed(folder, **settings):
    return tl.TrainConfig(**{**STEPS, "max_steps": 8, "checkpoint_dir": folder, "checkpoint_every": 2, **settings})


class Crash(RuntimeError):
    pass


class Losses(tl.Callback):
    def __init__(self):
        self.by_step = {}

    def on_step(self, state, model):
        self.by_step[state.step] = state.loss.item()


def test_one_process_resumes_step_for_step_and_skips_half_written_checkpoints(tmp_path, monkeypatch):
    def run(folder, batches=None, chart=None, **settings):
        losses, model = Losses(), make_model(dropout=0.1)  # resuming must restore the random generators
        state = tl.train(model, batches or sampler(0), sampler(1), checkpointed(folder, **settings),
                         callbacks=[losses] + ([chart] if chart else []))
        return losses.by_step, model.state_dict(), state

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference, weights, state = run(tmp_path / "reference")
        # a crash in step 7: the checkpoints of steps 2, 4 and 6 are on disk
        drawn = [0]
        base = sampler(0)

        def crashing():
            drawn[0] += 1
            if drawn[0] == 13:  # step 7's batch (evaluations at steps 0, 3 and 6 draw 2 each)
                raise Crash
            return base()

        with pytest.raises(Crash):
            run(tmp_path / "resumed", crashing)
        folder = tmp_path / "resumed"
        assert [p.name for p in checkpoints.checkpoints_in(folder)] == ["step-00000004", "step-00000006"]
        # step 6's checkpoint half written (a kill before the rename): it is not a checkpoint
        (folder / "step-00000006").rename(folder / ".step-00000006.partial")
        (folder / ".step-00000006.partial" / "trainer.pt").unlink()
        from transformer_lib.viz.training import LiveLossPlot

        chart = LiveLossPlot()
        resumed, resumed_weights, resumed_state = run(folder, chart=chart)
        assert sorted(resumed) == [5, 6, 7, 8]  # from step 4
        assert [h["step"] for h in chart.history] == [0, 3, 6, 8]  # the chart has the evaluations before it too
        assert all(resumed[s] == reference[s] for s in resumed)
        assert largest_difference(resumed_weights, weights) == 0
        assert [h["val_loss"] for h in resumed_state.history] == [h["val_loss"] for h in state.history]
        assert not (folder / ".step-00000006.partial").exists()  # replaced when step 6 was saved again
        # another config cannot continue this run
        with pytest.raises(ValueError, match=r"holds a run with another TrainConfig \(lr: 0.003 then, 0.001 now, min_lr: "):
            run(folder, lr=1e-3)
        # a damaged file in a complete checkpoint is named, never skipped silently
        (folder / "step-00000008" / "trainer.pt").write_bytes(b"PK\x03\x04 cut off")
        with pytest.raises(ValueError, match=r"step-00000008/trainer.pt is damaged .* Delete .*step-00000008 "
                                             r"to resume from the checkpoint before it"):
            run(folder)
    finally:
        torch.set_num_threads(threads)


# ---- save_checkpoint and load_checkpoint ---------------------------------------------------------

def test_checkpoint_errors_name_the_file_and_the_fix(tmp_path):
    model = make_model()
    state_dict = tmp_path / "weights.pt"
    torch.save(model.state_dict(), state_dict)
    with pytest.raises(ValueError, match=r"weights.pt holds a bare state dict \(torch.save\(model.state_dict\(\)\) "
                                         r"writes one\).* model.load_state_dict\(torch.load\("):
        tl.load_checkpoint(state_dict, make_model())
    pickled = tmp_path / "model.pt"
    torch.save(model, pickled)
    with pytest.raises(ValueError, match=r"model.pt holds a pickled Python object \(a transformer_lib.models.gpt2.GPT2"
                                         r"\), as torch.save\(model\) writes.* weights_only=False"):
        tl.load_checkpoint(pickled, make_model())
    good = tl.save_checkpoint(tmp_path / "good.pt", model, step=3)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"cut.pt is damaged: it is not a complete checkpoint"):
        tl.load_checkpoint(cut, make_model())
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*missing.pt"):
        tl.load_checkpoint(tmp_path / "missing.pt", make_model())
    with pytest.raises(ValueError, match=r"good.pt holds no optimizer state"):
        tl.load_checkpoint(good, make_model(), torch.optim.AdamW(model.parameters()))
    with pytest.raises(FileNotFoundError, match="is a folder with no checkpoint of tl.train in it"):
        tl.load_checkpoint(tmp_path, make_model())


def test_save_checkpoint_refuses_what_load_checkpoint_could_not_read(tmp_path):
    model = make_model()
    state = tl.TrainState(step=3)
    with pytest.raises(TypeError, match=r"save_checkpoint\(state=...\) got a transformer_lib.training.TrainState: "
                                        r"load_checkpoint reads only plain values .* state=dataclasses.asdict\(state\)"):
        tl.save_checkpoint(tmp_path / "a.pt", model, state=state)
    import numpy as np

    with pytest.raises(TypeError, match=r"save_checkpoint\(extra=\['loss'\]...\) got a numpy.float32.* \(float\(...\)"):
        tl.save_checkpoint(tmp_path / "a.pt", model, extra={"loss": np.float32(1.5)})
    assert not (tmp_path / "a.pt").exists()
    from dataclasses import asdict

    path = tl.save_checkpoint(tmp_path / "a.pt", model, state=asdict(state), losses=[1.0, 2.0], t=torch.ones(2))
    assert tl.load_checkpoint(path, make_model())["state"]["step"] == 3


def test_an_interrupted_save_leaves_the_old_file_and_old_checkpoints_still_load(tmp_path, monkeypatch):
    model = make_model()
    path = tl.save_checkpoint(tmp_path / "ckpt.pt", model, step=1)
    before = path.read_bytes()

    def dies_midway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half")
        raise Crash

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(Crash):
        tl.save_checkpoint(path, model, step=2)
    monkeypatch.undo()
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]  # no temporary file left either
    # the format before this one (no "format" key) still loads
    payload = torch.load(path, weights_only=True)
    del payload["format"]
    torch.save(payload, tmp_path / "old.pt")
    assert tl.load_checkpoint(tmp_path / "old.pt", make_model()) == {"step": 1}
    payload["format"] = 99
    torch.save(payload, tmp_path / "new.pt")
    with pytest.raises(ValueError, match="checkpoint format 99, by a newer transformer_lib"):
        tl.load_checkpoint(tmp_path / "new.pt", make_model())
    assert math.isfinite(sum(p.sum().item() for p in model.parameters()))
