"""A LeRobot v3 dataset as a training source, as it is (issue 88): the folder lerobot 0.4.4 wrote
(tests/data/lerobot/make_fixture.py) opens as a store, serves the windows the converted store serves in every storage,
trains from a fresh process with loader workers decoding its video and resumes; a missing, short or mis-sized video
is named in one line."""
import json, shutil

import numpy as np
import pytest

from conftest import ROOT, dpt
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint
from dptoolkit.convert import from_lerobot
from dptoolkit.dataset import SequenceDataset
from dptoolkit.store import StoreError, describe, open_store, verify

LR = ROOT / "tests" / "data" / "lerobot" / "written_by_lerobot"
MP4 = "videos/observation.images.top/chunk-000/file-000.mp4"
SMALL = ["policy.down_dims=[32,64]", "policy.obs_encoder.backbone=small", "dataloader.batch_size=8",
         "training.device=cpu", "training.log_every=2"]
KEYS = dict(horizon=8, n_obs_steps=2, pad_before=1, pad_after=7, keys=["top_camera", "state"])


def _batches(ds):
    idx = np.arange(len(ds))
    return ds.__getitems__(idx[::-1])      # every window, backwards: the decoder seeks


@pytest.mark.parametrize("storage", ["memory", "chunks", "mmap"])
def test_windows_in_place_equal_the_converted_stores(tmp_path, storage):
    conv = from_lerobot(LR, tmp_path / "conv.zarr", workers=1, progress=False)
    ref = _batches(SequenceDataset(conv.path, **KEYS, storage="memory"))
    ds = SequenceDataset(LR, **KEYS, storage=storage, cache_dir=tmp_path / "cache")
    got = _batches(ds)
    assert ds.storage == storage and len(ds) == len(ref["action"]) == 23
    for k in ("top_camera", "state"):
        assert np.array_equal(got["obs"][k].numpy(), ref["obs"][k].numpy()), k
    assert np.array_equal(got["action"].numpy(), ref["action"].numpy())
    assert np.array_equal(got["task"].numpy(), ref["task"].numpy())
    assert describe(LR).task_names == conv.task_names


@pytest.mark.parametrize("storage", ["memory", "mmap"])
def test_a_decoded_copy_keeps_frames_at_the_size_the_model_reads(tmp_path, storage):
    """Issue 88: a policy that resizes its camera (`policy.obs_encoder.resize_shape`) gets a decoded copy of the video
    at that size: the cache's file holds the resized frames, each window is the encoder's resize of the window at the
    recorded size within half a grey level, and the encoder's resize of it changes nothing."""
    import torch, torch.nn.functional as F
    full = _batches(SequenceDataset(LR, **KEYS, storage="chunks"))["obs"]["top_camera"]      # (N, 2, 3, 48, 64)
    ds = SequenceDataset(LR, **KEYS, storage=storage, cache_dir=tmp_path / "cache", frame_size=(24, 32))
    got = _batches(ds)["obs"]["top_camera"]
    assert ds.storage == storage and ds.shapes["top_camera"] == (3, 24, 32) and got.shape == (23, 2, 3, 24, 32)
    want = F.interpolate(full.flatten(0, 1).float(), size=(24, 32), mode="bilinear", antialias=True)
    assert (got.flatten(0, 1).float() - want).abs().max() <= 0.5
    same = F.interpolate(got.flatten(0, 1).float(), size=(24, 32), mode="bilinear", antialias=True)
    assert torch.equal(same, got.flatten(0, 1).float())
    if storage == "mmap":
        (entry,) = (tmp_path / "cache").glob("written_by_lerobot-*")
        m = np.load(entry / "top_camera@24x32.npy", mmap_mode="r")
        assert m.shape == (21, 3, 24, 32) and not (entry / "top_camera.npy").exists()
    chunks = SequenceDataset(LR, **KEYS, storage="chunks", frame_size=(24, 32))   # decoded per window: as recorded
    assert chunks.shapes["top_camera"] == (3, 48, 64)


def test_trains_with_its_cache_at_the_resized_size(tmp_path):
    """Issue 88: `dpt train` from the LeRobot video with a resizing encoder builds the machine's cache at the model's
    size, trains and says so in `dpt config`'s plan."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    over = ["policy.obs_encoder.resize_shape=[24,32]", "task.dataset.storage=mmap", f"task.dataset.cache_dir={cache}"]
    r = dpt("train", "--data", LR, "--nprocs", "1", f"logging.run_dir={run}", "training.max_steps=2", *SMALL, *over,
            check=0, timeout=600)
    assert json.loads((run / "result.json").read_text())["steps"] == 2, r.stdout[-2000:]
    (entry,) = cache.glob("written_by_lerobot-*")
    assert sorted(p.name for p in entry.glob("*.npy")) == ["action.npy", "state.npy", "top_camera@24x32.npy"]
    line = next(l for l in dpt("config", LR, *over, check=0).stdout.splitlines() if l.startswith("# decoding:"))
    assert "into the cache (48.4 KB at 24×32, the size the model reads)" in line, line


def test_inspect_and_verify_in_place():
    r = dpt("inspect", LR, check=0)
    assert "a LeRobot dataset, read in place" in r.stdout and "video-av1" in r.stdout, r.stdout
    info = verify(LR, progress=False)
    assert info.arrays["top_camera"].shape == (21, 3, 48, 64) and info.disk_bytes > 0


def test_merges_with_a_store_and_keeps_frames_compressed(tmp_path):
    "A LeRobot folder merged with its converted store: the same rows twice, every key kept as a store keeps it."
    from dptoolkit.merge import merge
    conv = from_lerobot(LR, tmp_path / "conv.zarr", workers=1, progress=False)
    for first, name in ((LR, "a.zarr"), (conv.path, "b.zarr")):
        info = merge([first, LR if first != LR else conv.path], tmp_path / name, progress=False)
        g, src, lr = open_store(info.path), open_store(conv.path), open_store(LR)
        assert info.episodes == 2 * describe(LR).episodes
        for k in ("top_camera", "state", "action"):
            n = lr[f"data/{k}"].shape[0]
            assert np.array_equal(g[f"data/{k}"][:n], lr[f"data/{k}"][:]) and np.array_equal(g[f"data/{k}"][n:], src[f"data/{k}"][:])
            assert g[f"data/{k}"].chunks[0] == src[f"data/{k}"].chunks[0] == 100, k     # not a chunk a frame
        assert g["data/top_camera"].compressors[0].get_config()["cname"] == "lz4"       # decoded frames: convert's LZ4
        assert g["data/state"].compressors[0].get_config()["cname"] == "zstd"
    both = merge([LR, _copy_lr(tmp_path / "lr2")], tmp_path / "c.zarr", progress=False)   # two LeRobot folders
    assert open_store(both.path)["data/top_camera"].compressors[0].get_config()["cname"] == "lz4"


def _copy_lr(dst):
    shutil.copytree(LR, dst)
    return dst


def test_trains_in_place_with_loader_workers_and_resumes(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--data", LR, "--nprocs", "1", f"logging.run_dir={run}", "task.dataset.storage=chunks",
            "dataloader.num_workers=2", "training.checkpoint_every=2", *SMALL]
    r = dpt(*args, "training.max_steps=4", check=0, timeout=600)
    assert json.loads((run / "result.json").read_text())["steps"] == 4, r.stdout[-2000:]
    assert "top_camera" in (run / "config.yaml").read_text()
    r = dpt(*args, "training.max_steps=6", "training.resume=true", check=0, timeout=600)
    assert json.loads((run / "result.json").read_text())["steps"] == 6, r.stdout[-2000:]
    assert int(load_checkpoint(latest_checkpoint(run))["state"]["step"]) == 6


def _copy(tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(LR, bad)
    return bad


def test_a_missing_video_is_named(tmp_path):
    bad = _copy(tmp_path)
    (bad / MP4).unlink()
    g = open_store(bad)                                 # the tables open; the frames are read when asked for
    with pytest.raises(StoreError, match=r"file-000\.mp4: missing \(.*top_camera video that meta/episodes names"):
        SequenceDataset(bad, **KEYS, storage="memory")
    assert g["data/state"].shape == (21, 14)


def test_a_video_shorter_than_its_episodes_is_named(tmp_path):
    import av
    from dptoolkit.processes import keep_scheduling
    bad = _copy(tmp_path)
    frames = open_store(LR)["data/top_camera"][:15]
    with keep_scheduling(), av.open(str(bad / MP4), "w") as c:   # the same file, cut after 15 of its 21 frames
        s = c.add_stream("libsvtav1", rate=50)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f.transpose(1, 2, 0).copy(), format="rgb24")): c.mux(p)
        for p in s.encode(): c.mux(p)
    ds = SequenceDataset(bad, **KEYS, storage="chunks")
    with pytest.raises(StoreError, match=r"file-000\.mp4 \(episode 1, frame \d\): top_camera ends at file frame 15, "
                                         r"the episode table needs frame \d+: the video is shorter"):
        ds.__getitems__(np.arange(len(ds)))


def test_a_video_of_another_size_than_info_says_is_named(tmp_path):
    bad = _copy(tmp_path)
    p = bad / "meta" / "info.json"
    info = json.loads(p.read_text())
    info["features"]["observation.images.top"]["shape"] = [96, 128, 3]
    p.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"file-000\.mp4 \(episode 0, frame 0\): top_camera frames are 48×64, "
                                         r"meta/info\.json says 96×128"):
        open_store(bad)["data/top_camera"][0]        # zarr's own read: LeRobotError, a ValueError
    with pytest.raises(StoreError, match="top_camera frames are 48×64, meta/info.json says 96×128"):
        SequenceDataset(bad, **KEYS, storage="memory")   # the toolkit's: StoreError


@pytest.mark.parametrize("backend", ["pyav", "torchcodec"])
def test_either_decoder_serves_the_same_windows(tmp_path, monkeypatch, backend):
    """Issue 88: the reader decodes with torchcodec where it loads, PyAV otherwise (DPT_VIDEO_BACKEND decides); both
    serve every window of the converted store (which PyAV decoded), pixel for pixel."""
    from dptoolkit.lerobot import _torchcodec_loads, video_backend
    if backend == "torchcodec" and _torchcodec_loads():
        pytest.skip(f"torchcodec does not load here ({_torchcodec_loads()}): its FFmpeg libraries are missing")
    monkeypatch.setenv("DPT_VIDEO_BACKEND", backend)
    lr = tmp_path / "lr"
    shutil.copytree(LR, lr)                                   # a folder of its own: its readers start with `backend`
    conv = from_lerobot(lr, tmp_path / "conv.zarr", workers=1, progress=False)
    ref = _batches(SequenceDataset(conv.path, **KEYS, storage="memory"))
    got = _batches(SequenceDataset(lr, **KEYS, storage="chunks"))
    assert video_backend() == backend
    assert np.array_equal(got["obs"]["top_camera"].numpy(), ref["obs"]["top_camera"].numpy())


def test_torchcodec_that_does_not_load_falls_back_to_pyav_or_is_one_line():
    """Where torchcodec does not load (here: as if not installed), the reader uses PyAV, and `dpt inspect --verify`
    decodes every frame; asked for torchcodec there (DPT_VIDEO_BACKEND=torchcodec), it is one line saying what to
    install."""
    import subprocess, sys
    code = ("import sys; sys.modules['torchcodec'] = None\n"     # as if the package were not installed
            "from dptoolkit.cli import console\n"
            f"sys.argv = ['dpt', 'inspect', {str(LR)!r}, '--verify']\nsys.exit(console())")
    run = lambda env: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                     env={**__import__("os").environ, **env})
    ok = run({"DPT_VIDEO_BACKEND": "auto"})
    assert ok.returncode == 0 and "video-av1" in ok.stdout, ok.stderr[-2000:]
    r = run({"DPT_VIDEO_BACKEND": "torchcodec"})
    err = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "DPT_VIDEO_BACKEND=torchcodec: torchcodec does not load here" in err[0] and "apt-get install ffmpeg" in err[0]
