"""Merge benchmark: dptoolkit's streaming merge vs a naive load-everything-then-concatenate merge.

Writes 3+ sources of image + state/action data (>= 1 GB decoded in all), then merges them both ways, each in its own
process so peak RSS (ru_maxrss of that process) is measured separately. Prints MB/s (decoded bytes / wall time) and
peak RSS. Usage: python bench/merge.py [--gb 1.1] [--sources 3] [--dir /tmp/dpt-bench-merge]
"""
import argparse, shutil, subprocess, sys, time
from pathlib import Path

import numpy as np


def make_sources(d: Path, gb: float, n: int):
    import zarr
    from dptoolkit.store import create_array
    H, W = 96, 128
    per_step = 3 * H * W + 2 * 14 * 4
    steps = int(gb * 1e9 / per_step / n)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:H, 0:W]
    paths = []
    for i in range(n):
        p = d / f"task_{i}.zarr"; paths.append(p)
        if (p / ".zgroup").exists(): continue
        g = zarr.open_group(str(p), mode="w", zarr_format=2)
        cam = create_array(g, "data/head_camera", (steps, 3, H, W), "uint8", (100, 3, H, W))
        st = create_array(g, "data/state", (steps, 14), "float32", (100, 14))
        ac = create_array(g, "data/action", (steps, 14), "float32", (100, 14))
        for s in range(0, steps, 1000):
            n_ = min(1000, steps - s)
            t = np.arange(s, s + n_)[:, None, None]
            blob = 127 + 100 * np.sin(xx[None] / 9 + t / 40) * np.cos(yy[None] / 7 - t / 55)
            img = np.stack([blob, 255 - blob, blob / 2], 1) + rng.integers(0, 12, (n_, 3, H, W))
            cam[s:s + n_] = img.clip(0, 255).astype(np.uint8)
            q = np.sin(np.arange(s, s + n_)[:, None] / 50 + np.arange(14)).astype(np.float32)
            st[s:s + n_] = q; ac[s:s + n_] = q
        ends = np.linspace(0, steps, 51, dtype=np.int64)[1:]
        e = g.create_array("meta/episode_ends", shape=ends.shape, dtype="int64", chunks=ends.shape, compressors=None); e[:] = ends
    return paths


# Peak RSS is sampled inside each merge process (every 5 ms): ru_maxrss from wait4 is not usable here, because Linux
# carries the parent's high-water mark over into a forked child.
SAMPLER = """
import psutil, threading, time, atexit
_peak = [0]
def _watch():
    p = psutil.Process()
    while True: _peak[0] = max(_peak[0], p.memory_info().rss); time.sleep(0.005)
threading.Thread(target=_watch, daemon=True).start()
atexit.register(lambda: print(f"PEAK_RSS_MB={max(_peak[0], psutil.Process().memory_info().rss) / 2**20:.1f}", flush=True))
"""
NAIVE = SAMPLER + """
import sys, numpy as np, zarr
from dptoolkit.store import write_store
srcs, dest = sys.argv[1:-1], sys.argv[-1]
gs = [zarr.open_group(s, mode="r") for s in srcs]
data = {k: np.concatenate([g[f"data/{k}"][:] for g in gs]) for k in ("head_camera", "state", "action")}
ends, off = [], 0
for g in gs:
    e = g["meta/episode_ends"][:]; ends.append(e + off); off += int(e[-1])
write_store(dest, data, np.concatenate(ends), chunk_steps=100)
"""
OURS = SAMPLER + """
import sys
from dptoolkit.merge import merge
merge(sys.argv[1:-1], sys.argv[-1], progress=False)
"""


def run(code, srcs, dest):
    shutil.rmtree(dest, ignore_errors=True)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, *map(str, srcs), str(dest)], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0: raise SystemExit(f"merge process failed:\n{r.stderr}")
    return dt, float(r.stdout.split("PEAK_RSS_MB=")[1].split()[0])


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--gb", type=float, default=1.1); ap.add_argument("--sources", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/dpt-bench-merge"); ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    d = Path(a.dir); d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter(); srcs = make_sources(d, a.gb, a.sources)
    from dptoolkit.store import describe
    infos = [describe(s) for s in srcs]
    decoded = sum(i.nbytes for i in infos) / 1e6; disk = sum(i.disk_bytes for i in infos) / 1e6
    print(f"sources: {len(srcs)} stores, {sum(i.steps for i in infos)} steps, {decoded:.0f} MB decoded, {disk:.0f} MB on disk "
          f"(made in {time.perf_counter() - t0:.0f} s)")
    rows = []
    for name, code in (("naive load-all + concatenate", NAIVE), ("dptoolkit merge (streaming)", OURS)):
        dt, rss = run(code, srcs, d / "merged.zarr")
        rows.append((name, dt, decoded / dt, rss))
    print(f"\n{'method':32s} {'seconds':>8s} {'MB/s':>8s} {'peak RSS MB':>12s}")
    for name, dt, mbs, rss in rows: print(f"{name:32s} {dt:8.1f} {mbs:8.0f} {rss:12.0f}")
    (_, n_dt, _, n_rss), (_, o_dt, _, o_rss) = rows
    print(f"\nstreaming / naive: time {o_dt / n_dt:.2f}x, peak RSS {o_rss / n_rss:.2f}x "
          f"(target: RSS < 300 MB whatever the size, time no worse than naive)")
    if not a.keep: shutil.rmtree(d)


if __name__ == "__main__":
    main()
