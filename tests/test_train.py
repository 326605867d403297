"""Training on 1 and 2 gloo ranks: data sharding, gradient equivalence, accumulation, run folder, resume determinism,
checkpoint errors."""
import json, os, shutil, signal, subprocess, time
from pathlib import Path

import numpy as np
import pytest
import torch

from dptoolkit.config import for_store, load_config
from dptoolkit.launch import launch
from dptoolkit.train import train
from dptoolkit.checkpoint import TrainError, load_checkpoint, latest_checkpoint
from conftest import dpt


def _shards(n_items, epochs=2):
    import torch.distributed as dist
    from dptoolkit.dataset import ResumableSampler
    ds = list(range(n_items))
    s = ResumableSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True, seed=0, drop_last=True)
    out = []
    for e in range(epochs):
        s.set_epoch(e); mine = list(s)
        allr = [None] * dist.get_world_size(); dist.all_gather_object(allr, mine); out.append(allr)
    return out


def test_each_rank_sees_distinct_samples_covering_the_data():
    for epoch, (r0, r1) in enumerate(launch(_shards, 101, nprocs=2)):
        assert len(r0) == len(r1) == 50 and not set(r0) & set(r1)
        assert len(set(r0) | set(r1)) == 100           # all but the one dropped by drop_last
    e = launch(_shards, 101, nprocs=2)
    assert e[0][0] != e[1][0]                           # set_epoch reshuffles


def _policy_and_batch(store):
    from dptoolkit.dataset import SequenceDataset
    from dptoolkit.normalize import Normalizer
    from dptoolkit.policy import DiffusionPolicy
    cfg = for_store(store, name="test")
    torch.manual_seed(0)
    pol = DiffusionPolicy.from_config(cfg, normalizer=Normalizer.from_store(store, ["state", "action"]))
    ds = SequenceDataset(store, cfg.horizon, cfg.n_obs_steps, cfg.pad_before, cfg.pad_after)
    batch = ds.__getitems__(list(range(0, 8 * 13, 13)))
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(batch["action"].shape, generator=g); t = torch.randint(0, 50, (8,), generator=g)
    return pol, batch, noise, t


def _slice(batch, sl):
    return {"obs": {k: v[sl] for k, v in batch["obs"].items()}, "action": batch["action"][sl]}


def _ddp_grads(store, accum):
    "Each of 2 ranks takes its half of a fixed batch of 8, in `accum` micro-batches, under DDP; returns rank 0's grads."
    import contextlib, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    pol, batch, noise, t = _policy_and_batch(store)
    net = DDP(pol)
    r = dist.get_rank(); half = slice(4 * r, 4 * r + 4)
    idx = np.arange(8)[half]
    for m, part in enumerate(np.array_split(idx, accum)):
        sl = slice(int(part[0]), int(part[-1]) + 1)
        ctx = net.no_sync() if m < accum - 1 else contextlib.nullcontext()
        with ctx:
            (net(_slice(batch, sl), noise=noise[sl], timesteps=t[sl]) / accum).backward()
    return {n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("accum", [1, 2])
def test_ddp_gradients_equal_one_process_with_the_global_batch(merged, accum):
    pol, batch, noise, t = _policy_and_batch(merged)
    pol(batch, noise=noise, timesteps=t).backward()
    ref = {n: p.grad for n, p in pol.named_parameters() if p.grad is not None}
    got = launch(_ddp_grads, merged, accum, nprocs=2)
    assert set(got) == set(ref)
    worst = max(((got[n] - ref[n]).abs().max() / (ref[n].abs().max() + 1e-12)).item() for n in ref)
    assert worst < 1e-4, worst


def _cfg(store, **kw):
    ov = ["training.max_steps=20", "training.log_every=5", "training.checkpoint_every=10", "training.deterministic=true",
          "training.keep_checkpoints=2"] + [f"{k}={v}" for k, v in kw.items()]
    return for_store(store, ov, name="test")


def test_run_folder_written_by_rank0_only(merged, tmp_path):
    res = train(_cfg(merged), nprocs=2, run_dir=tmp_path / "run", progress=False)
    files = sorted(str(p.relative_to(tmp_path / "run")) for p in (tmp_path / "run").rglob("*") if p.is_file())
    kept = ("ema.safetensors", "info.json", "model.safetensors", "state.pt")
    assert files == [".lock", "checkpoints/latest", *[f"checkpoints/step_0000{s}/{f}" for s in (10, 20) for f in kept],
                     "config.yaml", "logs.jsonl", "result.json"]
    lines = (tmp_path / "run" / "logs.jsonl").read_text().splitlines()
    assert [json.loads(l)["step"] for l in lines] == [5, 10, 15, 20]     # one writer: no duplicated lines
    assert res.metrics["world_size"] == 2 and "world_size: 2" in (tmp_path / "run" / "config.yaml").read_text()
    assert not list(Path.cwd().glob("runs"))                              # nothing written elsewhere


def test_resume_reproduces_uninterrupted_losses(merged, tmp_path):
    """Kill a 2-process `dpt train` after its first checkpoint, resume it, and compare every later logged loss
    with an uninterrupted run: they must be identical."""
    ov = ["training.max_steps=60", "training.log_every=5", "training.checkpoint_every=10", "training.deterministic=true"]
    full = tmp_path / "full"; cut = tmp_path / "cut"
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", full, "--no-progress", *ov, check=0)
    p = subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(merged), "--nprocs", "2", "--out", str(cut),
                          "--no-progress", *ov], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.time()
    while not (cut / "checkpoints" / "latest").exists() and time.time() - t0 < 120: time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    resumed_from = int((cut / "checkpoints" / "latest").read_text().split("_")[1])
    assert resumed_from < 60 and not (cut / "result.json").exists()
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", cut, "--resume", "--no-progress", *ov, check=0)
    from dptoolkit.report import read_log
    a, b = read_log(full).set_index("step"), read_log(cut).set_index("step")
    later = [s for s in a.index if s > resumed_from]
    assert later and a.loc[later, "loss"].tolist() == b.loc[later, "loss"].tolist()
    assert a.loc[later, "lr"].tolist() == b.loc[later, "lr"].tolist()
    ra, rb = json.loads((full / "result.json").read_text()), json.loads((cut / "result.json").read_text())
    assert ra["val_loss_ema"] == rb["val_loss_ema"] and ra["final_loss"] == rb["final_loss"]


def test_checkpoint_moves_between_world_sizes(merged, tmp_path):
    train(_cfg(merged, **{"training.max_steps": 10}), nprocs=1, run_dir=tmp_path / "r", progress=False)
    res = train(_cfg(merged, **{"training.grad_clip": "null"}), nprocs=2, run_dir=tmp_path / "r", resume=True, progress=False)
    assert res.metrics["steps"] == 20 and res.metrics["world_size"] == 2
    from dptoolkit.report import read_log
    gn = read_log(tmp_path / "r").set_index("step").grad_norm
    assert np.isfinite(gn).all() and (gn > 0).all() and len(gn) == 4     # without clipping the norm is still logged
    res = train(_cfg(merged, **{"training.max_steps": 25}), nprocs=1, run_dir=tmp_path / "r", resume=True, progress=False)
    assert res.metrics["steps"] == 25


def test_checkpoint_errors(merged, tmp_path):
    with pytest.raises(TrainError, match="no checkpoint to resume from"):
        latest_checkpoint(tmp_path)
    r = dpt("train", "--config", "test", "--data", merged, "--nprocs", 1, "--out", tmp_path / "none", "--resume", "--no-progress")
    assert r.returncode == 1 and "no checkpoint to resume from" in r.stderr and "Traceback" not in r.stderr
    train(_cfg(merged, **{"training.max_steps": 10}), nprocs=1, run_dir=tmp_path / "r", progress=False)
    ck = latest_checkpoint(tmp_path / "r")
    state = torch.load(ck / "state.pt", weights_only=True)               # plain data: loads without unpickling code
    assert state["step"] == 10
    (ck / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(TrainError, match="model.safetensors: cannot be read .* corrupt"):
        load_checkpoint(ck)
    r = dpt("train", "--config", "test", "--data", merged, "--nprocs", 1, "--out", tmp_path / "r", "--resume", "--no-progress")
    assert r.returncode == 1 and "corrupt" in r.stderr and "rank 0" in r.stderr
    (ck / "state.pt").unlink()
    with pytest.raises(TrainError, match="state.pt: missing"):
        load_checkpoint(ck)


def test_second_run_into_same_folder_refused(merged, tmp_path):
    train(_cfg(merged, **{"training.max_steps": 5}), nprocs=1, run_dir=tmp_path / "r", progress=False)
    r = dpt("train", "--config", "test", "--data", merged, "--nprocs", 1, "--out", tmp_path / "r", "--no-progress")
    assert r.returncode == 1 and "already holds a run" in r.stderr


def _run(store, run_dir, nprocs=2, **kw):
    cfg = _cfg(store, **{"training.gradient_accumulate_every": 2, "dataloader.batch_size": 16, **kw})
    train(cfg, nprocs=nprocs, run_dir=run_dir, progress=False)
    from dptoolkit.report import read_log
    return read_log(run_dir).set_index("step")


@pytest.fixture(scope="module")
def fp32_run(merged, tmp_path_factory):
    "2 ranks, accumulation 2, fp32, eager: the reference the precision and compile tests compare with."
    d = tmp_path_factory.mktemp("fp32") / "run"
    return d, _run(merged, d)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_and_resumes(merged, tmp_path, precision, fp32_run):
    """bf16 autocast, and fp16 with a GradScaler, run on CPU too: the same code path CUDA takes (autocast, scaler
    unscale/step/update under DDP with accumulation), its state saved and restored exactly on resume."""
    ref = fp32_run[1]
    a = _run(merged, tmp_path / "a", **{"training.mixed_precision": precision})
    assert f"precision: {precision}" in (tmp_path / "a" / "config.yaml").read_text()
    assert np.isfinite(a.loss).all() and a.loss.tolist() != ref.loss.tolist()      # autocast really ran
    np.testing.assert_allclose(a.loss, ref.loss, rtol=0.05)                          # and trained the same model
    state = torch.load(latest_checkpoint(tmp_path / "a") / "state.pt", weights_only=True)
    assert (state["scaler"]["scale"] > 0) if precision == "fp16" else state["scaler"] == {}
    # rewind a copy of the run to its step-10 checkpoint, resume it, and compare with the uninterrupted run
    b = tmp_path / "b"; shutil.copytree(tmp_path / "a", b)
    shutil.rmtree(b / "checkpoints" / "step_000020"); (b / "checkpoints" / "latest").write_text("step_000010")
    (b / "result.json").unlink()
    (b / "logs.jsonl").write_text("".join(l + "\n" for l in (b / "logs.jsonl").read_text().splitlines() if json.loads(l)["step"] <= 10))
    rb = _run(merged, b, **{"training.mixed_precision": precision, "training.resume": "true"})
    assert rb.loc[[15, 20], "loss"].tolist() == a.loc[[15, 20], "loss"].tolist()


def _train_counting_graphs(cfg):
    import torch._dynamo
    from dptoolkit.train import train_worker
    res = train_worker(cfg)
    return res, torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_compile_under_ddp_matches_eager(merged, tmp_path, fp32_run):
    """`training.compile` wraps DDP in torch.compile (aot_eager: dynamo tracing and AOT autograd, no C++ code
    generation, so it runs in seconds); with accumulation (`no_sync` through the compiled wrapper) the losses equal
    eager ones and the checkpoint keys carry no wrapper prefix."""
    eager, ref = fp32_run
    cfg = _cfg(merged, **{"training.gradient_accumulate_every": 2, "dataloader.batch_size": 16, "training.compile": "true",
                          "training.compile_backend": "aot_eager", "training.device": "cpu"})
    cfg.logging.run_dir = str(tmp_path / "compiled")
    from omegaconf import OmegaConf
    res, graphs = launch(_train_counting_graphs, OmegaConf.to_container(cfg), nprocs=2)
    assert graphs > 0 and res["steps"] == 20
    from dptoolkit.report import read_log
    np.testing.assert_allclose(read_log(tmp_path / "compiled").loss, ref.loss, rtol=1e-5)
    keys = lambda d: sorted(load_checkpoint(latest_checkpoint(d))["model"])
    assert keys(tmp_path / "compiled") == keys(eager)


def _ops_between(cfg, first, last):
    """Run train_worker counting every aten/c10d op dispatched after optimizer step `first` and up to step `last`
    (the scheduler's step() marks step ends)."""
    import collections, contextlib, io
    import diffusers.optimization as O
    from torch.utils._python_dispatch import TorchDispatchMode
    from dptoolkit.train import train_worker

    class Count(TorchDispatchMode):
        def __init__(self): super().__init__(); self.n = collections.Counter()
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    mode, real = Count(), O.get_scheduler
    def counting_scheduler(*a, **kw):
        sched = real(*a, **kw); done = [0]
        class Marked(type(sched)):
            def step(self, *a, **kw):
                super().step(*a, **kw); done[0] += 1
                if done[0] == first: mode.__enter__()
                if done[0] == last: mode.__exit__(None, None, None)
        sched.__class__ = Marked
        return sched
    O.get_scheduler = counting_scheduler
    try:
        with contextlib.redirect_stdout(io.StringIO()): train_worker(cfg)
    finally: O.get_scheduler = real
    return dict(mode.n)


def test_training_steps_never_read_back_to_the_host(merged, tmp_path):
    """Between log steps a training step must not read a tensor's value on the host (`_local_scalar_dense`: `.item()`,
    `bool(t)`, `int(t)`): on a GPU each read waits for every queued kernel. Counted over 5 steps inside one epoch with
    no log step: zero reads, one gradient all-reduce per step (one DDP bucket), no buffer broadcasts. AveragedModel's
    EMA (3 reads per step) or the unfused AdamW (one per parameter per step) fail this."""
    from omegaconf import OmegaConf
    cfg = _cfg(merged, **{"training.log_every": 100, "training.checkpoint_every": 0, "training.max_steps": 12,
                          "training.device": "cpu", "dataloader.batch_size": 8})
    cfg.logging.run_dir = str(tmp_path / "run")
    n = launch(_ops_between, OmegaConf.to_container(cfg), 2, 7, nprocs=2)
    assert n.get("aten._fused_adamw_") == 5 and n.get("aten._foreach_lerp_") == 5      # 5 whole steps were counted
    assert n.get("aten._local_scalar_dense", 0) == 0, n
    assert n.get("c10d.allreduce_") == 5 and "c10d.broadcast_" not in n


from dptoolkit.policy import DiffusionPolicy


class _SignalledWhileBuilding(DiffusionPolicy):
    "A policy whose construction in rank 0 delivers a real SIGTERM to that rank: a stop while the rank is starting."
    @classmethod
    def from_config(cls, cfg, normalizer=None):
        import os, signal
        p = super().from_config(cfg, normalizer=normalizer)
        if os.environ.get("RANK") == "0": os.kill(os.getpid(), signal.SIGTERM)   # the ranks, not the parent's check
        return p


def test_a_stop_while_the_ranks_start_checkpoints_at_the_first_log_step(merged, tmp_path, capfd):
    """Issue 91: SIGTERM reaching a rank while it builds (data, model, a compile that takes minutes) used to kill it
    before it could checkpoint. The handler is installed first: the run trains to its first log step, checkpoints
    there and ends as a stopped run, and says so on stderr."""
    cfg = _cfg(merged)
    cfg.training.max_steps = 200
    r = train(cfg, nprocs=2, run_dir=tmp_path / "r", progress=False, policy=_SignalledWhileBuilding)
    assert r.metrics["stopped_by"] == "SIGTERM" and r.metrics["steps"] == 5, r.metrics
    assert int(load_checkpoint(latest_checkpoint(tmp_path / "r"))["state"]["step"]) == 5
    said = capfd.readouterr()
    assert "[rank 0] dptoolkit: SIGTERM: checkpointing at the next log step" in said.out + said.err
