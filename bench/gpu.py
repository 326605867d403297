"""The GPU table in one command: `dpt train` (fp32, bf16, compiled) against the bare model step and the guides' naive
loop, on RoboTwin's camera policy (robot_dp_14: ResNet-18 on a 3×240×320 head camera + 14-dim state, 96.8 M params).

Rows, all measured in this run on this machine:
  naive loop     the loop the guides (and RoboTwin's train.py) write: each batch gathered in the training process from a
                 decoded in-memory copy with all `horizon` frames, an unpinned copy to the device, `loss.item()` every step
  bare step      forward/backward/fused AdamW/EMA on one batch already on the device (no data at all): the ceiling
  dpt train      `train(cfg, nprocs=1)` on the store (fp32, bf16, bf16 + torch.compile with its start-up self-check)
Each figure is the median samples/s over steady-state windows (after --warmup steps) with its interquartile range.
FLOPs per sample come from `torch.utils.flop_counter` (forward + backward of one batch); "of peak" is achieved FLOP/s
over the GPU's dense bf16 peak (known GPUs only). "learns" compares the compiled run's losses with the eager bf16 run's
at every log step (same seed). On CPU, `--quick` runs the same rows on the small `test` config (a smoke test).
Issue 47's families (`--families`, default U-Net + flow and transformer + flow) add `dpt train bf16 <family>` rows, eager
and compiled, on the same camera store and batch.
Usage: python bench/gpu.py [--steps 300] [--batch 128] [--gb 1.5] [--store PATH] [--skip compiled,...] [--families F,..]
       [--compiled-families F,..] [--strategies fsdp] [--quick]
On the lent GPU machine (its image has torch, torchvision, safetensors, tqdm, pandas, psutil, cloudpickle but not the
rest of our requirements): carry wheels for zarr, numcodecs, donfig, crc32c, omegaconf, antlr4-python3-runtime,
diffusers and fastcore (the device README says how), then run this with PYTHONPATH at them and at this checkout.
"""
import argparse, contextlib, json, statistics, sys, tempfile, time
from pathlib import Path

import numpy as np

BF16_PEAK = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "RTX 4090": 165e12}


def peak(name):
    for k, v in BF16_PEAK.items():
        if k in name: return v
    return None


def quartiles(xs):
    q = np.percentile(xs, [25, 50, 75]) if len(xs) else [float("nan")] * 3
    return q[1], q[2] - q[0]


def timed_loop(step, n, warmup, sync, B):
    ts = []
    for i in range(warmup + n):
        sync(); t = time.perf_counter(); step(); sync(); ts.append(time.perf_counter() - t)
    return quartiles([B / t for t in ts[warmup:]])


def model_rows(cfg, store, a, dev):
    "bare step (fp32, bf16, compiled bf16), naive loop, FLOPs per sample: in this process."
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from dptoolkit.normalize import Normalizer
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.store import open_store
    from dptoolkit.parallelize import cuda_fast_paths
    from dptoolkit.train import EMA, _adamw
    if dev.type == "cuda": cuda_fast_paths(cfg.training, dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    B, H, To = a.batch, cfg.horizon, cfg.n_obs_steps
    keys = list(cfg.task.dataset.obs_keys)
    norm = Normalizer.from_store(store, [k for k in keys if k != "head_camera"] + ["action"])
    torch.manual_seed(0)
    model = DiffusionPolicy.from_config(cfg, normalizer=norm).to(dev)
    opt = _adamw(list(model.parameters()), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6)
    ema = EMA(model)
    g = torch.Generator(device=dev); g.manual_seed(0)
    obs = {"state": torch.randn(B, To, 14, device=dev)}
    if "head_camera" in keys:
        hw = tuple(cfg.shape_meta.obs.head_camera)[1:]
        obs["head_camera"] = torch.randint(0, 256, (B, To, 3, *hw), dtype=torch.uint8, device=dev)
    batch = {"obs": obs, "action": torch.randn(B, H, 14, device=dev)}
    rows, out = {}, {}

    def bare(net, amp):
        def step():
            with amp(): loss = net(batch, **model.draw(batch, g))
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); ema.update_parameters(model)
        return step
    bf16 = lambda: torch.autocast(dev.type, dtype=torch.bfloat16)
    fc = FlopCounterMode(display=False)
    with fc:
        with bf16(): loss = model(batch, **model.draw(batch, g))
        loss.backward()
    opt.zero_grad(set_to_none=True)
    out["flops_per_sample"] = fc.get_total_flops() / B
    rows["bare step fp32"] = timed_loop(bare(model, contextlib.nullcontext), a.reps, a.warm, sync, B)
    rows["bare step bf16"] = timed_loop(bare(model, bf16), a.reps, a.warm, sync, B)
    if not {"compiled", "bare_compiled"} & a.skip:
        rows["bare step bf16 compiled"] = timed_loop(bare(torch.compile(model), bf16), a.reps, a.warm + 3, sync, B)

    # the naive loop: all `horizon` frames of B random windows gathered here, unpinned copy, a host read every step
    z = open_store(store)
    data = {k: np.asarray(z[f"data/{k}"][:]) for k in keys + ["action"]}
    T = len(data["action"]); rng = np.random.default_rng(0)
    def naive():
        start = rng.integers(0, T - H, size=B)[:, None] + np.arange(H)
        b = {"obs": {k: torch.from_numpy(data[k][start]).to(dev) for k in keys},
             "action": torch.from_numpy(data["action"][start]).to(dev)}
        loss = model(b, generator=g)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); ema.update_parameters(model)
        loss.item()
    if "naive" not in a.skip: rows["naive loop fp32"] = timed_loop(naive, a.reps, a.warm, sync, B)
    out["params"] = sum(p.numel() for p in model.parameters())
    return rows, out


def train_rows(cfg, store, a, root):
    "`dpt train` runs: the logged samples/s after the warm-up, and the losses the learns-check compares."
    from dptoolkit.config import load_config
    from dptoolkit.report import read_log
    from dptoolkit.train import train
    rows, logs = {}, {}
    runs = [("dpt train fp32", ["training.mixed_precision=no", "training.compile=false"]),
            ("dpt train bf16", ["training.mixed_precision=bf16", "training.compile=false"]),
            ("dpt train bf16 compiled", ["training.mixed_precision=bf16", "training.compile=true"]),
            ("dpt train fp32 compiled", ["training.mixed_precision=no", "training.compile=true"])]
    sys.path.insert(0, str(Path(__file__).parent))
    from policies import FAMILY   # issue 47's families: the same store, batch and precision
    compiled = a.families if a.compiled_families is None else a.compiled_families
    for fam in filter(None, a.families.split(",")):
        runs += [(f"dpt train bf16 {fam}", ["training.mixed_precision=bf16", "training.compile=false", *FAMILY[fam]])]
        if fam in compiled.split(","):
            runs += [(f"dpt train bf16 compiled {fam}", ["training.mixed_precision=bf16", "training.compile=true",
                                                         *FAMILY[fam]])]
    for st in filter(None, a.strategies.split(",")):   # issue 82: FSDP2 on the same store, batch and precision
        runs += [(f"dpt train bf16 {st}", ["training.mixed_precision=bf16", "training.compile=false",
                                           f"training.strategy={st}"])]
    for name, ov in runs:
        if "compiled" in name and "compiled" in a.skip: continue
        if "fp32 compiled" in name and (a.quick or "fp32_compiled" in a.skip): continue
        if "fp32" in name and "fp32" in a.skip: continue
        c = load_config(cfg, ov + [f"training.max_steps={a.steps}", "training.checkpoint_every=0", "training.val_every=0",
                                   f"training.log_every={a.log_every}", "scaling.keep_effective_batch_size=false",
                                   f"dataloader.batch_size={a.batch}", f"task.dataset.zarr_path={store}"])
        d = root / name.replace(" ", "_")
        t = time.perf_counter()
        try: train(c, nprocs=1, run_dir=d, progress=False)
        except Exception as e:   # the rank's own traceback's end: what the next session on a GPU needs
            print(f"{name}: failed: {str(e).splitlines()[0][:300]}\n" + "\n".join(str(e).splitlines()[-12:]), flush=True)
            continue
        log = read_log(d)
        steady = log[log.step > a.warmup_steps]
        med, iqr = quartiles(steady.samples_per_s.to_numpy())
        rows[name] = (med, iqr)
        logs[name] = log
        share = float((steady.data_time_s / steady.step_time_s).median())
        mem = f", peak {steady.mem_mb.max():,.0f} MB" if "mem_mb" in steady else ""
        print(f"{name}: {med:,.0f} samples/s (IQR {iqr:,.0f}), data share {share:.2%}{mem}, loss {log.loss.iloc[0]:.3f} → "
              f"{log.loss.iloc[-1]:.3f}, {time.perf_counter() - t:.0f} s", flush=True)
    return rows, logs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300); ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--gb", type=float, default=1.5); ap.add_argument("--store", type=Path)
    ap.add_argument("--reps", type=int, default=30); ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--log-every", type=int, default=10); ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--skip", default="",
                    help="comma-separated: compiled, naive, train, bare_compiled, fp32 (dpt train), fp32_compiled")
    ap.add_argument("--families", default="unet+flow,transformer+flow",
                    help="policy families (bench/policies.py) also trained bf16, eager and compiled; '' for none")
    ap.add_argument("--compiled-families", help="of those, the ones also trained compiled (default: all)")
    ap.add_argument("--strategies", default="", help="also `dpt train bf16` under these training.strategy values "
                    "(fsdp: FSDP2 at this world size)")
    ap.add_argument("--quick", action="store_true", help="the small test config on a small store (CPU smoke test)")
    ap.add_argument("--json", type=Path, help="also write the table as JSON")
    a = ap.parse_args()
    a.skip = set(filter(None, a.skip.split(",")))
    import torch
    from dptoolkit.config import for_store
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    root = Path(tempfile.mkdtemp(prefix="dpt-gpu-bench-"))
    if a.quick:
        from dptoolkit.store import make_sample_store
        store = root / "small.zarr"; make_sample_store(store, episodes=8, image_hw=(24, 32), seed=0)
        cfg_name = "test"; a.batch = min(a.batch, 16)
        a.steps = min(a.steps, 40); a.warmup_steps = min(a.warmup_steps, 10); a.log_every = min(a.log_every, 5)
        a.reps = min(a.reps, 10)
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from dataset import make_store
        store = a.store or Path(tempfile.gettempdir()) / f"dpt-bench-robotwin-{a.gb:g}gb.zarr"
        if not store.exists(): make_store(store, a.gb)
        cfg_name = "robot_dp_14"
    cfg = for_store(store, name=cfg_name)
    cfg_file = root / "cfg.yaml"
    from omegaconf import OmegaConf
    cfg_file.write_text(OmegaConf.to_yaml(cfg))
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    print(f"bench/gpu.py | {gpu} | torch {torch.__version__} | {cfg_name}, batch {a.batch} | store {store}", flush=True)
    rows, out = model_rows(cfg, store, a, dev)
    logs = {}
    if "train" not in a.skip:
        r, logs = train_rows(str(cfg_file), store, a, root); rows.update(r)
    base = rows.get("naive loop fp32", (None,))[0]
    pk = peak(gpu) if dev.type == "cuda" else None
    print(f"\n{'run':28s} {'samples/s':>10s} {'IQR':>8s} {'× naive':>8s} {'TFLOP/s':>8s} {'of bf16 peak':>12s}")
    table = []
    for name, (med, iqr) in rows.items():
        tf = med * out["flops_per_sample"] / 1e12
        table.append(dict(run=name, samples_per_s=med, iqr=iqr, vs_naive=med / base if base else None, tflops=tf,
                          of_peak=tf * 1e12 / pk if pk else None))
        print(f"{name:28s} {med:10,.0f} {iqr:8,.0f} {(med / base if base else float('nan')):8.2f} {tf:8.1f} "
              f"{(f'{tf * 1e12 / pk:.1%}' if pk else 'n/a'):>12s}")
    print(f"\n{out['params'] / 1e6:.1f} M parameters; {out['flops_per_sample'] / 1e9:.2f} GFLOP per sample (forward + backward)")
    bare = rows.get("bare step bf16", (None,))[0]
    if bare and "dpt train bf16" in rows: print(f"dpt train bf16 / bare bf16 step: {rows['dpt train bf16'][0] / bare:.3f}")
    if "dpt train bf16" in logs and "dpt train bf16 compiled" in logs:
        e, c = logs["dpt train bf16"].set_index("step").loss, logs["dpt train bf16 compiled"].set_index("step").loss
        rel = ((c - e).abs() / e).dropna()
        print(f"learns: compiled vs eager bf16 loss at {len(rel)} log steps: largest relative difference {rel.max():.3f}, "
              f"final {c.iloc[-1]:.4f} vs {e.iloc[-1]:.4f}; grad norm median {logs['dpt train bf16 compiled'].grad_norm.median():.3g} "
              f"vs {logs['dpt train bf16'].grad_norm.median():.3g}")
    if a.json: a.json.write_text(json.dumps(dict(gpu=gpu, torch=torch.__version__, rows=table, **out), indent=1))


if __name__ == "__main__":
    main()
