"""Storage modes on RoboTwin-shaped camera data: windows/s, cache build, private memory, a store 4x bigger than RAM.

Makes (once, reused by later runs) a store shaped like RoboTwin's: `head_camera` uint8 (T, 3, 240, 320), `state` /
`action` float32 (T, 14), episodes of 150-350 steps, 100-step chunks, Blosc zstd-3, at least `--gb` decoded. Then, in one
run:
  1. the decoded cache's build time and MB/s (from an empty cache folder);
  2. windows/s of this rank's `RankLoader` (3 observation frames per window, batch 128) for `chunks`, `memory`, `mmap`
     (warm, and cold after `echo 3 > /proc/sys/vm/drop_caches` where we are root) and `device` (CPU), with 0 workers
     (the in-rank prefetch thread) and 2 DataLoader workers; ratios against `chunks` and `memory` of the same run;
  3. private memory (USS, psutil) of 2 ranks x 2 workers reading `mmap`, against the same ranks before opening the data;
  4. with `--cgroup-gb G` (root, cgroup v1): `dpt train` on 2 CPU ranks (`test` config, small backbone) inside a memory
     cgroup limited to G GB, on the store (>= 4x G): it must not be OOM-killed; prints its data share of step time.
Usage: python bench/dataset.py [--gb 4.2] [--store PATH] [--batches 20] [--cgroup-gb 1] [--skip memory,...]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time
from pathlib import Path

import numpy as np

H, W, DIM = 240, 320, 14


def make_store(path: Path, gb: float, seed: int = 0):
    "RoboTwin-shaped store written chunk by chunk (never the whole array in memory); camera frames compress ~3x."
    import zarr
    from dptoolkit.store import create_array, describe, time_chunks, validate
    frame = 3 * H * W
    steps = int(np.ceil(gb * 1e9 / frame / 100) * 100)
    rng = np.random.default_rng(seed)
    lens = []
    while sum(lens) < steps: lens.append(int(rng.integers(150, 351)))
    lens[-1] -= sum(lens) - steps
    if lens[-1] < 50: lens[-2] += lens.pop()
    ends = np.cumsum(lens)
    tmp = path.with_name(path.name + ".tmp"); shutil.rmtree(tmp, ignore_errors=True)
    g = zarr.open_group(str(tmp), mode="w", zarr_format=2)
    cam = create_array(g, "data/head_camera", (steps, 3, H, W), "uint8", time_chunks((steps, 3, H, W), 100))
    st = create_array(g, "data/state", (steps, DIM), "float32", time_chunks((steps, DIM), 100))
    ac = create_array(g, "data/action", (steps, DIM), "float32", time_chunks((steps, DIM), 100))
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    base = (np.sin(xx / 17.0) * 40 + np.cos(yy / 23.0) * 40 + 128)
    q = np.cumsum(rng.normal(0, 0.02, size=(steps + 1, DIM)).astype(np.float32), axis=0)
    from tqdm import tqdm
    for s in tqdm(range(0, steps, 100), desc=f"writing {path.name}", unit="chunk"):
        n = min(100, steps - s)
        t = np.arange(s, s + n, dtype=np.float32)[:, None, None]
        img = base[None] + 30 * np.sin((xx[None] + 3 * t) / 29.0)
        img = np.stack([img, img * 0.8 + 20, 255 - img], axis=1)
        img += rng.integers(0, 6, size=img.shape)          # sensor noise: real frames do not compress to nothing
        cam[s:s + n] = img.clip(0, 255).astype(np.uint8)
        st[s:s + n] = q[s:s + n]; ac[s:s + n] = q[s + 1:s + n + 1]
    e = g.create_array("meta/episode_ends", shape=ends.shape, dtype="int64", chunks=(len(ends),), compressors=None)
    e[...] = ends
    validate(tmp); shutil.rmtree(path, ignore_errors=True); tmp.rename(path)
    return describe(path)


def drop_caches() -> bool:
    try:
        os.sync(); Path("/proc/sys/vm/drop_caches").write_text("3\n"); return True
    except OSError:
        return False


def rate(loader, batches: int, warm: int = 2, max_s: float = 30.0):
    "Windows/s of `loader` over `batches` batches after `warm` (or until max_s)."
    it = cycle(loader)
    for _ in range(warm): next(it)
    n, t0 = 0, time.perf_counter()
    for _ in range(batches):
        b = next(it); n += len(b["action"])
        if time.perf_counter() - t0 > max_s: break
    return n / (time.perf_counter() - t0)


def cycle(loader):
    "Batches epoch after epoch (small stores have few batches per epoch)."
    e = 0
    while True:
        loader.set_epoch(e); e += 1
        yield from loader


def _mem(pid):
    "(USS, PSS, private dirty + swap) of a process, from /proc/PID/smaps_rollup."
    f = dict(l.split(":", 1) for l in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    kb = lambda k: int(f[k].split()[0]) * 1024 if k in f else 0
    return kb("Private_Clean") + kb("Private_Dirty"), kb("Pss"), kb("Private_Dirty") + kb("Swap")


def uss_rank(cfg_dict, batches):
    "Per rank: memory before opening data, then the peaks of the rank and of its workers while reading `batches` batches."
    import psutil, torch.distributed as dist
    from omegaconf import OmegaConf
    from dptoolkit.dataset import rank_loader
    cfg = OmegaConf.create(cfg_dict)
    me = psutil.Process()
    before = _mem(me.pid)
    loader = rank_loader(cfg, dist.get_rank(), dist.get_world_size(), "cpu", progress=False)
    peak = dict(rank_uss=0, rank_pss=0, rank_private=0, worker_uss=0, worker_pss=0, worker_private=0, pss_total=0)
    stop = threading.Event()
    def sample():
        while not stop.is_set():
            try:
                u, p, d = _mem(me.pid); tot = p
                peak.update(rank_uss=max(peak["rank_uss"], u), rank_pss=max(peak["rank_pss"], p), rank_private=max(peak["rank_private"], d))
                for c in me.children(recursive=True):
                    u, p, d = _mem(c.pid); tot += p
                    peak.update(worker_uss=max(peak["worker_uss"], u), worker_pss=max(peak["worker_pss"], p), worker_private=max(peak["worker_private"], d))
                peak["pss_total"] = max(peak["pss_total"], tot)
            except (OSError, psutil.Error, ValueError): pass
            time.sleep(0.05)
    th = threading.Thread(target=sample, daemon=True); th.start()
    it = cycle(loader)
    for _ in range(batches): next(it)
    stop.set(); th.join()
    out = [None] * dist.get_world_size(); dist.all_gather_object(out, dict(before_uss=before[0], before_private=before[2], **peak))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.2); ap.add_argument("--store")
    ap.add_argument("--batches", type=int, default=20); ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--cgroup-gb", type=float, default=1.0); ap.add_argument("--skip", default="", help="comma-separated: build (keep the cache), chunks, mmap, memory, device, uss, cgroup")
    ap.add_argument("--train-steps", type=int, default=400)
    a = ap.parse_args(); skip = set(filter(None, a.skip.split(",")))
    import torch
    from dptoolkit.config import for_store
    from dptoolkit.dataset import DecodedCache, RankLoader, SequenceDataset, cache_clear
    from dptoolkit.store import describe
    work = Path(os.environ.get("DPT_BENCH_DIR", "/tmp/dpt-bench")); work.mkdir(parents=True, exist_ok=True)
    store = Path(a.store) if a.store else work / f"robotwin_{a.gb:g}gb.zarr"
    if not store.exists(): make_store(store, a.gb)
    info = describe(store)
    ondisk = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    print(f"store {store}: {info.steps} steps, {info.episodes} episodes, {info.nbytes / 1e9:.2f} GB decoded, "
          f"{ondisk / 1e9:.2f} GB on disk; torch threads {torch.get_num_threads()}; cpus {os.cpu_count()}")
    cache_dir = work / "cache"
    keys = ["head_camera", "state", "action"]
    res = {}
    # 1. cache build from empty
    if "build" not in skip: cache_clear(cache_dir)
    t0 = time.perf_counter(); c = DecodedCache(store, cache_dir).build(keys, progress=True); build_s = time.perf_counter() - t0
    res["cache_build_s"] = build_s; res["cache_mb_s"] = info.nbytes / 1e6 / build_s
    t0 = time.perf_counter()
    SequenceDataset(store, 8, 3, 2, 5, keys=["head_camera", "state"], storage="mmap", cache_dir=cache_dir)
    res["reopen_s"] = time.perf_counter() - t0
    print(f"cache build: {build_s:.1f} s, {res['cache_mb_s']:.0f} MB/s (decoded); reopen with the cache in place: {res['reopen_s']:.2f} s")
    # 2. windows/s
    kw = dict(keys=["head_camera", "state"], cache_dir=cache_dir)
    rows = []
    def measure(name, ds, workers, batches=a.batches):
        cold = name.endswith("(cold)")
        tr, _ = ds.split(0.0)
        if ds.storage == "device": tr = tr.shard(0, 1, "cpu")
        ld = RankLoader(tr, a.batch, 0, 1, seed=0, num_workers=workers, prefetch_factor=2, persistent_workers=False)
        r = rate(ld, batches if name != "chunks" else max(3, batches // 4), warm=2 if name == "chunks" or cold else 10)
        rows.append(dict(storage=name, workers=workers, windows_s=r)); print(f"  {name:12s} workers={workers}: {r:9.0f} windows/s", flush=True)
    def warm_page_cache():
        for k in keys:
            with open(c.file(k), "rb") as f:
                while f.read(64 << 20): pass
    for name in ["chunks", "mmap", "mmap (cold)", "memory", "device"]:
        if name.split()[0] in skip: continue
        st = name.split()[0]
        if st in ("mmap", "device") and name != "mmap (cold)": warm_page_cache()
        ds = None
        for w in (0, 2):
            if st == "device" and w: continue
            if name == "mmap (cold)":  # dropped before each open: pages a process maps cannot be dropped
                ds = None
                if not drop_caches(): print("  mmap (cold): cannot drop the page cache (not root): skipped"); break
            if ds is None:
                ds = SequenceDataset(store, 8, 3, 2, 5, storage=st, **kw)
                if ds.populating is not None and name == "mmap": ds.populating.join()   # warm: mapped, as after a run's model set-up
            measure(name, ds, w)
        del ds
    res["rates"] = rows
    get = lambda s, w: next((r["windows_s"] for r in rows if r["storage"] == s and r["workers"] == w), float("nan"))
    best = lambda s: max(get(s, 0), get(s, 2))
    if not rows: skip.add("ratios")
    if "ratios" not in skip:
      print(f"\nmmap warm / chunks (best of 0 and 2 workers each): {best('mmap') / best('chunks'):.1f}x (goal >= 30x)")
      print(f"mmap warm / memory (best of 0 and 2 workers each): {best('mmap') / best('memory'):.2f}x (goal >= 0.5x)")
      res["ratios"] = dict(mmap_over_chunks=best("mmap") / best("chunks"), mmap_over_memory=best("mmap") / best("memory"))
    # 3. memory of 2 ranks reading mmap: 2 DataLoader workers each, then the default (a prefetch thread in the rank)
    if "uss" not in skip:
        from dptoolkit.launch import launch
        from omegaconf import OmegaConf
        M = lambda v: f"{v / 1e6:.0f} MB"
        res["uss"] = {}
        for workers in (2, 0):
            cfg = for_store(store, name="test", overrides=[f"dataloader.batch_size={2 * a.batch}", f"dataloader.num_workers={workers}",
                                                            "task.dataset.storage=mmap", f"task.dataset.cache_dir={cache_dir}",
                                                            "scaling.keep_effective_batch_size=true"])
            out = launch(uss_rank, OmegaConf.to_container(cfg), a.batches, nprocs=2, progress_bar=False)
            print(f"\n2 ranks x {workers} workers reading mmap ({a.batches} batches of {a.batch}); data {M(info.nbytes)}:")
            for r, o in enumerate(out):
                print(f"  rank {r}: USS {M(o['before_uss'])} before the data, peak {M(o['rank_uss'])}; private (anon + dirty) "
                      f"{M(o['before_private'])} -> {M(o['rank_private'])}; PSS peak {M(o['rank_pss'])}." +
                      (f" Its {workers} workers: peak USS {M(o['worker_uss'])}, private {M(o['worker_private'])}, PSS {M(o['worker_pss'])}."
                       f" Rank + workers PSS {M(o['pss_total'])}" if workers else ""))
            print(f"  all ranks and workers together, PSS: {M(sum(o['pss_total'] for o in out))} (the data once, shared, plus every process's own memory and libraries)")
            res["uss"][workers] = out
    # 4. bigger than RAM: dpt train in a memory cgroup
    if "cgroup" not in skip:
        res["cgroup"] = cgroup_train(store, cache_dir, a.cgroup_gb, info.nbytes, a.train_steps)
    (work / "dataset_bench.json").write_text(json.dumps(res, indent=1, default=float))
    print(f"\nresults: {work / 'dataset_bench.json'}")


def cgroup_train(store, cache_dir, gb, store_bytes, steps):
    cg = Path("/sys/fs/cgroup/memory") / f"dpt-bench-{os.getpid()}"
    try:
        cg.mkdir(); (cg / "memory.limit_in_bytes").write_text(str(int(gb * 1e9)))
    except OSError as e:
        print(f"cgroup: cannot create a memory cgroup ({e}): skipped"); return None
    try:
        try: (cg / "memory.memsw.limit_in_bytes").write_text(str(int(gb * 1e9)))
        except OSError: pass
        run = Path(tempfile.mkdtemp()) / "run"
        argv = ["train", "--config", "test", "--data", str(store), "--nprocs", "2",
                "--out", str(run), "--no-progress", "task.dataset.storage=mmap", f"task.dataset.cache_dir={cache_dir}",
                f"training.max_steps={steps}", f"training.log_every={max(1, steps // 3)}", "training.checkpoint_every=0",
                "dataloader.batch_size=16", "training.val_every=0", "policy.obs_encoder.resize_shape=[120,160]"]
        # the launcher imports torch first, then joins the cgroup: its import (~0.4 GB here, a CUDA build of torch) is a
        # fixed cost outside the data path; everything started after (forkserver, ranks, page cache) is charged inside
        cmd = [sys.executable, "-c", "import os, sys, torch, dptoolkit.train, dptoolkit.cli; "
               f"open({str(cg / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); sys.exit(dptoolkit.cli.main({argv!r}))"]
        drop_caches()
        print(f"\ncgroup: dpt train, 2 CPU ranks, in a {gb:g} GB memory cgroup, store {store_bytes / 1e9:.1f} GB "
              f"({store_bytes / (gb * 1e9):.1f}x the limit)", flush=True)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd)
        rc = p.wait(); wall = time.perf_counter() - t0
        peak = int((cg / "memory.max_usage_in_bytes").read_text()); fails = int((cg / "memory.failcnt").read_text())
        oom = (cg / "memory.oom_control").read_text()
        killed = "oom_kill " in oom and int(oom.split("oom_kill ")[1].split()[0]) > 0
        from dptoolkit.report import read_log
        log = read_log(run) if (run / "logs.jsonl").exists() else None
        share = float((log["data_time_s"] / log["step_time_s"]).iloc[-1]) if log is not None and len(log) else float("nan")
        frames = steps * 16 * 3 * 3 * H * W                 # steps x global batch x observation frames x frame bytes
        print(f"cgroup: exit {rc} in {wall:.0f} s; frames read {frames / 1e9:.1f} GB (random windows over the whole store); peak usage {peak / 1e9:.2f} GB of {gb:g} GB (page cache included), "
              f"{fails} times at the limit, OOM kills: {'yes' if killed else 'none'}; data share of step time {100 * share:.1f} %")
        return dict(rc=rc, wall_s=wall, peak=peak, frames_read=frames, limit=gb * 1e9, oom_killed=killed, data_share=share, store_bytes=store_bytes)
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            try: Path("/sys/fs/cgroup/memory/cgroup.procs").write_text(pid)
            except OSError: pass
        try: cg.rmdir()
        except OSError: pass


if __name__ == "__main__":
    main()
