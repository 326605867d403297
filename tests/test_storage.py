"""Storage modes (issue 15): the decoded cache shared by a machine's processes, device shards, and training on each.

Real processes throughout: ranks started by `launch`, DataLoader workers, builders killed with SIGKILL, `dpt train`
runs racing for one cache, a tmpfs that runs out of space, and a cgroup-v1 memory limit four times smaller than the
data (root only; skipped with the reason elsewhere)."""
import json, os, signal, subprocess, sys, threading, time
from pathlib import Path

import numpy as np
import pytest

from dptoolkit.dataset import DecodedCache, SequenceDataset
from dptoolkit.store import make_sample_store, open_store
from conftest import dpt

KW = dict(horizon=8, n_obs_steps=3, pad_before=2, pad_after=5, keys=["head_camera", "state"])


@pytest.fixture(scope="module")
def big_cam(tmp_path_factory):
    "A camera store of ~170 MB decoded (3×96×128 frames, ~4,600 steps; 100-step chunks that straddle episodes)."
    p = tmp_path_factory.mktemp("bigcam") / "cam.zarr"
    make_sample_store(p, episodes=60, min_len=60, max_len=100, image_hw=(96, 128), seed=5)
    return p


@pytest.fixture(scope="module")
def cam(tmp_path_factory):
    p = tmp_path_factory.mktemp("cam") / "cam.zarr"
    make_sample_store(p, episodes=8, min_len=30, max_len=60, image_hw=(24, 32), seed=2)
    return p


def private_dirty(pid="self") -> int:
    """Bytes only this process holds and the kernel cannot drop: anonymous and dirty pages (`Private_Dirty` + `Swap` of
    /proc/PID/smaps_rollup). USS also counts clean page-cache pages while this is the only process mapping them, so a
    rank that maps the decoded cache first shows it in its USS although it is one copy per machine, evictable."""
    f = dict(l.split(":", 1) for l in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    return sum(int(f[k].split()[0]) * 1024 for k in ("Private_Dirty", "Swap") if k in f)


def _uss_probe(store, cache_dir, batches):
    "In each rank: private memory before the data, then its peak while 2 workers read `batches` batches, per storage."
    import torch.distributed as dist
    from dptoolkit.dataset import RankLoader, SequenceDataset
    out = {}
    for storage in ("mmap", "memory"):
        before = private_dirty()
        ds = SequenceDataset(store, storage=storage, cache_dir=cache_dir, **KW)
        ld = RankLoader(ds, 64, dist.get_rank(), dist.get_world_size(), seed=0, num_workers=2, persistent_workers=False)
        peak, stop = [0], threading.Event()
        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], private_dirty()); time.sleep(0.02)
        th = threading.Thread(target=sample, daemon=True); th.start()
        e, n = 0, 0
        while n < batches:
            ld.set_epoch(e); e += 1
            for b in ld:
                n += 1
                if n >= batches: break
        stop.set(); th.join()
        out[storage] = peak[0] - before
        del ds, ld, b
    got = [None] * dist.get_world_size(); dist.all_gather_object(got, out)
    return got


def test_mmap_data_is_not_private_memory(big_cam, tmp_path):
    """2 ranks × 2 DataLoader workers: reading through the decoded cache adds little to a rank's private memory (the
    frames live once, in the page cache); a `memory` copy adds the whole store to each rank. (`private_dirty`, not USS:
    see its note; bench/dataset.py reports USS and PSS too.)"""
    from dptoolkit.launch import launch
    cache = tmp_path / "cache"
    DecodedCache(big_cam, cache).build(["head_camera", "state", "action"], progress=False)
    nbytes = sum(np.load(f, mmap_mode="r").nbytes for f in DecodedCache(big_cam, cache).dir.glob("*.npy"))
    got = launch(_uss_probe, str(big_cam), str(cache), 12, nprocs=2, progress_bar=False)
    print({r: {k: f"{v / 1e6:.0f} MB" for k, v in g.items()} for r, g in enumerate(got)}, f"store {nbytes / 1e6:.0f} MB")
    for g in got:
        assert g["mmap"] < 0.25 * nbytes, (g, nbytes)         # batches in flight only
        assert g["memory"] > 0.8 * nbytes, (g, nbytes)        # the control: a private copy per rank


CGROUP = Path("/sys/fs/cgroup/memory")


def _evict(*folders):
    """The folders' files out of the page cache (written back first), and nothing else: not the machine's whole cache
    (`drop_caches`), which made every process starting beside this test read torch's libraries from disk again."""
    for f in (p for d in folders for p in Path(d).rglob("*") if p.is_file()):
        fd = os.open(f, os.O_RDONLY)
        try: os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally: os.close(fd)

_READER = r"""
import os, sys, numpy as np
from dptoolkit.dataset import SequenceDataset
store, cache, storage, cg = sys.argv[1:5]
ds = SequenceDataset(store, 8, 3, 2, 5, keys=["head_camera", "state"], storage="chunks")   # imports done, nothing read
open(os.path.join(cg, "cgroup.procs"), "w").write(str(os.getpid()))   # from here on, every page is charged to the cgroup
ds = SequenceDataset(store, 8, 3, 2, 5, keys=["head_camera", "state"], storage=storage, cache_dir=cache)
rng = np.random.default_rng(0); n = 0
for i in np.array_split(rng.permutation(len(ds)), len(ds) // 64):   # every window, in random order: the whole store
    n += len(ds.__getitems__(i)["action"])
print("read", n, "windows", flush=True)
"""


def test_bigger_than_ram_in_a_memory_cgroup(big_cam, tmp_path):
    """The data is 4x the cgroup's memory limit (page cache included): reading every window through the decoded cache
    succeeds; the same reader with a private `memory` copy is OOM-killed (so the limit really binds)."""
    cg = CGROUP / f"dpt-test-{os.getpid()}"
    try: cg.mkdir(); (cg / "memory.limit_in_bytes").write_text("1")
    except OSError as e: pytest.skip(f"the cgroup-v1 memory controller is not writable here ({e})")
    cache = tmp_path / "cache"
    c = DecodedCache(big_cam, cache).build(["head_camera", "state", "action"], progress=False)
    nbytes = sum(c.file(k).stat().st_size for k in ("head_camera", "state", "action"))
    limit = nbytes // 4
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        try: (cg / "memory.memsw.limit_in_bytes").write_text(str(limit))
        except OSError: pass
        res = {}
        for storage in ("mmap", "memory"):
            _evict(big_cam, cache)                                 # cold: every page read under the limit
            r = subprocess.run([sys.executable, "-c", _READER, str(big_cam), str(cache), storage, str(cg)],
                               capture_output=True, text=True, timeout=300)
            res[storage] = r
        peak = int((cg / "memory.max_usage_in_bytes").read_text())
        print(f"data {nbytes / 1e6:.0f} MB, limit {limit / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB")
        assert res["mmap"].returncode == 0, res["mmap"].stderr[-2000:]
        assert "read" in res["mmap"].stdout
        assert peak <= limit
        assert res["memory"].returncode == -signal.SIGKILL, (res["memory"].returncode, res["memory"].stderr[-500:])
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            try: (CGROUP / "cgroup.procs").write_text(pid)
            except OSError: pass
        cg.rmdir()


def test_cache_built_once_and_rebuilt_when_the_store_changes(cam, tmp_path):
    """`dpt cache` builds ahead of a run; the run's dataset then opens in < 1 s with no rebuild; a rewritten store gets a
    new entry; `--list --json` tells them apart and `--clear --stale` removes only the old one."""
    cache = tmp_path / "cache"
    r = dpt("cache", cam, "--cache-dir", cache, "--no-progress", check=0)
    assert "cached head_camera, state, action" in r.stdout
    c = DecodedCache(cam, cache)
    stamp = {f.name: f.stat().st_mtime_ns for f in c.dir.glob("*.npy")}
    assert len(stamp) == 3
    t0 = time.perf_counter()
    again = SequenceDataset(cam, storage="mmap", cache_dir=cache, **KW)
    opened = time.perf_counter() - t0
    assert opened < 1.0, opened
    assert {f.name: f.stat().st_mtime_ns for f in c.dir.glob("*.npy")} == stamp and len(c.manifest()["builds"]) == 1
    assert again.cache.dir == c.dir
    # the store is rewritten (same path): a new identity, a new entry with the new data
    make_sample_store(cam, episodes=8, min_len=30, max_len=60, image_hw=(24, 32), seed=3, overwrite=True)
    new = SequenceDataset(cam, storage="mmap", cache_dir=cache, **KW)
    assert new.cache.dir != c.dir
    np.testing.assert_array_equal(np.asarray(new.cache.open("head_camera")), open_store(cam)["data/head_camera"][:])
    listed = {e["entry"]: e for e in json.loads(dpt("cache", "--list", "--json", "--cache-dir", cache, check=0).stdout)}
    assert {k: e["current"] for k, e in listed.items()} == {c.dir.name: False, new.cache.dir.name: True}
    assert listed[c.dir.name]["store"] == str(Path(cam).resolve()) and listed[c.dir.name]["keys"] == "action,head_camera,state"
    r = dpt("cache", "--clear", "--stale", "--cache-dir", cache, check=0)
    assert "removed" in r.stdout and not c.dir.exists() and new.cache.dir.exists()
    r = dpt("cache", "--cache-dir", cache, check=1)
    assert r.stderr.startswith("dpt: error: dpt cache: give a STORE") and "Traceback" not in r.stderr


_BUILDER = r"""
import sys
from dptoolkit.dataset import DecodedCache
DecodedCache(sys.argv[1], sys.argv[2]).build(["head_camera", "state", "action"], progress=False)
print("built", flush=True)
"""


def test_killed_builder_leaves_nothing_that_is_used(big_cam, tmp_path):
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-c", _BUILDER, str(big_cam), str(cache)])
    c = DecodedCache(big_cam, cache)
    deadline = time.time() + 120
    while not list(c.dir.glob(".*.tmp-*")) and time.time() < deadline and p.poll() is None: time.sleep(0.01)
    p.send_signal(signal.SIGKILL); p.wait()
    assert list(c.dir.glob(".*.tmp-*")), "the builder was killed before it started writing"
    assert not c.has(["head_camera"])                          # a half-written file is never under its final name
    ds = SequenceDataset(big_cam, storage="mmap", cache_dir=cache, **KW)   # the next user rebuilds, and cleans up
    assert not list(c.dir.glob(".*.tmp-*"))
    np.testing.assert_array_equal(np.asarray(ds.cache.open("head_camera")[:500]), open_store(big_cam)["data/head_camera"][:500])


def test_two_runs_race_for_one_cache(cam, tmp_path):
    """Two `dpt train` runs on one store at once (2 ranks each): one builds, the other waits; both train; one entry."""
    cache = tmp_path / "cache"
    args = lambda out: ["dpt", "train", "--config", "test", "--data", str(cam), "--nprocs", "2", "--out", str(out), "--no-progress",
                        "task.dataset.storage=mmap", f"task.dataset.cache_dir={cache}", "training.max_steps=3",
                        "training.log_every=1", "training.checkpoint_every=0", "dataloader.batch_size=8"]
    procs = [subprocess.Popen(args(tmp_path / f"run{i}"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, o in zip(procs, outs): assert p.returncode == 0, o[-3000:]
    entries = [d for d in cache.iterdir() if d.is_dir() and d.name != "stats"]
    assert len(entries) == 1, entries
    assert len(list((cache / "stats").glob("*.json"))) == 1         # the normalizer's statistics: one file, shared
    builds = json.loads((entries[0] / "manifest.json").read_text())["builds"]
    assert sum(len(b["keys"]) for b in builds) == 3, builds    # each key decoded once
    for i in range(2): assert (tmp_path / f"run{i}" / "logs.jsonl").exists()


def test_each_storage_trains_on_the_same_windows(cam, tmp_path):
    """2 ranks, same seed: `chunks` and `mmap` log the very losses of `memory` (same windows, same bytes); `device`
    trains on the same model and data but samples per shard, so its losses differ."""
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log
    from dptoolkit.train import train
    losses = {}
    for storage in ("memory", "chunks", "mmap", "device"):
        cfg = for_store(cam, name="test", overrides=[f"task.dataset.storage={storage}", f"task.dataset.cache_dir={tmp_path / 'cache'}",
                                                     "training.max_steps=4", "training.log_every=1", "training.checkpoint_every=0",
                                                     "dataloader.batch_size=8", "ema.enable=false"])
        run = train(cfg, nprocs=2, run_dir=tmp_path / storage, progress=False)
        head = (tmp_path / storage / "config.yaml").read_text()
        assert f"storage: {storage}" in head
        losses[storage] = read_log(run.run_dir).loss.tolist()
    print(losses)
    assert len(losses["memory"]) == 4
    assert losses["chunks"] == losses["memory"] and losses["mmap"] == losses["memory"]
    assert losses["device"] != losses["memory"] and all(np.isfinite(losses["device"]))
