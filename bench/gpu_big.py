"""The largest policy one GPU trains (issue 49's GPU goal): the transformer denoiser + flow (pi0's objective) scaled in
depth at n_emb 2048 (16 heads), one bf16 training step as `train_worker` takes it — autocast bf16 forward, backward,
fused AdamW (fp32 moments), EMA — at batch 128 on the low-dim sample task, plainly and with
`training.activation_checkpointing` (`fsdp.checkpoint_activations` on each block). For each depth: parameters, the
peak of `torch.cuda.max_memory_allocated`, and samples/s over the steps after the first two; the first depth that runs
out of memory ends each column. Then `dpt train` itself (`train(cfg, nprocs=1)`, bf16) at --loop-layers, plainly and
with activation checkpointing: the logged samples/s and the banner's bytes per rank.
FSDP at world 1 shards nothing (its memory is the plain row's) and CPU offload is not built, so neither is a row.
Usage: python bench/gpu_big.py [--layers 16,32,48,64,80] [--emb 2048] [--batch 128] [--loop-layers 16] [--no-loop-ac]
       [--loop-strategy fsdp] [--quick]
"""
import argparse, gc, json, statistics, tempfile, time
from pathlib import Path


def overrides(layers, emb, batch):
    return ["policy.objective=flow", "policy.num_inference_steps=10", "policy.denoiser=transformer",
            f"policy.transformer.n_layer={layers}", f"policy.transformer.n_emb={emb}",
            f"policy.transformer.n_head={max(1, emb // 128)}", "policy.transformer.p_drop_attn=0.0",
            "optimizer.weight_decay=1e-3", f"dataloader.batch_size={batch}"]


def probe(cfg, store, layers, emb, batch, ac, steps, dev, mode=None, skip=2):
    """One depth: (params, peak bytes, samples/s over the steps after `skip`), or None when it runs out of memory.
    `mode`: the forward and backward through `torch.compile(model, mode=mode)` ("default", "reduce-overhead": CUDA
    graphs), AdamW and EMA eager as the loop runs them."""
    import torch
    from dptoolkit.config import load_config
    from dptoolkit.fsdp import checkpoint_activations
    from dptoolkit.normalize import Normalizer
    from dptoolkit.protocol import _windows, build_policy
    from dptoolkit.train import EMA, _adamw
    c = load_config(cfg, overrides(layers, emb, batch))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = opt = ema = b = None
    try:
        if dev.type == "cuda": torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        norm = Normalizer.from_store(store, [*c.task.dataset.obs_keys, "action"])
        with torch.device(dev): model = build_policy(c, normalizer=norm)
        model.to(dev)
        if ac: checkpoint_activations(model)
        n = sum(p.numel() for p in model.parameters())
        opt = _adamw(list(model.parameters()), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-3)
        ema = EMA(model)
        w = _windows(c, model, n=batch)
        reps = -(-batch // len(w["action"]))
        cat = lambda x: torch.cat([x] * reps)[:batch].to(dev)
        b = {"obs": {k: cat(v) for k, v in w["obs"].items()}, "action": cat(w["action"])}
        g = torch.Generator(device=dev).manual_seed(0)
        net = model if mode is None else torch.compile(model, mode=mode)
        ts = []
        for i in range(steps):
            sync(); t = time.perf_counter()
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = net(b, **model.draw(b, g))
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); ema.update_parameters(model)
            sync(); ts.append(time.perf_counter() - t)
        peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
        return n, peak, batch / statistics.median(ts[skip:])
    except torch.OutOfMemoryError:
        return None
    finally:
        del model, opt, ema, b
        gc.collect()
        if dev.type == "cuda": torch.cuda.empty_cache()


def loop_run(cfg, store, layers, emb, batch, ac, steps, root, strategy="ddp"):
    from omegaconf import OmegaConf
    from dptoolkit.report import read_log
    from dptoolkit.train import train
    d = root / f"loop-{layers}-{'ac' if ac else 'plain'}-{strategy}"
    ov = overrides(layers, emb, batch) + [f"training.strategy={strategy}",
        f"training.activation_checkpointing={str(ac).lower()}", "training.mixed_precision=bf16",
        "training.compile=false", f"training.max_steps={steps}", "training.log_every=5", "training.checkpoint_every=0",
        "training.val_every=0", "scaling.keep_effective_batch_size=false", "training.stall_timeout_s=null"]
    t = time.perf_counter()
    from dptoolkit.config import load_config
    try: train(load_config(cfg, ov), nprocs=1, run_dir=d, progress=False)
    except Exception as e:
        return dict(error=str(e).splitlines()[0][:300])
    log = read_log(d)
    meta = OmegaConf.to_container(OmegaConf.load(d / "config.yaml").run)
    import shutil; shutil.rmtree(d / "checkpoints", ignore_errors=True)   # GBs each: the device's disk is small
    return dict(samples_per_s=statistics.median(log.samples_per_s.tolist()[1:]), rank_bytes=meta.get("rank_bytes"),
                loss=[float(log.loss.iloc[0]), float(log.loss.iloc[-1])], wall_s=time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="16,32,48,64,80"); ap.add_argument("--emb", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=128); ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--loop-layers", type=int, default=16); ap.add_argument("--loop-steps", type=int, default=30)
    ap.add_argument("--no-loop-ac", dest="loop_ac", action="store_false",
                    help="the `dpt train` run plainly only (not again with activation checkpointing)")
    ap.add_argument("--loop-strategy", default="ddp", help="training.strategy of the `dpt train` rows (fsdp: FSDP2)")
    ap.add_argument("--quick", action="store_true", help="CPU smoke test: tiny widths")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch
    from dptoolkit.config import for_store
    from dptoolkit.store import sample_data
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if a.quick: a.layers, a.emb, a.batch, a.loop_layers, a.loop_steps, a.steps = "1,2", 64, 8, 1, 6, 4
    root = Path(tempfile.mkdtemp(prefix="dpt-gpu-big-"))
    store = sample_data(root / "data", tasks=1, episodes=6, seed=3, overwrite=True)[0]
    cfg = root / "cfg.yaml"
    from omegaconf import OmegaConf
    cfg.write_text(OmegaConf.to_yaml(for_store(store, name="test")))
    cfg = str(cfg)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    total = torch.cuda.get_device_properties(0).total_memory if dev.type == "cuda" else 0
    print(f"bench/gpu_big.py | {name} ({total / 2**30:.0f} GiB) | torch {torch.__version__} | transformer + flow, "
          f"n_emb {a.emb}, batch {a.batch}, bf16 autocast, fused AdamW, EMA", flush=True)
    rows, out = [], {}
    for ac in (False, True):
        for L in map(int, filter(None, a.layers.split(","))):
            t = time.perf_counter()
            r = probe(cfg, store, L, a.emb, a.batch, ac, a.steps, dev)
            row = dict(layers=L, ac=ac, oom=r is None)
            if r: row.update(params=r[0], peak=r[1], samples_per_s=r[2])
            rows.append(row)
            print(f"{'activation ckpt' if ac else 'plain':16s} {L:3d} layers: " + (
                "out of memory" if r is None else
                f"{r[0] / 1e6:,.0f} M params, peak {r[1] / 2**30:.1f} GiB, {r[2]:,.0f} samples/s") +
                f"  ({time.perf_counter() - t:.0f} s)", flush=True)
            if r is None: break
    out["probe"] = rows
    for ac in (False, True)[:2 if a.loop_ac else 1]:
        r = loop_run(cfg, store, a.loop_layers, a.emb, a.batch, ac, a.loop_steps, root, a.loop_strategy)
        out[f"loop_{'ac' if ac else 'plain'}"] = r
        print(f"dpt train bf16 {a.loop_strategy}, {a.loop_layers} layers, {'activation ckpt' if ac else 'plain'}: {r}",
              flush=True)
    if a.json: a.json.write_text(json.dumps(dict(gpu=name, torch=torch.__version__, args=vars(a), **out), indent=1,
                                            default=str))


if __name__ == "__main__":
    main()
