"""Toolkit overhead: `train_worker` vs a minimal hand-written DDP loop, same model, data, batch and processes.

Both run on 2 CPU processes with gloo (through `launch`), the same config (the `test` model widened to
down_dims [64, 128, 256], per-device batch 32), for --steps optimizer steps. The hand-written loop is the nanoGPT-style
minimum: DistributedSampler, DDP, forward, backward, AdamW step -- no EMA, clipping, schedule, metrics or logging.
A third variant adds the same grad clipping, cosine schedule and EMA, to separate what those features cost from the
toolkit's own bookkeeping (metrics, timing, logging, resumable sampler). Steady-state seconds per step exclude the first --warmup steps. Runs alternate (A B A B ...) --repeats times; the
ratio of medians is printed. Target: toolkit at most 3 % slower.
Usage: python bench/overhead.py [--steps 80] [--warmup 20] [--repeats 3]
"""
import argparse, os, statistics, tempfile, time
from pathlib import Path


def hand_loop(cfg_dict, steps, warmup, features=False):
    import torch, torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from dptoolkit.dataset import Normalizer, SequenceDataset
    from dptoolkit.policy import DiffusionPolicy
    cfg = OmegaConf.create(cfg_dict)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, os.cpu_count() // world)); torch.manual_seed(rank)
    D = cfg.task.dataset
    ds = SequenceDataset(D.zarr_path, cfg.horizon, cfg.n_obs_steps, cfg.pad_before, cfg.pad_after)
    sampler = DistributedSampler(ds, world, rank, shuffle=True, drop_last=True)
    dl = DataLoader(ds, batch_size=cfg.dataloader.batch_size, sampler=sampler, collate_fn=lambda b: b, drop_last=True)
    model = DiffusionPolicy.from_config(cfg, normalizer=Normalizer.from_store(D.zarr_path, ["state", "action"]))
    net = DDP(model); opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if features:   # the same extras train_worker has: grad clipping, cosine schedule, EMA of weights
        from diffusers.optimization import get_scheduler
        from dptoolkit.train import make_ema
        sched = get_scheduler("cosine", opt, num_warmup_steps=5, num_training_steps=steps); ema = make_ema(model, cfg.ema)
    step, epoch, t0 = 0, 0, None
    while step < steps:
        sampler.set_epoch(epoch)
        for batch in dl:
            loss = net(batch); loss.backward()
            if features: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(); opt.zero_grad(set_to_none=True)
            if features: sched.step(); ema.update_parameters(model)
            step += 1
            if step == warmup: dist.barrier(); t0 = time.perf_counter()
            if step >= steps: break
        epoch += 1
    dist.barrier()
    return (time.perf_counter() - t0) / (steps - warmup)


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=80); ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5); a = ap.parse_args()
    from omegaconf import OmegaConf
    from dptoolkit.store import sample_data
    from dptoolkit.merge import merge
    from dptoolkit.config import for_store
    from dptoolkit.launch import launch
    from dptoolkit.train import train
    from dptoolkit.report import read_log
    tmp = Path(tempfile.mkdtemp())
    store = merge(sample_data(tmp / "t", tasks=4, episodes=12), tmp / "m.zarr", progress=False).path
    ov = ["policy.down_dims=[64,128,256]", "policy.n_groups=8", "dataloader.batch_size=32", "scaling.keep_effective_batch_size=false",
          f"training.max_steps={a.steps}", f"training.log_every={a.warmup}", "training.checkpoint_every=0", "training.grad_clip=1.0"]
    cfg = for_store(store, ov, name="test")
    cfg.training.device = "cpu"
    ours, hand, handf = [], [], []
    for r in range(a.repeats):
        rd = tmp / f"run{r}"
        train(cfg, nprocs=2, run_dir=rd, progress=False)
        log = read_log(rd)
        later = log[log.step > a.warmup]                       # windows after the warm-up window
        ours.append(float((later.step_time_s * a.warmup).sum() / (a.steps - a.warmup)))
        hand.append(launch(hand_loop, OmegaConf.to_container(cfg), a.steps, a.warmup, nprocs=2, progress_bar=False))
        handf.append(launch(hand_loop, OmegaConf.to_container(cfg), a.steps, a.warmup, True, nprocs=2, progress_bar=False))
        print(f"repeat {r}: toolkit {ours[-1] * 1e3:.1f} ms/step, hand-written {hand[-1] * 1e3:.1f}, "
              f"hand-written + clip/schedule/EMA {handf[-1] * 1e3:.1f}", flush=True)
    for what, f in (("median", statistics.median), ("best", min)):
        mo, mh, mf = f(ours), f(hand), f(handf)
        print(f"{what:6s} s/step: toolkit {mo * 1e3:.1f} ms | minimal DDP loop {mh * 1e3:.1f} ms -> ratio {mo / mh:.3f} "
              f"({100 * (mo / mh - 1):+.1f} %; target <= +3 %) | same loop + clip/schedule/EMA {mf * 1e3:.1f} ms -> ratio {mo / mf:.3f}")


if __name__ == "__main__":
    main()
