"""Where `dpt train`'s step loses time against the bare step at 1.1 B parameters (issue 82 item 3: 1,110 against 2,165
samples/s). The transformer + flow of `bench/gpu_big.py` (n_emb 2048, 16 layers, batch 128, bf16):

1. the bare step (gpu_big's probe: forward, backward, fused AdamW, EMA on one batch already on the device);
2. `train_worker` itself in this process for --steps steps, with `torch.profiler` over --active steps after --skip
   (`prof.step()` called after each optimizer step): each log window's samples/s, and for the profiled steps the wall
   time per step, the GPU's kernel time per step (the rest is the GPU waiting on the host), and the 15 largest ops by
   self CUDA time and by self CPU time.
Usage: python bench/gpu_loop_profile.py [--layers 16] [--emb 2048] [--batch 128] [--steps 40] [--skip 20] [--active 6]
       [--modes default,reduce-overhead] [--no-loop] [--json F] [--quick]
"""
import argparse, json, os, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpu_big import overrides, probe   # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=16); ap.add_argument("--emb", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=128); ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=20); ap.add_argument("--active", type=int, default=6)
    ap.add_argument("--modes", default="", help="also the bare step compiled in these torch.compile modes "
                    "(default, reduce-overhead: CUDA graphs)")
    ap.add_argument("--no-loop", dest="loop", action="store_false", help="the bare steps only")
    ap.add_argument("--json", type=Path); ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick: a.layers, a.emb, a.batch, a.steps, a.skip, a.active = 1, 64, 8, 12, 4, 3
    import torch
    from omegaconf import OmegaConf
    from dptoolkit.config import for_store, load_config
    from dptoolkit.store import sample_data
    import dptoolkit.train as T
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    root = Path(tempfile.mkdtemp(prefix="dpt-gpu-prof-"))
    store = sample_data(root / "data", tasks=1, episodes=6, seed=3, overwrite=True)[0]
    cfg_file = root / "cfg.yaml"
    cfg_file.write_text(OmegaConf.to_yaml(for_store(store, name="test")))
    out = {}
    t = time.perf_counter()
    r = probe(str(cfg_file), store, a.layers, a.emb, a.batch, False, 10, dev)
    out["bare"] = dict(params=r[0], peak=r[1], samples_per_s=r[2]) if r else None
    print(f"bare step: {r[0] / 1e6:,.0f} M params, {r[2]:,.0f} samples/s ({time.perf_counter() - t:.0f} s)", flush=True)
    for mode in filter(None, a.modes.split(",")):   # the lever for a host-bound step: compiled, CUDA graphs
        t = time.perf_counter()
        try: rc = probe(str(cfg_file), store, a.layers, a.emb, a.batch, False, 16, dev, mode=mode, skip=8)
        except Exception as e:
            rc = None
            print(f"bare step compiled ({mode}): failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
        if rc:
            out[f"bare_{mode}"] = dict(samples_per_s=rc[2], peak=rc[1])
            print(f"bare step compiled ({mode}): {rc[2]:,.0f} samples/s, {rc[2] / r[2]:.2f}× eager, peak "
                  f"{rc[1] / 2**30:.1f} GiB ({time.perf_counter() - t:.0f} s)", flush=True)

    if not a.loop:
        if a.json: a.json.write_text(json.dumps(out, indent=1, default=str))
        return
    ov = overrides(a.layers, a.emb, a.batch) + [
        "training.mixed_precision=bf16", "training.compile=false", f"training.max_steps={a.steps}",
        "training.log_every=5", "training.checkpoint_every=0", "training.val_every=0", 
        "scaling.keep_effective_batch_size=false", "training.stall_timeout_s=null", f"logging.run_dir={root / 'run'}"]
    cfg = load_config(str(cfg_file), ov)
    from torch.profiler import ProfilerActivity, profile, schedule
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    marks = []
    orig = T.optimizer_step
    prof = profile(activities=acts, schedule=schedule(wait=a.skip, warmup=2, active=a.active, repeat=1))

    def stepped(R):
        gn = orig(R)
        if len(marks) == a.skip + 2 or len(marks) == a.skip + 2 + a.active:
            if dev.type == "cuda": torch.cuda.synchronize()
        marks.append(time.perf_counter())
        prof.step()
        return gn
    T.optimizer_step = stepped
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    t = time.perf_counter()
    with prof: T.train_worker(OmegaConf.to_container(cfg, resolve=True))
    T.optimizer_step = orig
    from dptoolkit.report import read_log
    log = read_log(root / "run")
    i0, i1 = a.skip + 2, a.skip + 2 + a.active
    wall = (marks[i1] - marks[i0]) / a.active
    ka = prof.key_averages()
    from torch.autograd import DeviceType   # the kernels' own rows (the op and ProfilerStep rows count them again)
    cuda_us = sum(getattr(e, "self_device_time_total", 0) for e in ka if e.device_type == DeviceType.CUDA)
    out["loop"] = dict(windows=log.samples_per_s.round(1).tolist(), steps=log.step.tolist(),
                       median_after_skip=float(log[log.step > a.skip].samples_per_s.median()),
                       profiled_step_s=wall, profiled_samples_per_s=a.batch / wall,
                       gpu_kernel_s_per_step=cuda_us / 1e6 / a.active, wall_s=time.perf_counter() - t)
    L = out["loop"]
    print(f"dpt train: log windows {L['windows']} samples/s; after step {a.skip}: {L['median_after_skip']:,.0f}; "
          f"profiled steps: {L['profiled_step_s'] * 1e3:.1f} ms wall a step, GPU kernels {L['gpu_kernel_s_per_step'] * 1e3:.1f} "
          f"ms a step", flush=True)
    if out["bare"]: print(f"loop / bare: {L['median_after_skip'] / out['bare']['samples_per_s']:.3f}", flush=True)
    sort = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    out["by_cuda"] = ka.table(sort_by=sort, row_limit=15, max_name_column_width=60)
    out["by_cpu"] = ka.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60)
    print(out["by_cuda"], flush=True)
    print(out["by_cpu"], flush=True)
    if a.json: a.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
