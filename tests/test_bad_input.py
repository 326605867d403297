"""The bad-input table (issue 16): every row is one test here, and the train chapter's table ("When things go wrong")
lists the same rows with the message each one shows. A row calls the real function (or the real `dpt` command), checks
that exactly one clear error names the culprit, and checks what is left on disk."""
import json, os, signal, subprocess, sys, time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from dptoolkit.config import ConfigError, apply_overrides, for_store, load_config, plan, resolve_devices
from dptoolkit.dataset import SequenceDataset
from dptoolkit.launch import LaunchError, launch
from dptoolkit.merge import MergeError, merge
from dptoolkit.report import ReportError, read_log, summarize
from dptoolkit.store import StoreError, sample_data, validate, verify, write_store
from dptoolkit.checkpoint import TrainError, latest_checkpoint, load_checkpoint, lock_run, unlock_run, write_checkpoint as _write_checkpoint
from dptoolkit.train import train
from conftest import ROOT, dpt

ROWS = {}   # id -> (area, input, the words the message must contain, what is left on disk)


def row(id, area, what, says, left="nothing new"):
    def deco(fn):
        ROWS[id] = (area, what, says, left, fn)
        return fn
    return deco


def files(d):
    return sorted(str(p.relative_to(d)) for p in Path(d).rglob("*")) if Path(d).exists() else []


def raises(exc, says, fn, *a, **kw):
    "Call fn; it must raise exactly `exc` with a one-line message containing `says`. Returns the message."
    with pytest.raises(exc) as e: fn(*a, **kw)
    msg = str(e.value)
    assert says in msg, msg
    assert "Traceback" not in msg
    return msg


@contextmanager
def tmpfs(path, size, ro=False):
    "A small tmpfs the test mounts (root only); skipped with the reason where it cannot."
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""), "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode: pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'needs root'})")
    try: yield path
    finally: subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sample_data(tmp_path_factory.mktemp("s"), tasks=1, episodes=6, seed=3)[0]


@pytest.fixture(scope="module")
def finished(store, tmp_path_factory):
    "A finished 1-rank run of the test config (4 steps, checkpoints at 2 and 4)."
    rd = tmp_path_factory.mktemp("run") / "run"
    cfg = for_store(store, name="test")
    train(cfg, nprocs=1, run_dir=rd, progress=False,
          overrides=["training.max_steps=4", "training.checkpoint_every=2", "training.log_every=2", "training.device=cpu"])
    return rd, cfg


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def _store(tmp, name, data=None, ends=(20, 40, 60)):
    x = np.repeat(np.linspace(-1, 1, 60, dtype=np.float32)[:, None], 3, axis=1)   # smooth: Blosc compresses it
    return Path(write_store(tmp / name, data or {"state": x, "action": x}, list(ends), chunk_steps=20).path)


# ---------------------------------------------------------------- store
@row("S1", "store", "a path that does not exist", "no such file or folder")
def _(tmp):
    raises(StoreError, "no such file or folder", validate, tmp / "nope.zarr")

@row("S2", "store", "a file instead of a store folder", "not a zarr store (a zarr store is a folder, or a zip of one)")
def _(tmp):
    (tmp / "x.zarr").write_text("hi")
    raises(StoreError, "not a zarr store (a zarr store is a folder, or a zip of one)", validate, tmp / "x.zarr")

@row("S3", "store", "an object (pickled) array in data/", "refusing to load it because decoding it could run arbitrary code")
def _(tmp):
    p = _store(tmp, "p.zarr")
    (p / "data" / "obj").mkdir()
    (p / "data" / "obj" / ".zarray").write_text(json.dumps(dict(zarr_format=2, shape=[60], chunks=[60], dtype="|O",
        compressor=None, fill_value=0, filters=[{"id": "pickle"}], order="C")))
    raises(StoreError, "refusing to load it because decoding it could run arbitrary code", validate, p)

@row("S4", "store", "an empty store (0 episodes)", "meta/episode_ends is empty (no episodes)")
def _(tmp):
    g = zarr.open_group(str(tmp / "e.zarr"), mode="w", zarr_format=2)
    g.create_array("data/state", shape=(0, 3), dtype="f4"); g.create_array("data/action", shape=(0, 3), dtype="f4")
    g.create_array("meta/episode_ends", shape=(0,), dtype="i8")
    raises(StoreError, "meta/episode_ends is empty (no episodes)", validate, tmp / "e.zarr")

@row("S5", "store", "episode_ends that go backwards", "meta/episode_ends not strictly increasing at index 1: 40 then 30")
def _(tmp):
    p = _store(tmp, "b.zarr")
    zarr.open_array(str(p / "meta" / "episode_ends"), mode="r+")[:] = [40, 30, 60]
    raises(StoreError, "not strictly increasing at index 1: 40 then 30", validate, p)

@row("S6", "store", "`.zarray` with a wrong shape (data/state says 80 steps)", "data arrays have different lengths along time: data/action=60, data/state=80")
def _(tmp):
    p = _store(tmp, "z.zarr")
    meta = json.loads((p / "data/state/.zarray").read_text()); meta["shape"][0] = 80
    (p / "data/state/.zarray").write_text(json.dumps(meta))
    raises(StoreError, "different lengths along time: data/action=60, data/state=80", validate, p)

@row("S7", "store", "a damaged chunk (20 bytes zeroed in data/state/0.0); `verify`", "1 damaged chunk(s): data/state chunk (0, 0): …/data/state/0.0: RuntimeError: error during blosc decompression")
def _(tmp):
    p = _store(tmp, "d.zarr")
    f = p / "data/state/0.0"; raw = bytearray(f.read_bytes()); raw[16:36] = bytes(20); f.write_bytes(bytes(raw))
    validate(p)                                                   # metadata alone cannot see it
    msg = raises(StoreError, "1 damaged chunk(s)", verify, p, progress=False)
    assert f"data/state chunk (0, 0): {f}" in msg and "blosc" in msg

@row("S8", "store", "a truncated chunk file; `verify`", "data/action chunk (1, 0): …/data/action/1.0: … (the codec's complaint)")
def _(tmp):
    p = _store(tmp, "t.zarr")
    f = p / "data/action/1.0"; f.write_bytes(f.read_bytes()[:30])
    msg = raises(StoreError, f"data/action chunk (1, 0): {f}:", verify, p, progress=False)
    assert "1 damaged chunk(s)" in msg

@row("S9", "store", "a missing chunk file (zarr would read zeros); `verify` and training", "data/state chunk 2 (…/data/state/2.0) is missing; zarr would read it as zeros")
def _(tmp):
    p = _store(tmp, "m.zarr")
    (p / "data/state/2.0").unlink()
    assert "data/state/2.0 is missing (zarr would read it as 0.0)" in raises(StoreError, "1 damaged chunk(s)", verify, p, progress=False)
    raises(StoreError, f"data/state chunk 2 ({p}/data/state/2.0) is missing; zarr would read it as zeros",
           SequenceDataset, p, horizon=4)

@row("S10", "store", "NaN inside data/action; the dataset opens", "data/action holds nan at row 45 (episode 2, column 1)")
def _(tmp):
    x = np.random.default_rng(0).standard_normal((60, 3)).astype(np.float32); a = x.copy(); a[45, 1] = np.nan
    p = _store(tmp, "n.zarr", {"state": x, "action": a})
    raises(StoreError, "data/action holds nan at row 45 (episode 2, column 1)", SequenceDataset, p, horizon=4)

@row("S11", "store", "every episode shorter than a window (horizon 16, pads 0)", "no episode is long enough for a window: windows need at least 16 steps")
def _(tmp):
    p = _store(tmp, "s.zarr", ends=(10, 20, 30, 40, 50, 60))
    msg = raises(StoreError, "no episode is long enough for a window: windows need at least 16 steps", SequenceDataset, p, horizon=16)
    assert "the longest of the 6 episode(s) has 10" in msg
    assert SequenceDataset(p, horizon=16, pad_before=2, pad_after=5).skipped == 0   # with RoboTwin's pads they fit

@row("S12", "store", "some episodes shorter than a window", "(works: skipped and counted: '1 short episode(s) skipped', the banner says '1 episodes shorter than a window skipped')")
def _(tmp):
    p = _store(tmp, "s2.zarr", ends=(5, 30, 60))
    ds = SequenceDataset(p, horizon=8)
    assert ds.skipped == 1 and "1 short episode(s) skipped" in repr(ds) and len(ds) == (25 - 7) + (30 - 7)


# ---------------------------------------------------------------- merge
@row("M1", "merge", "the destination is one of the sources", "the destination is a source; write the merge elsewhere")
def _(tmp):
    a, b = sample_data(tmp / "t", tasks=2, episodes=2)
    raises(MergeError, "the destination is a source", merge, [a, b], a, progress=False)

@row("M2", "merge", "sources with different data keys", "data keys ['action', 'state', 'x'] differ from ['action', 'state'] … pass keys= (--keys)")
def _(tmp):
    a = _store(tmp, "a.zarr")
    x = np.zeros((60, 3), np.float32); b = _store(tmp, "b.zarr", {"state": x, "action": x, "x": x})
    raises(MergeError, "pass keys= (--keys) to merge the keys all sources share: action,state", merge, [a, b], tmp / "o.zarr", progress=False)
    assert not (tmp / "o.zarr").exists()

@row("M3", "merge", "14-dim and 16-dim sources", "data/action has shape (*, 16), expected (*, 14)")
def _(tmp):
    a = sample_data(tmp / "a", tasks=1, episodes=2)[0]; b = sample_data(tmp / "b", tasks=1, episodes=2, dim=16)[0]
    raises(MergeError, "data/action has shape (*, 16), expected (*, 14)", merge, [a, b], tmp / "o.zarr", progress=False)
    assert not (tmp / "o.zarr").exists()

@row("M4", "merge", "a destination that exists", "already exists; pass overwrite=True (--overwrite) to replace it", "the old destination, untouched")
def _(tmp):
    a, b = sample_data(tmp / "t", tasks=2, episodes=2)
    (tmp / "o.zarr").mkdir(); (tmp / "o.zarr" / "keep").write_text("x")
    raises(MergeError, "already exists; pass overwrite=True", merge, [a, b], tmp / "o.zarr", progress=False)
    assert files(tmp / "o.zarr") == ["keep"]

@row("M5", "merge", "a damaged chunk in a source", "…/b.zarr: data/state chunk 0 (…/b.zarr/data/state/0.0) cannot be decoded")
def _(tmp):
    a = _store(tmp, "a.zarr"); b = _store(tmp, "b.zarr")
    f = b / "data/state/0.0"; raw = bytearray(f.read_bytes()); raw[16:36] = bytes(20); f.write_bytes(bytes(raw))
    raises(MergeError, f"{b}: data/state chunk 0 ({f}) cannot be decoded", merge, [a, b], tmp / "o.zarr", progress=False)
    assert not (tmp / "o.zarr").exists() and not list(tmp.glob(".o.zarr*"))

@row("M6", "merge", "a destination disk without the space (tmpfs 64 KB)", "not enough disk space: the merge needs about … KB, … KB are free in …")
def _(tmp):
    srcs = sample_data(tmp / "t", tasks=3, episodes=6)
    with tmpfs(tmp / "small", "64k") as d:
        raises(MergeError, "not enough disk space: the merge needs about", merge, srcs, d / "o.zarr", progress=False)
        assert files(d) == []

@row("M7", "merge", "the disk fills up during the merge", "the disk filled up while merging (about … needed, … free in …); nothing was written")
def _(tmp):
    srcs = sample_data(tmp / "t", tasks=3, episodes=6)
    need = sum(f.stat().st_size for s in srcs for f in (s / "data").rglob("*") if f.is_file())
    # enough for the estimate, not for tmpfs's 4 KB pages per chunk file: the write itself runs out
    with tmpfs(tmp / "small", f"{(need * 105 // 100) // 4096 * 4096 + 8192}") as d:
        raises(MergeError, "the disk filled up while merging", merge, srcs, d / "o.zarr", progress=False)
        assert files(d) == []

@row("M8", "merge", "`dpt merge --pad` of a camera key", "data/head_camera has shape (*, 3, 24, 32); only a vector per step (*, n) can be zero-padded")
def _(tmp):
    a, b = (sample_data(tmp / n, tasks=1, episodes=2, image=True, seed=i)[0] for i, n in enumerate("ab"))
    r = dpt("merge", a, b, "-o", tmp / "o.zarr", "--pad", "head_camera", "--no-progress")
    assert r.returncode == 1 and "only a vector per step (*, n) can be zero-padded" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp / "o.zarr").exists()
    w = sample_data(tmp / "w", tasks=1, episodes=2, dim=16)[0]        # the same command on a vector: merged
    dpt("merge", a, w, "-o", tmp / "p.zarr", "--keys", "state,action", "--pad", "state,action", "--no-progress", check=0)
    assert zarr.open_group(str(tmp / "p.zarr"), mode="r")["data/state"].shape[1] == 16


# ---------------------------------------------------------------- config
@row("C1", "config", "an override with a misspelt key (`training.max_step=5`)", "unknown config key 'training.max_step'; did you mean training.max_steps?")
def _(tmp):
    raises(ConfigError, "unknown config key 'training.max_step'; did you mean training.max_steps", load_config, "test", ["training.max_step=5"])

@row("C2", "config", "an override of the wrong type (`dataloader.batch_size=big`)", "dataloader.batch_size expects int")
def _(tmp):
    raises(ConfigError, "dataloader.batch_size expects int", load_config, "test", ["dataloader.batch_size=big"])

@row("C3", "config", "a packaged config that does not exist", "no packaged config 'robot_dp_15'; packaged: robot_dp_10, robot_dp_14, robot_dp_16, test")
def _(tmp):
    raises(ConfigError, "no packaged config 'robot_dp_15'", load_config, "robot_dp_15")

@row("C4", "config", "a malformed view override (`task.dataset.views.agent_pos=state[2:`)", "task.dataset.views.agent_pos='state[2:': not a view; expected KEY, KEY[a:b] (values a to b of a vector) or KEY+KEY (vectors joined), e.g. state[0:2]")
def _(tmp):
    raises(ConfigError, "task.dataset.views.agent_pos='state[2:': not a view; expected KEY, KEY[a:b]", load_config,
           "pusht_keypoint", ["task.dataset.views.agent_pos=state[2:"])

@row("C5", "config", "a global batch that does not split over the ranks (batch 10 on 4)", "global batch 10 is not divisible by world size 4")
def _(tmp):
    raises(ConfigError, "global batch 10 is not divisible by world size 4", plan, load_config("test", ["dataloader.batch_size=10"]), 4)

@row("C6", "config", "a log interval of 0 (`training.log_every=0`)", "training.log_every=0: must be at least 1")
def _(tmp, store):
    raises(ConfigError, "training.log_every=0: must be at least 1", load_config, "test", ["training.log_every=0"])
    raises(ConfigError, "training.log_every=0: must be at least 1", train, for_store(store, name="test"), nprocs=1,
           run_dir=tmp / "r", progress=False, overrides=["training.log_every=0"])
    assert not (tmp / "r").exists()

@row("C7", "config", "a negative learning rate (`optimizer.lr=-1`)", "optimizer.lr=-1: must be greater than 0")
def _(tmp):
    raises(ConfigError, "optimizer.lr=-1: must be greater than 0", load_config, "test", ["optimizer.lr=-1"])

@row("C8", "config", "a negative step count (`training.max_steps=-5`)", "training.max_steps=-5: must be at least 1 (or null)")
def _(tmp):
    raises(ConfigError, "training.max_steps=-5: must be at least 1 (or null)", load_config, "test", ["training.max_steps=-5"])

@row("C9", "config", "an out-of-range value in a YAML file (`ema.max_value: 1.5`)", "ema.max_value=1.5: must be in (0, 1]")
def _(tmp):
    text = (ROOT / "dptoolkit/configs/test.yaml").read_text().replace("max_value: 0.9999", "max_value: 1.5")
    (tmp / "c.yaml").write_text(text)
    raises(ConfigError, "ema.max_value=1.5: must be in (0, 1]", load_config, tmp / "c.yaml")

@row("C10", "config", "a value edited in a notebook after loading (`cfg.optimizer.betas = [0.9, 1.2]`)", "optimizer.betas[1]=1.2: must be in [0, 1)")
def _(tmp, store):
    cfg = for_store(store, name="test"); cfg.optimizer.betas = [0.9, 1.2]
    raises(ConfigError, "optimizer.betas[1]=1.2: must be in [0, 1)", train, cfg, nprocs=1, run_dir=tmp / "r", progress=False)
    assert not (tmp / "r").exists()

@row("C11", "config", "a misspelt choice (`training.lr_scheduler=cosin`) or signal (`training.stop_signals=[SIGTREM]`)", "training.lr_scheduler='cosin': expected one of cosine, linear")
def _(tmp):
    raises(ConfigError, "training.lr_scheduler='cosin': expected one of cosine, linear", load_config, "test", ["training.lr_scheduler=cosin"])
    raises(ConfigError, "training.stop_signals: 'SIGTREM' is not a signal name", load_config, "test", ["training.stop_signals=[SIGTREM]"])


# ---------------------------------------------------------------- train
def _cfg(store, **kw):
    return for_store(store, name="test", overrides=["training.device=cpu", "training.max_steps=4", "training.log_every=2",
                                                     *[f"{k}={v}" for k, v in kw.items()]])

@row("T1", "train", "a run folder on a read-only file system", "cannot create the run folder or write in it (… is read-only)")
def _(tmp, store):
    with tmpfs(tmp / "ro", "1m", ro=True) as d:
        raises(TrainError, "cannot create the run folder or write in it", train, _cfg(store), nprocs=1, run_dir=d / "run", progress=False)
        assert files(d) == []

@row("T2", "train", "a second run into a folder another run is training into", "another run is training into this folder now (pid … on …)", "the first run, untouched")
def _(tmp, store):
    rd = tmp / "busy"
    lock_run(rd)                                                 # what rank 0 of a live run holds
    try: raises(TrainError, f"pid {os.getpid()} on", train, _cfg(store), nprocs=1, run_dir=rd, progress=False)
    finally: unlock_run(rd)
    assert files(rd) == [".lock"]

@row("T3", "train", "a folder that holds a finished run, without resume", "already holds a run (logs.jsonl); pass resume (--resume)", "the old run, untouched")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r"); before = files(rd)
    raises(Exception, "already holds a run (logs.jsonl); pass resume (--resume)", train, finished[1], nprocs=1, run_dir=rd,
           progress=False, overrides=["training.device=cpu"])
    assert files(rd) == before

@row("T4", "train", "resume with a different model (`policy.down_dims=[16,32]`)", "…/model.safetensors: model.mid_modules.0.blocks.0.block.0.weight has shape [64, 64, 5], this model expects [32, 32, 5]", "the old run, untouched")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r"); before = files(rd)
    msg = raises(Exception, "model.mid_modules.0.blocks.0.block.0.weight has shape [64, 64, 5], this model expects [32, 32, 5]", train, finished[1], nprocs=1, run_dir=rd, resume=True,
                 progress=False, overrides=["training.device=cpu", "policy.down_dims=[16,32]", "training.max_steps=8"])
    assert "model.safetensors" in msg
    assert files(rd) == before

@row("T5", "train", "resume where no checkpoint exists", "no checkpoint to resume from (no 'latest' file)")
def _(tmp, store):
    raises(Exception, "no checkpoint to resume from", train, _cfg(store), nprocs=1, run_dir=tmp / "new", resume=True, progress=False)

@row("T6", "train", "a corrupt checkpoint file (truncated model.safetensors)", "model.safetensors: cannot be read (…); the checkpoint is corrupt")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r")
    f = latest_checkpoint(rd) / "model.safetensors"; f.write_bytes(f.read_bytes()[:100])
    raises(TrainError, "the checkpoint is corrupt", load_checkpoint, latest_checkpoint(rd))

@row("T7", "train", "the disk fills up while a checkpoint is written (tmpfs)", "the disk is full: checkpoint step_000002 needs about … MB, … MB are free; nothing was written; step_000001 is still 'latest'", "the previous checkpoint, still 'latest' and loadable")
def _(tmp):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))   # 0.5 MB of weights
    with tmpfs(tmp / "small", "1200k") as d:
        _write_checkpoint(d, 1, model, None, {"step": 1}, keep=5)
        raises(TrainError, "the disk is full: checkpoint step_000002 needs about", _write_checkpoint, d, 2, model, None,
               {"step": 2, "optimizer": {k: v.clone() for k, v in model.state_dict().items()}}, keep=5)
        assert (d / "checkpoints/latest").read_text() == "step_000001"
        assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["latest", "step_000001"]   # no temp folder
        ck = load_checkpoint(latest_checkpoint(d))
        assert torch.equal(ck["model"]["0.weight"], model[0].weight.detach())

@row("T8", "train", "a batch larger than the training windows", "give no full step of 4096 × accum 1; lower dataloader.batch_size")
def _(tmp, store):
    raises(Exception, "give no full step of 4096 × accum 1", train, _cfg(store, **{"dataloader.batch_size": 4096}), nprocs=1,
           run_dir=tmp / "r", progress=False)

@row("T9", "train", "a diverging loss (`optimizer.lr=1e6`)", "TrainError: step 25: loss is nan … step_000020, stays 'latest'", "good checkpoints only; 'latest' loads with finite weights")
def _(tmp):
    pytest.skip("tested end to end by tests/test_trust.py::test_diverging_run_stops_and_keeps_the_last_good_checkpoint")

@row("T10", "train", "`--resume` with `training.max_steps` below the run's step (4 → 2)", "the run is already at step 4 (checkpoints/step_000004), past training.max_steps=2; set training.max_steps above 4", "the old run, untouched")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r"); before = files(rd)
    for steps, says in ((2, "past training.max_steps=2; set training.max_steps above 4"), (4, "at training.max_steps=4")):
        raises(TrainError, says, train, finished[1], nprocs=1, run_dir=rd, resume=True, progress=False,
               overrides=["training.device=cpu", f"training.max_steps={steps}"])
    assert files(rd) == before
    # resume=auto (a requeued Slurm job) on a finished run: nothing to train, the run's own result, no process started
    res = train(finished[1], nprocs=1, run_dir=rd, resume="auto", progress=False, overrides=["training.device=cpu", "training.max_steps=4"])
    assert res.metrics["steps"] == 4 and files(rd) == before

@row("T11", "train", "`train(cfg, nprocs=0)` in a notebook", "nprocs=0: must be an integer ≥ 1")
def _(tmp, store):
    raises(TrainError, "nprocs=0: must be an integer ≥ 1", train, _cfg(store), nprocs=0, run_dir=tmp / "r", progress=False)


# ---------------------------------------------------------------- launch
@row("L1", "launch", "`nprocs=0`", "nprocs=0: must be at least 1")
def _(tmp):
    raises(LaunchError, "nprocs=0: must be at least 1", launch, print, nprocs=0)

@row("L2", "launch", "GPU ids on a machine without a GPU (`--gpus 0,1`)", "gpu_ids=[0, 1] asked for, but no CUDA GPU is visible")
def _(tmp):
    raises(ConfigError, "gpu_ids=[0, 1] asked for, but no CUDA GPU is visible", resolve_devices, gpu_ids="0,1", visible=0)

@row("L3", "launch", "a function that cannot be sent to the ranks (it holds a lock)", "cannot send '<lambda>' to the ranks: TypeError: cannot pickle '_thread.lock' object")
def _(tmp):
    import threading
    lock = threading.Lock()
    raises(LaunchError, "cannot send '<lambda>' to the ranks: TypeError: cannot pickle '_thread.lock' object", launch, lambda: lock, nprocs=1)


# ---------------------------------------------------------------- report
@row("R1", "report", "a folder that is not a run", "no logs.jsonl (is this a run folder?)")
def _(tmp):
    raises(ReportError, "no logs.jsonl (is this a run folder?)", read_log, tmp)

@row("R2", "report", "a log with a damaged line (not the last: a live run's torn last line is skipped)", "line 2 is not JSON")
def _(tmp):
    (tmp / "logs.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo\n{"step": 3, "loss": 0.9}\n{"step": 4, "lo')
    raises(ReportError, "line 2 is not JSON", read_log, tmp)
    (tmp / "logs.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    assert list(read_log(tmp)["step"]) == [1]


# ---------------------------------------------------------------- CLI (the real command: one line, exit 1, no traceback)
def _cli(*args, says, code=1):
    r = dpt(*args)
    lines = [l for l in r.stderr.splitlines() if l.startswith("dpt: error")]
    assert r.returncode == code and len(lines) == 1 and says in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return r

@row("X1", "CLI", "`dpt train --data missing.zarr`", "dpt: error: …/missing.zarr: no such file or folder")
def _(tmp):
    _cli("train", "--data", tmp / "missing.zarr", "--out", tmp / "r", says="missing.zarr: no such file or folder")
    assert not (tmp / "r").exists()

@row("X2", "CLI", "two `dpt train` into the same run folder at once", "dpt: error: …/r: another run is training into this folder now (pid … on …)", "the first run, which goes on")
def _(tmp, store):
    rd = tmp / "r"
    first = subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(store), "--out", str(rd), "--nprocs", "1",
                              "--no-progress", "training.max_steps=100000", "training.checkpoint_every=0", "training.log_every=5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                             start_new_session=True)
    try:
        t0 = time.time()
        while not ((rd / ".lock").exists() and (rd / ".lock").read_text()):   # rank 0 holds the folder
            assert first.poll() is None and time.time() - t0 < 120, first.communicate()
            time.sleep(0.2)
        # paused while the second one tries (SIGSTOP: alive, holding the folder, not burning a core the other test file
        # needs; what is checked is the lock, not the first run's steps)
        os.killpg(first.pid, signal.SIGSTOP)
        _cli("train", "--config", "test", "--data", store, "--out", rd, "--nprocs", 1, "--resume", says="another run is training into this folder now")
        assert first.poll() is None                               # the first run is untouched
    finally:
        _signal_group(first, signal.SIGCONT)
        first.terminate(); first.wait(60)

@row("X3", "CLI", "`dpt inspect --verify` on a store with a damaged chunk", "dpt: error: …: 1 damaged chunk(s): data/state chunk (0, 0): …/data/state/0.0: …")
def _(tmp):
    p = _store(tmp, "d.zarr")
    f = p / "data/state/0.0"; raw = bytearray(f.read_bytes()); raw[16:36] = bytes(20); f.write_bytes(bytes(raw))
    r = dpt("inspect", p, "--verify")
    assert r.returncode == 1 and "1 damaged chunk(s)" in r.stderr and f"{f}" in r.stderr and "Traceback" not in r.stderr

@row("X4", "CLI", "a misspelt override on the command line", "dpt: error: override 'training.max_step=5': unknown config key")
def _(tmp, store):
    _cli("train", "--config", "test", "--data", store, "--out", tmp / "r", "training.max_step=5", says="unknown config key 'training.max_step'")
    assert not (tmp / "r").exists()

@row("X5", "CLI", "`dpt train --nprocs 0`", "dpt: error: argument --nprocs: 0 is not a count ≥ 1")
def _(tmp, store):
    _cli("train", "--data", store, "--out", tmp / "r", "--nprocs", 0, says="argument --nprocs: 0 is not a count ≥ 1", code=2)
    assert not (tmp / "r").exists()

@row("X6", "CLI", "`dpt train --resume training.max_steps=2` on a run at step 4", "dpt: error: …: resume: the run is already at step 4", "the old run, untouched")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r"); before = files(rd)
    _cli("train", "--config", "test", "--data", finished[1].task.dataset.zarr_path, "--out", rd, "--nprocs", 1, "--resume",
         "training.max_steps=2", "training.device=cpu", says="resume: the run is already at step 4")
    assert files(rd) == before


@pytest.fixture(scope="module")
def camstore(tmp_path_factory):
    from dptoolkit.store import make_sample_store
    p = tmp_path_factory.mktemp("cam") / "cam.zarr"
    make_sample_store(p, episodes=6, min_len=60, max_len=90, image_hw=(96, 128), seed=1)   # ~15 MB decoded
    return p

@row("D1", "data", "`storage: mmap` with a cache folder on a disk without the space (tmpfs 2 MB)", "the decoded cache of cam.zarr (head_camera, state, action) needs … MB but only … MB is free there")
def _(tmp, camstore):
    from dptoolkit.dataset import CacheError
    with tmpfs(tmp / "small", "2m") as d:
        msg = raises(CacheError, "needs", SequenceDataset, camstore, keys=["head_camera", "state"], storage="mmap", cache_dir=d)
        assert "(head_camera, state, action) needs" in msg and "but only" in msg and "is free there" in msg and str(d) in msg
        assert [f for f in files(d) if f.endswith(".npy") or ".tmp-" in f] == []

@row("D2", "data", "`dpt cache` into a read-only folder", "dpt: error: …: the cache folder is not writable")
def _(tmp, camstore):
    with tmpfs(tmp / "ro", "1m", ro=True) as d:
        r = dpt("cache", camstore, "--cache-dir", d / "c", "--no-progress")
        assert r.returncode == 1 and r.stderr.startswith("dpt: error: ") and "the cache folder is not writable" in r.stderr
        assert "Traceback" not in r.stderr and files(d) == []

@row("D3", "data", "`storage: device` with a shard bigger than the device's free memory allows", "rank 0's shard (… of … episodes over 1 ranks) needs … on cpu, over 50% of its … free")
def _(tmp, camstore):
    from dptoolkit.dataset import DataError
    import dptoolkit.dataset as D
    ds = SequenceDataset(camstore, keys=["head_camera", "state"], storage="device")
    real, D._free_bytes = D._free_bytes, lambda device: 1 << 20        # a device with 1 MB free
    try: raises(DataError, "rank 0's shard (6 of 6 episodes over 1 ranks) needs", ds.shard, 0, 1, "cpu")
    finally: D._free_bytes = real

@row("D4", "data", "an unknown storage (`task.dataset.storage=ram`)", "task.dataset.storage='ram': expected one of auto, mmap, memory, chunks, device")
def _(tmp, store):
    raises(ConfigError, "task.dataset.storage='ram': expected one of auto, mmap, memory, chunks, device", load_config, "test", ["task.dataset.storage=ram"])


# issue 39: accidents a new user met; each ends in one line naming the cause, and a suggested command is run here
def _signal_group(p, *sigs):
    "Send `sigs` to the process group of `p` (started in a session of its own), if it is still there."
    for sig in sigs:
        try: os.killpg(p.pid, sig)
        except ProcessLookupError: pass

def _start(args, env=None):
    return subprocess.Popen(["dpt", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **(env or {})})

def _wait_for(pred, proc, limit=120):
    t0 = time.time()
    while not pred():
        assert proc.poll() is None and time.time() - t0 < limit, proc.communicate()[0][-3000:]
        time.sleep(0.05)

def _logged(rd, n):
    try: return sum(1 for _ in open(rd / "logs.jsonl")) >= n
    except OSError: return False

def _records(rd) -> list:
    "The complete records of a run's logs.jsonl as it is being written (a last line still being written is skipped)."
    return [json.loads(l) for l in open(rd / "logs.jsonl") if l.endswith("\n")]

LONG = ["--no-progress", "training.max_steps=100000", "training.log_every=5", "training.checkpoint_every=100000"]

def _signal_run(tmp, store, sig, after):
    "A long `dpt train` sent `sig` to its whole process group after `after` logged steps → (run, process, output)."
    rd = tmp / "r"
    p = _start(["train", "--config", "test", "--data", store, "--out", rd, *LONG])
    _wait_for(lambda: _logged(rd, after), p)
    os.killpg(p.pid, sig)
    return rd, p, p.communicate(timeout=120)[0]

@row("T12", "train", "a run killed (SIGKILL) before its first checkpoint, then `--resume`", "resume: … has no checkpoint (its run stopped before the first one): starting from step 0")
def _(tmp, store):
    import signal
    rd = tmp / "r"
    p = _start(["train", "--config", "test", "--data", store, "--out", rd, *LONG])
    _wait_for(lambda: _logged(rd, 3), p)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    assert not (rd / "checkpoints").exists()
    r = dpt("train", "--config", "test", "--data", store, "--out", rd, "--resume", "--no-progress", "training.max_steps=10",
            "training.log_every=5", check=0)                       # the command both messages name works
    assert "has no checkpoint (its run stopped before the first one): starting from step 0" in r.stdout
    assert read_log(rd).step.tolist() == [5, 10] and (rd / "logs.before-restart.jsonl").exists()

@row("T13", "train", "Ctrl-C in a terminal (SIGINT to the whole process group) while it trains", "stopped by SIGINT at step …: checkpoint …/step_…; resume with training.resume=auto (dpt train --resume); then `dpt train: stopped by SIGINT at step … with a checkpoint; continue with: dpt train … --resume` and exit 130 (the work did not complete)", "a checkpoint at the stop step; the run resumes from it")
def _(tmp, store):
    import signal
    rd, p, out = _signal_run(tmp, store, signal.SIGINT, after=3)
    assert p.returncode == 130 and "stopped by SIGINT at step" in out, out[-2000:]
    again = out.split("continue with: ")[1].strip().splitlines()[0]
    assert again.startswith("dpt train") and again.endswith("--resume") and f"--out {rd}" in again, again
    at = int((rd / "checkpoints/latest").read_text().split("_")[1])
    assert json.loads((rd / "result.json").read_text())["stopped_by"] == "SIGINT"
    r = dpt("train", "--config", "test", "--data", store, "--out", rd, "--resume", "--no-progress",
            f"training.max_steps={at + 5}", "training.log_every=5", check=0)
    assert read_log(rd).step.iloc[-1] == at + 5

@row("T14", "train", "`--resume` with `--data` of another dimension (16 for a 14-dim run)", "resume: the run was trained on … (action [14], state [14]); … has action [16], state [16]; resume with --data …", "the old run, untouched")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r"); before = files(rd)
    other = sample_data(tmp / "d16", tasks=1, episodes=3, dim=16)[0]
    _cli("train", "--data", other, "--out", rd, "--resume", "--nprocs", 1, "training.device=cpu",
         says="(action [14], state [14]); " + str(other) + " has action [16], state [16]; resume with --data")
    assert files(rd) == before

@row("T15", "train", "a checkpoint write killed half-way (`.step_N.tmp` left), then resume", "(works: the next checkpoint removes the leftover; the steps replayed after the resume are logged once)")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r")
    (rd / "checkpoints/.step_000005.tmp").mkdir()
    with open(rd / "logs.jsonl", "a") as f: f.write(json.dumps(dict(step=5, loss=1.0)) + "\n")   # logged, not saved
    train(finished[1], nprocs=1, run_dir=rd, resume=True, progress=False,
          overrides=["training.max_steps=6", "training.log_every=1", "training.device=cpu"])
    steps = [json.loads(l)["step"] for l in open(rd / "logs.jsonl")]
    assert steps.count(5) == 1 and not list((rd / "checkpoints").glob(".step_*.tmp"))

@row("T16", "train", "two runs started at the same moment into one `--out`", "dpt: error: …: another run is training into this folder now (pid … on …) — said by the launching process, before any rank starts", "the first run, which goes on")
def _(tmp, store):
    import signal
    rd = tmp / "r"
    a, b = (_start(["train", "--config", "test", "--data", store, "--out", rd, *LONG]) for _ in range(2))
    t0 = time.time()
    while a.poll() is None and b.poll() is None and time.time() - t0 < 180: time.sleep(0.05)
    loser, first = (a, b) if a.poll() is not None else (b, a)
    out = loser.communicate()[0]
    assert loser.returncode == 1 and "another run is training into this folder now" in out and "[rank" not in out, out
    _wait_for(lambda: _logged(rd, 1), first)                 # the first run goes on: it trains and logs
    os.killpg(first.pid, signal.SIGINT)                      # then stops cleanly (row T13), rather than run 40 steps
    rest = first.communicate(timeout=120)[0]
    assert first.returncode == 130 and "stopped by SIGINT" in rest, rest[-2000:]

@row("T17", "train", "a truncated checkpoint file; the message and the way out", "model.safetensors: cannot be read (…); the checkpoint is corrupt; the run also keeps step_000002: write one of them into …/latest to resume from it")
def _(tmp, finished):
    rd = _copy(finished[0], tmp / "r")
    f = latest_checkpoint(rd) / "model.safetensors"; f.write_bytes(f.read_bytes()[:100])
    msg = raises(TrainError, "the run also keeps step_000002: write one of them into", load_checkpoint, latest_checkpoint(rd))
    inner = msg[msg.index("cannot be read (") + 16:msg.index("); the checkpoint")]
    assert inner.endswith(("…", ")")) or " " not in inner[-3:], inner            # never cut mid-word
    (rd / "checkpoints/latest").write_text("step_000002")                      # the way out it names
    train(finished[1], nprocs=1, run_dir=rd, resume=True, progress=False, overrides=["training.max_steps=3", "training.device=cpu"])
    assert read_log(rd).step.iloc[-1] == 3

@row("D5", "data", "a decoded-cache file truncated under a running run (`storage: mmap`)", "rank 0 died of SIGBUS reading …/head_camera.npy: it is … bytes, the cache built it with … (dpt cache …)", "`dpt cache --list` says 'damaged (head_camera)'; `dpt cache STORE` rebuilds it and says so")
def _(tmp, camstore):
    rd, c = tmp / "r", tmp / "c"
    p = _start(["train", "--config", "test", "--data", camstore, "--out", rd, *LONG, "task.dataset.storage=mmap",
                f"task.dataset.cache_dir={c}", "task.dataset.obs_keys=[head_camera,state]"])
    _wait_for(lambda: _logged(rd, 2), p)
    f = next(c.glob("*/head_camera.npy"))
    os.truncate(f, 4096)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 1 and f"rank 0 died of SIGBUS reading {f}: it is 4096 bytes" in out, out[-2000:]
    assert "damaged (head_camera)" in dpt("cache", "--list", "--cache-dir", c, check=0).stdout
    r = dpt("cache", camstore, "--cache-dir", c, "--no-progress", check=0)        # the command the line names
    assert "rebuilding it" in r.stdout and "current" in dpt("cache", "--list", "--cache-dir", c, check=0).stdout

@row("X7", "CLI", "`dpt export` to a full disk (tmpfs 64 KB)", "dpt: error: …/m.ckpt: no space left on the disk: the checkpoint needs about … MB, … MB are free in …; nothing was written")
def _(tmp, finished):
    with tmpfs(tmp / "small", "64k") as d:
        _cli("export", finished[0], "-o", d / "m.ckpt", says="m.ckpt: no space left on the disk: the checkpoint needs about")
        assert files(d) == []

@row("C12", "config", "a misspelt key in a YAML config file (`--config my.yaml` with `trainig:`)", "dpt: error: …/my.yaml: unknown config key 'trainig'; did you mean 'training'?")
def _(tmp, store):
    (tmp / "my.yaml").write_text("name: test\ntrainig:\n  max_steps: 3\n")
    _cli("train", "--config", tmp / "my.yaml", "--data", store, "--out", tmp / "r",
         says="my.yaml: unknown config key 'trainig'; did you mean 'training'?")
    (tmp / "my.yaml").write_text("name: test\ntraining:\n  max_steps: 3\n")                 # the fix: the file's own keys
    dpt("train", "--config", tmp / "my.yaml", "--data", store, "--out", tmp / "r", "--no-progress", check=0)

@row("S13", "store", "NaN inside data/action; `dpt inspect --verify`", "data/action chunk (…): 1 non-finite value(s), the first nan at row 45 (episode 2, column 1)")
def _(tmp):
    p = _store(tmp, "nan.zarr")
    a = zarr.open_array(str(p / "data/action"), mode="r+"); a[45, 1] = np.nan
    r = dpt("inspect", p, "--verify")
    assert r.returncode == 1 and "1 non-finite value(s), the first nan at row 45 (episode 2, column 1)" in r.stderr, r.stderr

@row("S14", "store", "a merge killed half-way, then `dpt inspect` of its destination", "…/.ab.zarr.dpt-tmp (… MB) was left by a merge or conversion into ab.zarr that did not finish; running it again replaces it")
def _(tmp):
    (tmp / ".ab.zarr.dpt-tmp" / "data").mkdir(parents=True)
    r = dpt("inspect", tmp / "ab.zarr")
    assert r.returncode == 1 and "was left by a merge or conversion into ab.zarr that did not finish" in r.stderr

@row("X8", "CLI", "`dpt inspect STORE | head` (the reader goes away)", "(no error: exit 141, nothing on stderr)")
def _(tmp, store):
    r = subprocess.run(f"dpt inspect {store} | head -1", shell=True, capture_output=True, text=True, executable="/bin/bash")
    assert r.stdout.count("\n") == 1 and "BrokenPipeError" not in r.stderr and r.stderr == ""

@row("X9", "CLI", "`dpt eval` on a run without a checkpoint", "dpt: error: …: no checkpoint to evaluate yet (checkpoints/latest is missing)")
def _(tmp, finished):
    rd = tmp / "r"; rd.mkdir(); (rd / "config.yaml").write_text((finished[0] / "config.yaml").read_text())
    _cli("eval", rd, says="no checkpoint to evaluate yet (checkpoints/latest is missing)")

@row("X10", "CLI", "`dpt sample-data --image`: what the help says", "(fixed: the help says 3×24×32, as written)")
def _(tmp):
    assert "(3×24×32)" in dpt("sample-data", "--help", check=0).stdout
    dpt("sample-data", tmp, "--tasks", 1, "--episodes", 2, "--image", check=0)
    assert zarr.open_group(str(next(tmp.glob("*.zarr"))), mode="r")["data/head_camera"].shape[1:] == (3, 24, 32)

@row("L5", "launch", "SIGTERM to the whole process group (`scancel`, `timeout`, a container stop)", "stopped by SIGTERM at step …: checkpoint …/step_…; resume with training.resume=auto (dpt train --resume) — exit 0 (it was 'rank 0 died (exit code 255)')", "a checkpoint at the stop step")
def _(tmp, store):
    import signal
    rd, p, out = _signal_run(tmp, store, signal.SIGTERM, after=2)
    assert p.returncode == 0 and "stopped by SIGTERM at step" in out and "exit code 255" not in out, out[-2000:]
    assert (rd / "checkpoints/latest").exists()

@row("L4", "launch", "a second CPU run started while one of ours already uses the cores", "this machine's … cores are shared with 1 rank(s) of another run (…): 1 thread(s) per rank — in both runs' output", "both runs, each at its share")
def _(tmp, store):
    import signal
    # on, as for a user (the suite keeps it off); a registry of this test's own: other test files train at the same time
    share = {"DPT_SHARE_CORES": "1", "TMPDIR": str(tmp)}
    a = _start(["train", "--config", "test", "--data", store, "--out", tmp / "a", *LONG[:-3], "training.max_steps=100000",
                "training.log_every=2", "training.checkpoint_every=100000"], env=share)
    b = None
    try:
        _wait_for(lambda: _logged(tmp / "a", 2), a)
        b = _start(["train", "--config", "test", "--data", store, "--out", tmp / "b", *LONG], env=share)
        _wait_for(lambda: any(r.get("threads") == 1 for r in _records(tmp / "a")), a, limit=300)
        _wait_for(lambda: _logged(tmp / "b", 1), b, limit=300)   # past its banner (a can reshare before b prints it)
    finally:
        for p in (b, a):
            if p is not None: os.killpg(p.pid, signal.SIGTERM)
        outs = [p.communicate(timeout=120)[0] if p is not None else "" for p in (a, b)]
    assert "cores are shared with" in outs[0] and str(tmp / "b") in outs[0], outs[0][-2000:]
    assert "cores are shared with" in outs[1] and str(tmp / "a") in outs[1] and "1 thread(s) per rank" in outs[1]

def _workers_in(reg):
    "Simulator workers registered in the registry folder `reg` (entries read while they may be written or removed)."
    n = 0
    for f in reg.glob("*") if reg.exists() else []:
        try: n += json.loads(f.read_text()).get("kind") == "worker"
        except (OSError, ValueError): pass
    return n

@row("L6", "launch", "a CPU run started beside another process's simulator workers (`dpt sim-data`; `dpt rollout`)", "this machine's … cores are shared with 2 simulator worker(s): … thread(s) per rank", "the run, at its share")
def _(tmp, store):
    import signal
    share = {"DPT_SHARE_CORES": "1", "TMPDIR": str(tmp)}   # on, with a registry of this test's own
    sim = _start(["sim-data", "--episodes", "400", "--workers", "2", "-o", tmp / "bg.zarr", "--no-progress"], env=share)
    try:
        _wait_for(lambda: _workers_in(tmp / "dptoolkit-ranks") == 2, sim)
        # registered, then paused (SIGSTOP): the registry counts living workers; their episodes were only a load on the
        # other test file's cores
        os.killpg(sim.pid, signal.SIGSTOP)
        out = subprocess.run(["dpt", "train", "--config", "test", "--data", str(store), "--out", str(tmp / "a"),
                              "--no-progress", "training.max_steps=2", "training.log_every=1",
                              "training.checkpoint_every=100000"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, **share}).stdout
    finally:
        _signal_group(sim, signal.SIGTERM, signal.SIGCONT)   # (a stopped process acts on SIGTERM once continued)
        sim.communicate(timeout=120)
    want = max(1, len(os.sched_getaffinity(0)) // 3)   # the cores between the run's one rank and the two workers
    assert f"cores are shared with 2 simulator worker(s): {want} thread(s) per rank" in out, out[-2000:]
    assert {json.loads(l)["threads"] for l in open(tmp / "a" / "logs.jsonl")} == {want}

@row("L7", "launch", "ranks started by hand (torchrun-style `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) on a port that is in use: rank 0 cannot listen, rank 1 waits", "rank 0 cannot listen on MASTER_ADDR=… MASTER_PORT=…: the port is in use …; rank 1 of 2: nothing listened at … within … s (ddp.timeout_s) — SIGTERM ends a waiting rank at once (it was 12 minutes, deaf to SIGTERM)", "nothing; both ranks again with another MASTER_PORT train")
def _(tmp, store):
    import signal, socket
    def rank(r, port, *extra, **kw):
        env = dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        return _start(["train", "--config", "test", "--data", store, "--out", tmp / "r", "--no-progress", *extra], env=env)
    with socket.socket() as busy:                       # another process listens on the port
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = rank(0, port).communicate(timeout=120)[0]
    lines = [l for l in out.splitlines() if l.startswith("dpt: error")]
    assert lines == [f"dpt: error: rank 0 cannot listen on MASTER_ADDR=127.0.0.1 MASTER_PORT={port}: the port is in use "
                     "(another run or process holds it); start every rank again with another MASTER_PORT"], out[-2000:]
    t0 = time.time()
    out = rank(1, port, "ddp.timeout_s=5").communicate(timeout=120)[0]     # nobody listens now: rank 1 gives up
    assert "rank 1 of 2: nothing listened at MASTER_ADDR=127.0.0.1" in out and "within 5 s" in out, out[-2000:]
    assert "frame #" not in out and time.time() - t0 < 60
    p = rank(1, port)                                                       # SIGTERM while it waits: it goes
    time.sleep(8)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == 143 and time.time() - t0 < 10
    ps = [rank(r, port, "training.max_steps=4") for r in (0, 1)]            # the command the line names: a free port
    outs = [q.communicate(timeout=300)[0] for q in ps]
    assert [q.returncode for q in ps] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert read_log(tmp / "r").world_size.tolist() == [2]

# issue 50: accidents of a held-out sweep; each ends in one line, or now simply works
@row("D6", "data", "a one-task store made by `dpt convert`, then `dpt inspect --verify`", "(works: every chunk is written, the one task's all-zero meta/episode_task too)")
def _(tmp):
    from dptoolkit.convert import convert
    out = tmp / "one.zarr"
    convert(ROOT / "tests/data/robotwin/raw/beat_block_hammer", out, progress=False, workers=1)
    assert (out / "meta/episode_task/c/0").exists() or (out / "meta/episode_task/0").exists(), files(out / "meta")
    verify(out, progress=False)                                   # no "missing (zarr would read it as 0)"

@row("D7", "data", "`task.dataset.task_weights` that give every task weight 0", "task.dataset.task_weights give every task it trains on weight 0 (…: 0): nothing to sample; give one a weight > 0")
def _(tmp, store):
    cfg = for_store(store, name="test")
    name = validate(store).task_names[0] if validate(store).task_names else store.name.removesuffix(".zarr")
    cfg.task.dataset.task_weights = {name: 0}
    raises(Exception, "give every task it trains on weight 0", train, cfg, nprocs=1, run_dir=tmp / "r", progress=False)
    assert not (tmp / "r").exists()                               # refused before any process: no run folder

@row("D8", "data", "a statistics cache file holding valid JSON of the wrong shape (`null`, `[]`, an entry of 3)", "(works: the statistics are computed again and the file rewritten)")
def _(tmp, store):
    from dptoolkit.normalize import Normalizer, stats_file
    Normalizer.from_store(store, ["state", "action"], cache_dir=tmp / "c")
    f = stats_file(store, tmp / "c")
    for bad in ("null", "[]", '{"state": 3}'):
        f.write_text(bad)
        n = Normalizer.from_store(store, ["state", "action"], cache_dir=tmp / "c")
        assert n.source.startswith("statistics computed") and json.loads(f.read_text()).keys() >= {"state", "action"}

@row("C13", "config", "`aux_keys=[env_state]` on a store without `env_state`", "policy.obs_encoder.aux_keys names 'env_state', which … does not have (data/ holds action, state): a training target must be one of the store's keys")
def _(tmp, store):
    raises(ConfigError, "does not have (data/ holds action, state): a training target must be one of the store's keys",
           for_store, store, name="test", overrides=["policy.obs_encoder.aux_keys=[env_state]"])

@row("X11", "CLI", "overrides split by a flag (`dpt train … training.max_steps=2 --no-progress training.log_every=1`)", "(works: KEY=VALUE after a flag are overrides too; an unknown flag is still refused)")
def _(tmp, store):
    r = dpt("train", "--config", "test", "--data", store, "--out", tmp / "r", "training.max_steps=2", "--no-progress",
            "training.log_every=1", check=0)
    assert read_log(tmp / "r").step.tolist() == [1, 2]
    r = dpt("train", "--config", "test", "--data", store, "--bogus", "training.max_steps=2")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr

@row("X12", "CLI", "`dpt convert` killed with SIGKILL while its workers convert", "(works: its worker processes die with it, as rollout workers do)")
def _(tmp):
    import signal, psutil
    script = ("import os, time\nfrom dptoolkit.convert import _pool\nwith _pool(2) as p:\n"
              "    print(sorted(p.submit(os.getpid).result() for _ in range(8)), flush=True)\n    time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline()
    kids = [c for c in psutil.Process(p.pid).children(recursive=True)]
    assert len(kids) >= 2, line
    p.kill(); p.wait()
    gone, alive = psutil.wait_procs(kids, timeout=30)
    assert not [k for k in alive if k.status() != psutil.STATUS_ZOMBIE], alive

@row("X13", "CLI", "`dpt import` of a folder (a LeRobot `pretrained_model`: config.json + model.safetensors)", "…: is a folder (it holds config.json, model.safetensors); dpt import reads one diffusion_policy / RoboTwin checkpoint file (e.g. checkpoints/latest.ckpt): pass that file")
def _(tmp):
    from dptoolkit.interop import InteropError, read_dp_checkpoint
    d = tmp / "pretrained_model"
    d.mkdir()
    for f in ("config.json", "model.safetensors"): (d / f).write_text("{}")
    raises(InteropError, "is a folder (it holds config.json, model.safetensors); dpt import reads one", read_dp_checkpoint,
           d, trust=True)

@row("X14", "CLI", "a checkpoint deleted while `dpt rollout RUN --every` rolls out the run's checkpoints", "step_…: skipped: deleted while this rollout ran (…) — the other checkpoints are rolled out")
def _(tmp, finished, capsys):
    from dptoolkit.success import rollout_run
    rd = _copy(finished[0], tmp / "r")
    for f in (rd / "checkpoints/step_000002").iterdir(): f.unlink()       # half-way through its deletion
    recs = rollout_run(rd, episodes=1, workers=1, max_steps=5, progress=False)
    assert recs.step.tolist() == [4] and "step_000002: skipped: deleted while this rollout ran" in capsys.readouterr().out

@row("S15", "store", "a LeRobot dataset with its video file deleted, then `dpt convert`", "…/file-000.mp4: missing (episode …: the observation.images.top video that meta/episodes names); the dataset is incomplete: download or copy it again")
def _(tmp):
    from dptoolkit.convert import ConvertError, convert
    src = _copy(ROOT / "tests/data/lerobot/written_by_lerobot", tmp / "ds")
    next((src / "videos").rglob("*.mp4")).unlink()
    raises(ConvertError, "file-000.mp4: missing (", convert, src, tmp / "o.zarr", progress=False, workers=1)
    assert not (tmp / "o.zarr").exists()

@row("S16", "store", "a LeRobot dataset with a truncated data parquet, then `dpt convert`", "…/file-000.parquet: cannot be read as a parquet table (ArrowInvalid); the file is damaged or truncated: download or copy the dataset again")
def _(tmp):
    from dptoolkit.convert import ConvertError, convert
    src = _copy(ROOT / "tests/data/lerobot/written_by_lerobot", tmp / "ds")
    f = next((src / "data").rglob("*.parquet"))
    f.write_bytes(f.read_bytes()[:200])
    raises(ConvertError, "file-000.parquet: cannot be read as a parquet table (ArrowInvalid)", convert, src,
           tmp / "o.zarr", progress=False, workers=1)
    assert not (tmp / "o.zarr").exists()

@row("S17", "store", "`dpt convert --frames jpegxl` killed with SIGKILL half-way, then `dpt inspect` and the same convert again", "…/.o.zarr.dpt-tmp (… MB) was left by a merge or conversion into o.zarr that did not finish; running it again replaces it", "no store at the destination; the second convert's store, complete")
def _(tmp):
    src = _copy(ROOT / "tests/data/robotwin/raw/beat_block_hammer", tmp / "src")
    d = src / "demo_clean" / "data"
    for i in range(2, 120): (d / f"episode{i}.hdf5").write_bytes((d / "episode0.hdf5").read_bytes())
    args = ["convert", src, "-o", tmp / "o.zarr", "--frames", "jpegxl", "--workers", 2, "--no-progress"]
    p, part = _start(args), tmp / ".o.zarr.dpt-tmp"
    _wait_for(lambda: part.is_dir() and any(f.name[0].isdigit() for f in (part / "data").rglob("*")), p)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    assert not (tmp / "o.zarr").exists() and part.is_dir()                                 # nothing at the destination
    r = dpt("inspect", tmp / "o.zarr")
    assert r.returncode == 1 and "was left by a merge or conversion into o.zarr that did not finish" in r.stderr, r.stderr
    dpt(*args, check=0)                                                                   # again: complete, no leftover
    assert not part.exists() and verify(tmp / "o.zarr", progress=False) is not None
    assert zarr.open_group(str(tmp / "o.zarr"), mode="r")["meta/episode_ends"][-1] == 120 * 7

TINY = ["--config", "test", "--data", ROOT / "data/tasks/beat_block_hammer.zarr", "--no-progress",
        "policy.down_dims=[16,32]", "policy.diffusion_step_embed_dim=16"]

@row("T19", "train", "the disk fills while the weights are written (safetensors' own error; tmpfs smaller than the model)", "the disk is full: checkpoint step_000001 needs about … MB, … MB are free; nothing was written", "no checkpoint, no temporary folder")
def _(tmp):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))   # 0.5 MB of weights
    with tmpfs(tmp / "small", "300k") as d:
        raises(TrainError, "the disk is full: checkpoint step_000001 needs about", _write_checkpoint, d, 1, model, None,
               {"step": 1}, keep=5)
        assert files(d) == ["checkpoints"]                                                       # nothing half-written

@row("T20", "train", "an fsdp checkpoint with a truncated optimizer shard, resumed", "the sharded optimizer state cannot be read (rank …); a shard file is damaged or incomplete: copy the whole checkpoint folder again", "nothing new")
def _(tmp):
    rd = _copy(ROOT / "tests/data/runs_0.1.0/fsdp", tmp / "r")
    f = rd / "checkpoints/step_000004/optimizer/__1_0.distcp"
    f.write_bytes(f.read_bytes()[:1000])
    before = files(rd)
    r = dpt("train", *TINY, "--out", rd, "--resume", "--nprocs", "2", "training.max_steps=6", "training.strategy=fsdp",
            check=1)
    assert "the sharded optimizer state cannot be read (rank" in r.stderr and "copy the whole checkpoint" in r.stderr, \
        r.stderr
    assert r.stderr.count("\n") == 1 and "CheckpointException" not in r.stderr
    assert [f for f in files(rd) if not f.startswith(("logs", ".lock", "config.yaml"))] == \
        [f for f in before if not f.startswith(("logs", ".lock", "config.yaml"))]

@row("T21", "train", "the disk fills while fsdp ranks write their optimizer shards (tmpfs)", "the ranks could not write their optimizer shards (rank …; … MB free); nothing was written", "no temporary folder of shards")
def _(tmp):
    with tmpfs(tmp / "small", "1500k") as d:
        r = dpt("train", *TINY, "--out", d / "run", "--nprocs", "2", "training.max_steps=2", "training.checkpoint_every=0",
                "training.strategy=fsdp", check=1)
        assert "could not write their optimizer shards" in r.stderr and "nothing was written" in r.stderr, r.stderr
        assert not list((d / "run" / "checkpoints").glob(".step_*")), files(d)

@row("X15", "train", "`policy._target_=mypolicies.MyPolicy`, the module in the current folder (which `dpt` does not search)", "cannot import it (ModuleNotFoundError: No module named 'mypolicies'); mypolicies.py is in the current folder, which dpt does not search: run it with PYTHONPATH=.", "nothing; with PYTHONPATH=. the run trains")
def _(tmp):
    (tmp / "mypolicies.py").write_text("from dptoolkit.policy import DiffusionPolicy\nclass MyPolicy(DiffusionPolicy): pass\n")
    args = [*TINY, "--nprocs", "1", "training.max_steps=2", "policy._target_=mypolicies.MyPolicy"]
    r = dpt("train", *args, "--out", tmp / "a", cwd=tmp, check=1)
    assert "run it with PYTHONPATH=." in r.stderr and not (tmp / "a").exists(), r.stderr
    r = dpt("train", *args, "--out", tmp / "b", cwd=tmp, env={"PYTHONPATH": "."}, check=0)   # the fix it names works
    assert (tmp / "b" / "checkpoints" / "step_000002").exists()
    r = dpt("train", *TINY, "--nprocs", "1", "--out", tmp / "c", "policy._target_=MyPolicy", cwd=tmp, check=1)
    assert "expected the class's import path, package.module.Class" in r.stderr, r.stderr

@row("X16", "train", "`policy.objective=flow policy.sampler=ddim`", "policy.sampler=ddim: a flow policy samples in Euler steps (policy.num_inference_steps), never with a DDPM/DDIM scheduler; drop policy.sampler")
def _(tmp):
    r = dpt("train", *TINY, "--nprocs", "1", "--out", tmp / "a", "policy.objective=flow", "policy.sampler=ddim", check=1)
    assert "a flow policy samples in Euler steps" in r.stderr and not (tmp / "a").exists(), r.stderr

@row("C14", "convert", "`dpt convert S --to lerobot -o DIR --overwrite` where DIR holds other files", "holds mine.txt, which is not part of a LeRobot dataset; --overwrite replaces only a LeRobot dataset: write to another folder", "DIR as it was (mine.txt kept); a LeRobot dataset there is replaced")
def _(tmp):
    store = sample_data(tmp / "d", tasks=1, episodes=2)[0]
    (tmp / "out").mkdir()
    (tmp / "out" / "mine.txt").write_text("mine")
    r = dpt("convert", store, "-o", tmp / "out", "--to", "lerobot", "--overwrite", check=1)
    assert "holds mine.txt, which is not part of a LeRobot dataset" in r.stderr, r.stderr
    assert files(tmp / "out") == ["mine.txt"]
    from dptoolkit.convert import to_lerobot           # in process: the command line's part is the refusal above
    to_lerobot(store, tmp / "lr", progress=False)
    to_lerobot(store, tmp / "lr", overwrite=True, progress=False)                       # a LeRobot dataset: replaced
    assert (tmp / "lr" / "meta" / "info.json").is_file()

@pytest.mark.parametrize("rid", list(ROWS))
def test_bad_input(rid, tmp_path, request):
    fn = ROWS[rid][-1]
    import inspect
    extra = {n: request.getfixturevalue(n) for n in inspect.signature(fn).parameters if n != "tmp"}
    fn(tmp_path, **extra)


def test_the_chapter_table_lists_every_row():
    "The train chapter's table has one line per row here, with the same message words."
    nb = json.loads((ROOT / "nbs" / "05_train.ipynb").read_text())
    table = [l for c in nb["cells"] if c["cell_type"] == "markdown" for l in "".join(c["source"]).splitlines() if l.startswith("| ")]
    by_id = {l.split("|")[1].strip(): l for l in table}
    assert len(ROWS) >= 25
    for rid, (area, what, says, left, _) in ROWS.items():
        assert rid in by_id, f"row {rid} missing from the chapter's table"
        assert says.replace("|", "\\|") in by_id[rid], (rid, says, by_id[rid])
