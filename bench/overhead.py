"""Toolkit overhead: `train_worker` vs hand-written DDP loops, same model, data, batch and processes.

Three loops train the same config (the `test` model widened to down_dims [64, 128, 256], 4.1 M parameters, 32 per
device) on 2 CPU ranks with gloo, inside ONE launch, so all three share the processes, the process group and the
machine's state at that moment:

- toolkit:  `train_worker(cfg)` -- metrics all-reduced every 5 steps, data/compute timing, JSON log, resumable sampler,
            grad-norm clipping, cosine schedule, EMA;
- features: a hand-written nanoGPT-style loop doing the same work and nothing else: fused AdamW, no buffer broadcast,
            grad clipping, cosine schedule, EMA -- so toolkit / features is the cost of the toolkit's bookkeeping;
- lean:     `train_worker` with `ema.enable=false training.grad_clip=null`: the toolkit's bookkeeping alone (it still
            computes the grad norm it logs);
- minimal:  the loop the guides write: DistributedSampler, DDP (defaults), forward, backward, AdamW (defaults) step.

Each round runs the four back to back, in a rotating order (so no variant always goes first), for --steps steps; the
statistic of one run is the median seconds per step over 5-step windows after the first --warmup steps (medians shrug
off another tenant's burst on this shared machine). Ratios are taken within a round (runs seconds apart) and the
median ratio over rounds is printed with a bootstrap 95 % interval, for wall-clock time and for rank 0's CPU time. Target: toolkit at most 3 % slower than a hand-written
loop doing the same work (toolkit vs features, lean vs minimal).
Usage: python bench/overhead.py [--rounds 12] [--steps 45] [--warmup 15]
"""
import argparse, contextlib, io, os, statistics, tempfile, time
from pathlib import Path

WIN = 5   # steps per timing window (the toolkit logs every WIN steps)


def _mark():
    return time.perf_counter(), time.process_time()


def _windows(marks):
    "(wall, CPU) seconds per step of each WIN-step window, from (perf_counter, process_time) marks every WIN steps."
    return [((b[0] - a[0]) / WIN, (b[1] - a[1]) / WIN) for a, b in zip(marks, marks[1:])]


def hand_loop(cfg, steps, warmup, features):
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from dptoolkit.dataset import SequenceDataset
    from dptoolkit.normalize import Normalizer
    from dptoolkit.policy import DiffusionPolicy
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, os.cpu_count() // world)); torch.manual_seed(rank)
    D = cfg.task.dataset
    ds = SequenceDataset(D.zarr_path, cfg.horizon, cfg.n_obs_steps, cfg.pad_before, cfg.pad_after)
    sampler = DistributedSampler(ds, world, rank, shuffle=True, drop_last=True)
    dl = DataLoader(ds, batch_size=cfg.dataloader.batch_size, sampler=sampler, collate_fn=lambda b: b, drop_last=True)
    model = DiffusionPolicy.from_config(cfg, normalizer=Normalizer.from_store(D.zarr_path, ["state", "action"]))
    from dptoolkit.parallelize import _buffer_sync
    net = DDP(model, **_buffer_sync(not features))   # the toolkit's model has constant buffers only: no per-step broadcast
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=features)
    if features:   # what train_worker also does every step: grad clipping, cosine schedule, EMA of weights
        from diffusers.optimization import get_scheduler
        from dptoolkit.train import make_ema
        sched = get_scheduler("cosine", opt, num_warmup_steps=5, num_training_steps=steps); ema = make_ema(model, cfg.ema)
    step, epoch, marks = 0, 0, []
    while step < steps:
        sampler.set_epoch(epoch)
        for batch in dl:
            loss = net(batch); loss.backward()
            if features: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(); opt.zero_grad(set_to_none=True)
            if features: sched.step(); ema.update_parameters(model)
            step += 1
            if step >= warmup and step % WIN == 0: marks.append(_mark())
            if step >= steps: break
        epoch += 1
    dist.barrier()
    return _windows(marks)


def toolkit_loop(cfg, run_dir, warmup):
    "train_worker as is; its log-step hook (`progress`, called on rank 0 after each all-reduce) takes the timing marks."
    import dptoolkit.train as T
    marks = []
    def mark(step, **_):
        if step >= warmup: marks.append(_mark())
        return True                                        # 'shown': no per-log print
    cfg.logging.run_dir = str(run_dir)
    hook, T.progress = T.progress, mark
    try:
        with contextlib.redirect_stdout(io.StringIO()): T.train_worker(cfg)   # the start banner
    finally: T.progress = hook
    return _windows(marks)


def compare(cfg_dict, rounds, steps, warmup, out):
    from omegaconf import OmegaConf
    import torch.distributed as dist
    cfg = OmegaConf.create(cfg_dict)
    runs = {"toolkit": [], "features": [], "lean": [], "minimal": []}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % 4:] + names[:r % 4]:          # rotate which loop goes first
            if name in ("toolkit", "lean"):
                c = OmegaConf.create(cfg_dict)
                if name == "lean": c.ema.enable = False; c.training.grad_clip = None
                w = toolkit_loop(c, Path(out) / f"{name}{r}", warmup)
            else:
                w = hand_loop(cfg, steps, warmup, features=name == "features")
            dist.barrier()
            if dist.get_rank() == 0: runs[name].append(tuple(statistics.median(x[i] for x in w) for i in (0, 1)))
        if dist.get_rank() == 0:
            print(f"round {r}: " + " | ".join(f"{n} {runs[n][-1][0] * 1e3:.1f} ms/step ({runs[n][-1][1] * 1e3:.1f} CPU)" for n in names), flush=True)
    return runs


def _boot_ci(xs, n=4000, seed=0):
    import random
    rnd = random.Random(seed)
    meds = sorted(statistics.median(rnd.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12); ap.add_argument("--steps", type=int, default=45)
    ap.add_argument("--warmup", type=int, default=15); a = ap.parse_args()
    if (a.steps - a.warmup) % WIN or a.warmup % WIN: ap.error(f"--steps and --warmup must be multiples of {WIN}")
    from omegaconf import OmegaConf
    from dptoolkit.store import sample_data
    from dptoolkit.merge import merge
    from dptoolkit.config import for_store
    from dptoolkit.launch import launch
    tmp = Path(tempfile.mkdtemp())
    store = merge(sample_data(tmp / "t", tasks=4, episodes=12), tmp / "m.zarr", progress=False).path
    ov = ["policy.down_dims=[64,128,256]", "policy.n_groups=8", "dataloader.batch_size=32", "scaling.keep_effective_batch_size=false",
          f"training.max_steps={a.steps}", f"training.log_every={WIN}", "training.checkpoint_every=0", "training.grad_clip=1.0",
          "training.device=cpu"]
    cfg = for_store(store, ov, name="test")
    t0 = time.time()
    runs = launch(compare, OmegaConf.to_container(cfg), a.rounds, a.steps, a.warmup, str(tmp / "runs"), nprocs=2, progress_bar=False)
    print(f"\n{a.rounds} rounds × 4 loops, 2 CPU ranks (gloo), {a.steps} steps each, median of {WIN}-step windows after "
          f"step {a.warmup}; {time.time() - t0:.0f} s")
    for i, kind in ((0, "wall-clock"), (1, "CPU time of rank 0")):
        print(f"\n{kind}:")
        for n, xs in runs.items():
            xs = [x[i] for x in xs]
            print(f"  {n:8s} median {statistics.median(xs) * 1e3:6.1f} ms/step  (rounds: {min(xs) * 1e3:.1f} … {max(xs) * 1e3:.1f})")
        for ours, base, what in (("toolkit", "features", "hand-written loop, same clip/schedule/EMA"),
                                 ("lean", "minimal", "the guides' minimal DDP loop"), ("toolkit", "minimal", "the guides' minimal DDP loop")):
            ratios = [t[i] / b[i] for t, b in zip(runs[ours], runs[base])]
            lo, hi = _boot_ci(ratios)
            print(f"  {ours} / {what}: median ratio {statistics.median(ratios):.3f} (95 % CI {lo:.3f}–{hi:.3f}; "
                  f"rounds {min(ratios):.3f}–{max(ratios):.3f})" + ("   target <= 1.030" if (ours, base) != ("toolkit", "minimal") else ""))

if __name__ == "__main__":
    main()
