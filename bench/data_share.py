"""Data loading vs model step on CPU: is the DataLoader the bottleneck?

For the `test` (tiny) and `robot_dp_14` configs, on a merged store of sample data, with each config's own batch size
and worker count: (1) samples/s the training DataLoader delivers on its own, (2) seconds per optimizer step of the model
(forward + backward + AdamW) on ready batches, (3) a short real `train` run on 1 process whose log splits every step
into data wait and compute. Prints data time as a share of step time (target: under 5 %).
Usage: python bench/data_share.py [--steps 30] [--configs test,robot_dp_14]
"""
import argparse, json, tempfile, time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--configs", default="test,robot_dp_14"); a = ap.parse_args()
    from dptoolkit.store import sample_data
    from dptoolkit.merge import merge
    from dptoolkit.config import for_store, plan
    from dptoolkit.dataset import SequenceDataset
    from dptoolkit.normalize import Normalizer
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.train import train
    from dptoolkit.dataset import ResumableSampler, _identity
    from dptoolkit.report import read_log
    tmp = Path(tempfile.mkdtemp())
    store = merge(sample_data(tmp / "t", tasks=6, episodes=20, seed=0), tmp / "m.zarr", progress=False).path
    print(f"store: {store} (6 sample tasks × 20 episodes merged); torch threads: {torch.get_num_threads()}")
    rows = []
    for name in a.configs.split(","):
        cfg = for_store(store, name=name)
        p = plan(cfg, 1)
        ds = SequenceDataset(store, cfg.horizon, cfg.n_obs_steps, cfg.pad_before, cfg.pad_after)
        nw = int(cfg.dataloader.num_workers)
        dl = DataLoader(ds, batch_size=p.per_device_batch, sampler=ResumableSampler(ds, 1, 0, shuffle=True), collate_fn=_identity,
                        num_workers=nw, drop_last=True, persistent_workers=nw > 0, prefetch_factor=cfg.dataloader.prefetch_factor if nw else None)
        it = iter(dl); next(it)
        t0 = time.perf_counter(); n = 0
        for _ in range(50):
            try: b = next(it)
            except StopIteration: it = iter(dl); b = next(it)
            n += len(b["action"])
        load_sps = n / (time.perf_counter() - t0)
        pol = DiffusionPolicy.from_config(cfg, normalizer=Normalizer.from_store(store, ["state", "action"]))
        opt = torch.optim.AdamW(pol.parameters(), lr=1e-4)
        batch = ds.__getitems__(list(range(p.per_device_batch)))
        for _ in range(2): pol(batch).backward(); opt.step(); opt.zero_grad()
        steps = max(3, a.steps // (10 if name != "test" else 1))
        t0 = time.perf_counter()
        for _ in range(steps): pol(batch).backward(); opt.step(); opt.zero_grad()
        step_s = (time.perf_counter() - t0) / steps
        model_sps = p.per_device_batch / step_s
        # a real run: the log splits each step into data wait and compute
        run = train(cfg, nprocs=1, run_dir=tmp / f"run_{name}", progress=False,
                    overrides=[f"training.max_steps={steps + 2}", f"training.log_every={max(1, (steps + 2) // 2)}", "training.checkpoint_every=0"])
        log = read_log(run.run_dir).iloc[-1]
        rows.append(dict(config=name, params_M=sum(q.numel() for q in pol.parameters()) / 1e6, batch=p.per_device_batch, workers=nw,
                         loader_samples_s=load_sps, model_samples_s=model_sps, step_s=step_s,
                         share_estimate=model_sps / load_sps, share_in_training=log["data_time_s"] / log["step_time_s"]))
    print(f"\n{'config':12s} {'params':>7s} {'batch':>5s} {'workers':>7s} {'loader samp/s':>13s} {'model samp/s':>12s} "
          f"{'step s':>7s} {'data share (est)':>16s} {'data share (run)':>16s}")
    for r in rows:
        print(f"{r['config']:12s} {r['params_M']:6.1f}M {r['batch']:5d} {r['workers']:7d} {r['loader_samples_s']:13.0f} "
              f"{r['model_samples_s']:12.1f} {r['step_s']:7.3f} {100 * r['share_estimate']:15.2f}% {100 * r['share_in_training']:15.2f}%")
    print("\ndata share (est) = model samples/s ÷ loader samples/s; data share (run) = data_time_s ÷ step_time_s from a real run's log")


if __name__ == "__main__":
    main()
