"""FSDP2 vs DDP at world 2 on this machine (issue 49): a transformer-denoiser policy scaled to ~300 M parameters
(18 layers × n_emb 1024), the same 20 fp32 steps from the same seed under `training.strategy=ddp` and `=fsdp`.
Prints, per strategy: each rank's bytes of parameters + gradients + AdamW + EMA (the tensors, from the run's
`config.yaml`), each rank's peak resident memory (VmHWM of the rank processes, sampled while they run), samples/s
(median of the log windows after the first two), the final checkpoint's files and bytes; then fsdp / ddp for each and
the largest relative difference of the 20 losses. Goals: model memory ≤ 0.6×, samples/s ≥ 0.8×, losses within
1e-4. More rows: fsdp with `training.fsdp_reshard=false` (each block's parameters gathered once a step, kept from
its forward to its backward), and both strategies as they ran before the CPU work of 2026-11-27
(`training.fsdp_cpu_collectives=gloo`: gloo's own all-gather / reduce-scatter; `training.cpu_keep_freed_memory=false`:
glibc returns freed blocks to the kernel), so the gain of each is measured in the same run.
Usage: python bench/fsdp.py [--layers 18] [--emb 1024] [--steps 20] [--batch 8] [--out DIR] [--json F] [--keep]
"""
import argparse, json, os, shutil, statistics, sys, tempfile, time
from pathlib import Path


def vm_hwm(pid: int) -> int:
    "A process's peak resident set (bytes), 0 when it has exited."
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"): return int(line.split()[1]) * 1024
    except OSError: pass
    return 0


def run(store, out: Path, strategy: str, a, extra=()) -> dict:
    from omegaconf import OmegaConf
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log
    from dptoolkit.train import train
    ov = [f"training.strategy={strategy}", f"training.max_steps={a.steps}", "training.log_every=1",
          "training.checkpoint_every=0", "training.device=cpu", "training.deterministic=true",
          "training.grad_clip=1.0", f"dataloader.batch_size={a.batch}", "policy.denoiser=transformer",
          f"policy.transformer.n_layer={a.layers}", f"policy.transformer.n_emb={a.emb}",
          f"policy.transformer.n_head={a.emb // 64}", "policy.transformer.p_drop_attn=0.0",
          "optimizer.weight_decay=1e-3", "training.stall_timeout_s=null", *extra]
    name = strategy + ("" if not extra else " (" + ", ".join(e.split(".")[-1] for e in extra) + ")")
    rd = out / name.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "").replace("=", "-")
    t0 = time.perf_counter()
    h = train(for_store(store, name="test"), nprocs=2, run_dir=rd, progress=False, overrides=ov, wait=False)
    peak, pids = {}, []
    while not h.done:
        if not pids and (rd / "config.yaml").exists():
            try: pids = [r["pid"] for r in OmegaConf.load(rd / "config.yaml").run.ranks]
            except Exception: pids = []
        for p in pids: peak[p] = max(peak.get(p, 0), vm_hwm(p))
        time.sleep(0.2)
    h.result()
    wall = time.perf_counter() - t0
    meta = OmegaConf.to_container(OmegaConf.load(rd / "config.yaml").run)
    log = read_log(rd)
    ck = rd / "checkpoints" / (rd / "checkpoints" / "latest").read_text().strip()
    files = {str(p.relative_to(ck)): p.stat().st_size for p in sorted(ck.rglob("*")) if p.is_file()}
    if not a.keep: shutil.rmtree(rd / "checkpoints")   # 4.7 GB a row at the default size
    return dict(strategy=name, wall_s=wall, rank_bytes=meta["rank_bytes"], peak_rss=sorted(peak.values()),
                samples_per_s=statistics.median(log.samples_per_s.tolist()[2:]), losses=log.loss.tolist(),
                checkpoint=files, params=None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--emb", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep each run's checkpoints (4.7 GB a row by default)")
    a = ap.parse_args()
    from dptoolkit.store import sample_data
    out = Path(a.out or tempfile.mkdtemp(prefix="dpt-fsdp-"))
    store = sample_data(out / "data", tasks=1, episodes=6, seed=3, overwrite=True)[0]
    before = ["training.cpu_keep_freed_memory=false"]
    rows = [run(store, out, "ddp", a), run(store, out, "fsdp", a),
            run(store, out, "fsdp", a, ["training.fsdp_reshard=false"]),
            run(store, out, "ddp", a, before),
            run(store, out, "fsdp", a, ["training.fsdp_cpu_collectives=gloo"] + before)]
    ddp, fsdp, fsdp2, ddp0, fsdp0 = rows
    n = ddp["rank_bytes"]["params"] // 4
    mb = lambda b: f"{b / 2**20:,.0f} MB"
    print(f"transformer denoiser, {a.layers} layers × n_emb {a.emb}: {n / 1e6:.0f} M parameters; world 2 CPU ranks on "
          f"{os.cpu_count()} cores; {a.steps} fp32 steps, global batch {a.batch}")
    print(f"{'strategy':52} {'params+grads+AdamW+EMA / rank':>30} {'peak RSS / rank':>18} {'samples/s':>10} "
          f"{'checkpoint':>12} {'wall s':>7}")
    for r in rows:
        print(f"{r['strategy']:52} {mb(r['rank_bytes']['total']):>30} {mb(max(r['peak_rss'] or [0])):>18} "
              f"{r['samples_per_s']:>10.2f} {mb(sum(r['checkpoint'].values())):>12} {r['wall_s']:>7.0f}")
    diff = max(abs(x - y) / abs(y) for x, y in zip(fsdp["losses"], ddp["losses"]))
    ratios = dict(model_memory=fsdp["rank_bytes"]["total"] / ddp["rank_bytes"]["total"],
                  peak_rss=max(fsdp["peak_rss"]) / max(ddp["peak_rss"]),
                  samples_per_s=fsdp["samples_per_s"] / ddp["samples_per_s"], loss_rel_diff=diff)
    print(f"fsdp / ddp: model memory per rank {ratios['model_memory']:.2f}× (goal ≤ 0.6), peak RSS per rank "
          f"{ratios['peak_rss']:.2f}×, samples/s {ratios['samples_per_s']:.2f}× (goal ≥ 0.8); the {a.steps} losses "
          f"differ by at most {diff:.1e} relative (goal ≤ 1e-4)")
    print(f"fsdp_reshard=false / ddp: samples/s {fsdp2['samples_per_s'] / ddp['samples_per_s']:.2f}×, peak RSS "
          f"{max(fsdp2['peak_rss']) / max(ddp['peak_rss']):.2f}×")
    ratios["samples_per_s_no_reshard"] = fsdp2["samples_per_s"] / ddp["samples_per_s"]
    ratios.update(samples_per_s_before=fsdp0["samples_per_s"] / ddp0["samples_per_s"],
                  ddp_gain=ddp["samples_per_s"] / ddp0["samples_per_s"],
                  fsdp_gain=fsdp["samples_per_s"] / fsdp0["samples_per_s"])
    print(f"before (gloo's collectives, freed memory returned): fsdp / ddp {ratios['samples_per_s_before']:.2f}×; "
          f"now against before: ddp {ratios['ddp_gain']:.2f}×, fsdp {ratios['fsdp_gain']:.2f}×")
    print("fsdp checkpoint files:", ", ".join(f"{k} {mb(v)}" for k, v in fsdp["checkpoint"].items()))
    if a.json: Path(a.json).write_text(json.dumps(dict(rows=rows, ratios=ratios, params=n, args=vars(a)), indent=1))


if __name__ == "__main__":
    main()
