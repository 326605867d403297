"""PushT's image policy at diffusion_policy's own recipe on a GPU (issue 82 item 4, issue 79): `pusht_image` as packaged
(ResNet-18 with GroupNorm on 84×84 crops of the 96×96 frames + agent_pos, U-Net [512, 1024, 2048], 275 M parameters,
batch 64, DDPM 100, EMA, 90 of the 206 demonstrations), bf16, on diffusion_policy's own store.

1. (--eager-steps N > 0) a short eager `dpt train` → samples/s (median of the log windows after the first third), the
   data share, and what the paper's 3,050 epochs cost in GPU-hours at that speed;
2. trained for --train-s seconds of wall clock after its first logged step (`training.compile` = --compile: false,
   true, auto; a stop during start-up would kill the rank before it checkpoints), stopped with a checkpoint
   (SIGTERM) → samples/s after step 100, the same cost, and the steps it reached;
3. that checkpoint played on the paper's 50 test seeds (100000 …, 300 steps, lockstep, the policy on the GPU) → score
   (mean of each episode's highest coverage) and success with Wilson intervals.
One training seed: the score is what the minutes allow, not the recipe's converged figure.
The store travels to a lent machine (64 MiB with the wheels): `--compact SRC DST` writes a copy of diffusion_policy's
store whose `img` is uint8 (the float32 array holds the integers 65–255 exactly) under blosc-zstd 9: 13 MB, not 31.
Usage: python bench/gpu_pusht.py --compact ../shared/data/pusht/pusht_cchi_v7_replay.zarr .gpu/pusht.zarr
       python bench/gpu_pusht.py --store PATH [--eager-steps 0] [--compile false] [--train-s 150] [--start-s 240]
       [--episodes 50] [--workers 2]
       [--out DIR] [--json F] [--quick]  (--quick: a 4 M U-Net and a few steps, a CPU smoke test)
"""
import argparse, json, statistics, tempfile, time
from pathlib import Path

EPOCHS = 3050   # diffusion_policy's image PushT config (train_diffusion_unet_hybrid_workspace: num_epochs 3050)


def _speed(run: Path, after: int):
    from dptoolkit.report import read_log
    log = read_log(run)
    s = log[log.step > after]
    s = s if len(s) else log
    share = float((s.data_time_s / s.step_time_s).median()) if "data_time_s" in s else float("nan")
    res = json.loads((run / "result.json").read_text()) if (run / "result.json").exists() else {}
    return dict(samples_per_s=float(s.samples_per_s.median()), data_share=share, steps=int(log.step.max()),
                loss=[float(log.loss.iloc[0]), float(log.loss.iloc[-1])], windows=res.get("train_windows"),
                batch=int(log.global_batch.iloc[-1]) if "global_batch" in log else 64,
                mem_mb=float(log.mem_mb.max()) if "mem_mb" in log else None)


def _cost(r):
    per_epoch = (r["windows"] or 10808) // r["batch"]
    r["recipe_steps"] = EPOCHS * per_epoch
    r["recipe_gpu_hours"] = EPOCHS * per_epoch * r["batch"] / r["samples_per_s"] / 3600
    return r


def compact(src: Path, dst: Path):
    "A copy of the store at `dst` with `data/img` as uint8 (refused unless the floats are whole numbers in 0–255)."
    import shutil
    import numpy as np
    import zarr
    from numcodecs import Blosc
    img = zarr.open_group(str(src), mode="r")["data/img"][:]
    if img.min() < 0 or img.max() > 255 or not np.array_equal(img, np.round(img)):
        raise SystemExit(f"{src}/data/img: not whole numbers in 0-255; a uint8 copy would change it")
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "data" / "img")
    a = zarr.create(store=str(dst / "data" / "img"), shape=img.shape, chunks=(161, *img.shape[1:]), dtype="u1",
                    zarr_format=2, compressor=Blosc(cname="zstd", clevel=9, shuffle=Blosc.BITSHUFFLE))
    a[:] = img.astype(np.uint8)
    print(f"{dst}: img as uint8, {sum(f.stat().st_size for f in dst.rglob('*') if f.is_file()) / 1e6:.1f} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compact", nargs=2, type=Path, metavar=("SRC", "DST"))
    ap.add_argument("--store", type=Path); ap.add_argument("--eager-steps", type=int, default=0)
    ap.add_argument("--compile", default="false")
    ap.add_argument("--train-s", type=float, default=150, help="seconds of training after the first logged step")
    ap.add_argument("--start-s", type=float, default=240, help="at most this long for the first logged step")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2); ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path); ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.compact: return compact(*a.compact)
    if a.store is None: ap.error("--store is required (or --compact SRC DST)")
    import torch
    from dptoolkit.config import for_store
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-gpu-pusht-"))
    cfg = for_store(a.store, name="pusht_image")
    common = ["training.mixed_precision=bf16", "training.checkpoint_every=0", "training.val_every=0",
              "training.log_every=10", "eval.rollout_every=null"]
    if a.quick: common += ["policy.down_dims=[32,64,128]", "dataloader.batch_size=8"]
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"bench/gpu_pusht.py | {gpu} | torch {torch.__version__} | pusht_image on {a.store}", flush=True)
    res = dict(gpu=gpu, torch=torch.__version__)
    if a.eager_steps > 0:
        t = time.perf_counter()
        train(cfg, nprocs=1, run_dir=out / "eager", progress=False,
              overrides=common + ["training.compile=false", f"training.max_steps={a.eager_steps}"])
        r = res["eager"] = _cost(_speed(out / "eager", a.eager_steps // 3))
        print(f"eager bf16: {r['samples_per_s']:,.0f} samples/s, data share {r['data_share']:.1%}, peak {r['mem_mb']} MB, "
              f"loss {r['loss'][0]:.3f} → {r['loss'][1]:.3f}; the paper's {EPOCHS} epochs = {r['recipe_steps']:,} steps "
              f"≈ {r['recipe_gpu_hours']:.1f} GPU-hours ({time.perf_counter() - t:.0f} s)", flush=True)
    t = time.perf_counter()
    h = train(cfg, nprocs=1, run_dir=out / "trained", progress=False, wait=False,
              overrides=common + [f"training.compile={a.compile}", "training.max_steps=1000000", "training.log_every=50"])
    log = out / "trained" / "logs.jsonl"   # the window starts at the first logged step: start-up and compiling apart
    while not h.done and not (log.exists() and log.stat().st_size) and time.perf_counter() - t < a.start_s:
        time.sleep(1)
    t1 = time.perf_counter()
    while not h.done and time.perf_counter() - t1 < a.train_s: time.sleep(2)
    h.stop(timeout=300)
    wall = time.perf_counter() - t
    r = res["trained"] = _cost(_speed(out / "trained", 100))
    from omegaconf import OmegaConf
    banner = OmegaConf.select(OmegaConf.load(out / "trained" / "config.yaml"), "run.compile", default=None)
    r["compile_note"], r["wall_s"] = banner, wall
    print(f"compile={a.compile} bf16: {r['samples_per_s']:,.0f} samples/s, data share {r['data_share']:.1%}, {r['steps']} steps "
          f"in {wall:.0f} s, loss {r['loss'][0]:.3f} → {r['loss'][1]:.3f}; recipe ≈ {r['recipe_gpu_hours']:.1f} "
          f"GPU-hours; {banner}", flush=True)
    from dptoolkit.success import rollout_checkpoint   # through the one door
    ck = max((out / "trained").glob("checkpoints/step_*"), key=lambda p: int(p.name.split("_")[-1]))
    t = time.perf_counter()
    rec = rollout_checkpoint(ck, "gym_pusht/PushT-v0", a.episodes, 100000, a.workers)
    res["score"] = {k: rec[k] for k in ("score", "score_low", "score_high", "success", "success_low", "success_high")}
    res["score"].update(step=int(ck.name.split("_")[-1]), rollout_s=time.perf_counter() - t, episodes=a.episodes)
    print(f"step {res['score']['step']}: score {rec['score']:.3f} [{rec['score_low']:.3f}–{rec['score_high']:.3f}], "
          f"success {rec['success']:.0%} [{rec['success_low']:.0%}–{rec['success_high']:.0%}] on {a.episodes} test seeds "
          f"({res['score']['rollout_s']:.0f} s)", flush=True)
    if a.json: a.json.write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
