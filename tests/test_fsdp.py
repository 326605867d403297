"""`training.strategy: fsdp` (PyTorch's FSDP2) on CPU with gloo at world 2: it trains like ddp, writes sharded
optimizer files and no whole optimizer, resumes exactly, resumes as ddp and at world 1, takes a ddp checkpoint, and
refuses what it cannot do in one line (fsdp chapter)."""
import json, shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from dptoolkit.checkpoint import TrainError
from dptoolkit.config import ConfigError, for_store
from dptoolkit.launch import LaunchError, launch
from dptoolkit.report import read_log
from dptoolkit.store import sample_data
from dptoolkit.train import train

OV = ["training.max_steps=4", "training.checkpoint_every=2", "training.log_every=1", "training.device=cpu",
      "training.val_every=1", "training.deterministic=true", "training.grad_clip=0.5",
      "training.gradient_accumulate_every=2"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sample_data(tmp_path_factory.mktemp("s"), tasks=1, episodes=6, seed=3)[0]


def _train(store, rd, nprocs=2, strategy="fsdp", resume=None, extra=()):
    return train(for_store(store, name="test"), nprocs=nprocs, run_dir=rd, progress=False, resume=resume,
                 overrides=OV + [f"training.strategy={strategy}", *extra])


@pytest.fixture(scope="module")
def runs(store, tmp_path_factory):
    """The same 4 steps (2 micro-batches each) from the same seed under fsdp (with activation checkpointing) and ddp,
    world 2."""
    d = tmp_path_factory.mktemp("runs")
    return (_train(store, d / "fsdp", extra=["training.activation_checkpointing=true"]),
            _train(store, d / "ddp", strategy="ddp"))


def _from_step(run: Path, step: int, dst: Path) -> Path:
    "A copy of `run` as it stood after the checkpoint at `step` (later checkpoints and the result removed)."
    shutil.copytree(run, dst)
    for ck in (dst / "checkpoints").glob("step_*"):
        if int(ck.name.split("_")[1]) > step: shutil.rmtree(ck)
    (dst / "checkpoints" / "latest").write_text(f"step_{step:06d}")
    (dst / "result.json").unlink()
    return dst


def _losses(run, steps=(3, 4)):
    return read_log(run).set_index("step").loc[list(steps), "loss"].to_numpy()


def test_fsdp_trains_like_ddp_and_writes_each_ranks_shard(runs):
    f, d = runs
    assert f.metrics["completed"] and f.metrics["world_size"] == 2
    # the same losses as ddp from the same seed (the reductions differ only in summation order); accumulation kept
    # the gradients local until the last micro-batch, and recomputed activations give the same gradients
    a, b = read_log(f.run_dir).set_index("step"), read_log(d.run_dir).set_index("step")
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-4)
    np.testing.assert_allclose(a.grad_norm, b.grad_norm, rtol=1e-4)
    for step in (2, 4):
        ck = f.run_dir / "checkpoints" / f"step_{step:06d}"
        opt = ck / "optimizer"
        assert sorted(p.name for p in opt.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
        state = torch.load(ck / "state.pt", weights_only=True)
        assert "optimizer" not in state and state["optimizer_dcp"]["files"] == [".metadata", "__0_0.distcp",
                                                                                  "__1_0.distcp"]
        # what dpt eval / rollout / export read: whole tensors, the ddp run's names and shapes
        ddp_ck = d.run_dir / "checkpoints" / f"step_{step:06d}"
        for name in ("model.safetensors", "ema.safetensors"):
            x, y = load_file(ck / name), load_file(ddp_ck / name)
            assert {k: v.shape for k, v in x.items()} == {k: v.shape for k, v in y.items()}
            assert max((x[k] - y[k]).abs().max().item() for k in x) < 1e-4
    run = OmegaConf.load(f.run_dir / "config.yaml").run
    ddp_run = OmegaConf.load(d.run_dir / "config.yaml").run
    assert run.strategy == "fsdp" and ddp_run.strategy == "ddp"
    # each rank holds half the parameters (and AdamW, EMA) that a ddp rank holds
    assert run.rank_bytes.params <= 0.51 * ddp_run.rank_bytes.params
    assert run.rank_bytes.total <= 0.51 * ddp_run.rank_bytes.total
    # every record says rank 0's peak memory (on a CPU its resident set: more than the model state it holds)
    assert (a.mem_mb > run.rank_bytes.total / 2**20).all() and (b.mem_mb > ddp_run.rank_bytes.total / 2**20).all()
    assert "val_loss_ema" in f.metrics and abs(f.metrics["val_loss_ema"] - d.metrics["val_loss_ema"]) < 1e-3


def test_fsdp_resumes_exactly_and_moves_across_strategies_and_world_sizes(runs, store, tmp_path):
    f, d = runs
    # fsdp -> fsdp at the same world size: bit-exact (with each block's parameters kept from forward to backward)
    r = _train(store, _from_step(f.run_dir, 2, tmp_path / "again"), resume=True, extra=["training.fsdp_reshard=false"])
    assert r.metrics["steps"] == 4 and _losses(r.run_dir).tolist() == _losses(f.run_dir).tolist()
    # fsdp -> ddp at world 2: the same steps, up to summation order
    r = _train(store, _from_step(f.run_dir, 2, tmp_path / "as_ddp"), strategy="ddp", resume=True)
    np.testing.assert_allclose(_losses(r.run_dir), _losses(f.run_dir), rtol=1e-4)
    # ddp -> fsdp: the ddp optimizer (by position) sharded by name
    r = _train(store, _from_step(d.run_dir, 2, tmp_path / "from_ddp"), resume=True)
    np.testing.assert_allclose(_losses(r.run_dir), _losses(d.run_dir), rtol=1e-4)
    assert (r.run_dir / "checkpoints" / "step_000004" / "optimizer" / "__1_0.distcp").exists()
    # fsdp world 2 -> fsdp world 1: the shards resharded onto one rank; the schedule goes on where it was
    r = _train(store, _from_step(f.run_dir, 2, tmp_path / "one"), nprocs=1, resume=True)
    log = read_log(r.run_dir).set_index("step")
    assert r.metrics["steps"] == 4 and np.isfinite(log.loss).all()
    assert log.loc[[3, 4], "lr"].tolist() == read_log(f.run_dir).set_index("step").loc[[3, 4], "lr"].tolist()
    ck = r.run_dir / "checkpoints" / "step_000004" / "optimizer"
    assert sorted(p.name for p in ck.iterdir()) == [".metadata", "__0_0.distcp"]


def test_fsdp_refusals_are_one_line(runs, store, tmp_path):
    f, _ = runs
    # a sharded checkpoint missing one rank's file: refused before any process starts, the file named
    rd = _from_step(f.run_dir, 2, tmp_path / "torn")
    (rd / "checkpoints" / "step_000002" / "optimizer" / "__1_0.distcp").unlink()
    before = sorted(p.name for p in rd.rglob("*"))
    with pytest.raises(TrainError, match=r"optimizer/__1_0.distcp: missing from the sharded checkpoint") as e:
        _train(store, rd, resume=True)
    assert "\n" not in str(e.value) and sorted(p.name for p in rd.rglob("*")) == before
    # fp16 has no loss scaler under FSDP2: refused by the config check, nothing written
    with pytest.raises(ConfigError, match="training.strategy=fsdp with training.mixed_precision=fp16"):
        _train(store, tmp_path / "fp16", extra=["training.mixed_precision=fp16"])
    assert not (tmp_path / "fp16").exists()
    with pytest.raises(ConfigError, match=r"training.strategy='zero3': expected one of ddp, fsdp"):
        _train(store, tmp_path / "zero3", strategy="zero3")
    # a resume onto another model shape: the tensor named, expected vs found
    with pytest.raises(LaunchError, match=r"has shape .* this model expects"):
        _train(store, _from_step(f.run_dir, 2, tmp_path / "wider"), resume=True, extra=["policy.down_dims=[16,32]"])


def _pairwise_against_a_hand_sum(sizes):
    """On each rank: `PairwiseAllGather` / `PairwiseReduceScatter` on shards of each size, against what every rank can
    compute by itself (each rank's tensors come from a generator seeded with its rank) and against gloo's own."""
    import torch.distributed as dist
    from dptoolkit.fsdp import PairwiseAllGather, PairwiseReduceScatter
    W, r, g = dist.get_world_size(), dist.get_rank(), dist.group.WORLD
    mine = lambda q, n: torch.randn(W * n + n, generator=torch.Generator().manual_seed(1000 * q + n))
    out = []
    for n in sizes:
        shard, full = mine(r, n)[:n], mine(r, n)[n:]
        gathered, theirs = torch.full((W * n,), float("nan")), torch.empty(W * n)
        assert PairwiseAllGather()(gathered, shard, g) is None
        dist.all_gather_into_tensor(theirs, shard)
        hand = torch.stack([mine(q, n)[n:][r * n:(r + 1) * n] for q in range(W)])
        row = dict(n=n, gather=torch.equal(gathered, torch.cat([mine(q, n)[:n] for q in range(W)])),
                   gather_as_gloo=torch.equal(gathered, theirs))
        for op, want in ((dist.ReduceOp.SUM, hand.sum(0)), (dist.ReduceOp.AVG, hand.sum(0) / W)):
            got, gloo = torch.empty(n), torch.empty(n)
            PairwiseReduceScatter()(got, full.clone(), g, op)
            dist.reduce_scatter_tensor(gloo, full.clone(), op=op)
            row[str(op).split(".")[-1]] = ((got - want).abs().max().item(), (got - gloo).abs().max().item())
        out.append(row)
    gathered = [None] * W
    dist.all_gather_object(gathered, out)
    return gathered


def test_pairwise_collectives_gather_and_reduce_like_gloo():
    "The collectives fsdp uses on CPU ranks, at world 3 (every pair talks), for shards of 1, 7 and 1,000 values."
    for rank, rows in enumerate(launch(_pairwise_against_a_hand_sum, [1, 7, 1000], nprocs=3, progress_bar=False)):
        for row in rows:
            assert row["gather"] and row["gather_as_gloo"], (rank, row)
            for op in ("SUM", "AVG"):
                assert max(row[op]) < 1e-6, (rank, op, row)


def test_export_of_an_fsdp_run_holds_its_optimizer(tmp_path):
    "Issue 69: `dpt export` of an fsdp run said '+ optimizer' and wrote none; the shards are now read whole into it."
    from conftest import ROOT, dpt
    run = ROOT / "tests" / "data" / "runs_0.1.0"
    outs = {}
    for strategy in ("fsdp", "ddp"):
        r = dpt("export", run / strategy, "-o", tmp_path / f"{strategy}.ckpt", check=0)
        assert "+ optimizer" in r.stdout, r.stdout
        outs[strategy] = torch.load(tmp_path / f"{strategy}.ckpt", weights_only=False)["state_dicts"]["optimizer"]
    a, b = outs["fsdp"], outs["ddp"]
    assert sorted(a["state"]) == sorted(b["state"]) and len(a["state"]) > 50
    k = sorted(a["state"])[0]
    assert {n: tuple(getattr(v, "shape", ())) for n, v in a["state"][k].items()} == \
        {n: tuple(getattr(v, "shape", ())) for n, v in b["state"][k].items()}
    assert int(a["state"][k]["step"]) == 4 and float(a["state"][k]["exp_avg_sq"].abs().sum()) > 0   # the run's moments


def test_dpt_config_says_the_memory_per_rank_before_anything_starts():
    "Issue 69: memory was learnt only at launch (the rank banner); `dpt config` says it now, for either strategy."
    from conftest import dpt
    r = dpt("config", "14", "--nprocs", "2", "training.strategy=fsdp", check=0)
    line = next(l for l in r.stdout.splitlines() if l.startswith("# memory:"))
    assert "fsdp at world 2:" in line and "96.8 M parameters" in line and "(ddp: 1.94 GB)" in line, line
    r = dpt("config", "14", "--nprocs", "2", check=0)
    assert "# memory: ddp at world 2: 1.94 GB per rank" in r.stdout
