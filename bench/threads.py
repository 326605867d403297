"""Thread policy for CPU speed-up runs: which split of torch threads makes a 1-process baseline and an N-process run
comparable, and which survives a busy machine. Two policies, each timed on a quiet machine and with --hogs busy-loop
processes competing for the cores, as the demo's timing sweep (test config, demo model, 16 per device, --steps steps,
1 and 2 processes interleaved, --repeats times):
  same-total     training.cpu_threads=auto: the cores split over the ranks (1 process × 2 threads vs 2 × 1 here)
  one-per-rank   training.cpu_threads=1: every rank one thread (1 × 1 vs 2 × 1), as each GPU is one device
Prints per policy and condition: samples/s of each world size, the speed-up with its range, the contention flags, and
how far the busy speed-up moved from the quiet one.
Usage: python bench/threads.py [--steps 60] [--repeats 2] [--hogs 2]
"""
import argparse, subprocess, sys, tempfile, time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60); ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--hogs", type=int, default=2)
    a = ap.parse_args()
    from dptoolkit.demo import DEMO_MODEL, bundled_data
    from dptoolkit.config import for_store
    from dptoolkit.merge import merge
    from dptoolkit.sweep import sweep
    root = Path(tempfile.mkdtemp(prefix="dpt-threads-"))
    store = merge(sorted(bundled_data().glob("*.zarr")), root / "merged.zarr", progress=False).path
    cfg = for_store(store, name="test", overrides=["dataloader.batch_size=16", "scaling.keep_effective_batch_size=false",
                                                   "task.dataset.val_ratio=0.15", *DEMO_MODEL])
    res = {}
    for cond in ("quiet", "busy"):
        hogs = []
        if cond == "busy":
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]; time.sleep(1)
        try:
            for pol, th in (("same-total", "auto"), ("one-per-rank", "1")):
                s = sweep(cfg, (1, 2), steps=a.steps, repeats=a.repeats, out_dir=root / cond / pol, progress=False,
                          overrides=[f"training.cpu_threads={th}"])
                res[pol, cond] = s.set_index("world_size")
                r = res[pol, cond]
                print(f"{pol:13s} {cond:5s} | 1 proc {r.samples_per_s[1]:6.0f} samples/s ({int(r.threads[1])} thr) | 2 procs "
                      f"{r.samples_per_s[2]:6.0f} ({int(r.threads[2])} thr each) | speed-up {r.speedup[2]:.2f} "
                      f"[{r.speedup_low[2]:.2f}–{r.speedup_high[2]:.2f}] | cpu share {r.cpu_share[1]:.2f} / {r.cpu_share[2]:.2f} | "
                      f"{r.flag[2] or 'no flag'}", flush=True)
        finally:
            for h in hogs: h.kill(); h.wait()
    for pol in ("same-total", "one-per-rank"):
        q, b = res[pol, "quiet"], res[pol, "busy"]
        print(f"{pol}: busy/quiet throughput 1 proc {b.samples_per_s[1] / q.samples_per_s[1]:.2f}, 2 procs "
              f"{b.samples_per_s[2] / q.samples_per_s[2]:.2f}; speed-up quiet {q.speedup[2]:.2f} → busy {b.speedup[2]:.2f} "
              f"({b.speedup[2] / q.speedup[2] - 1:+.0%})")


if __name__ == "__main__":
    main()
