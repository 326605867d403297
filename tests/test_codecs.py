"""Frames that stay compressed (issue 88): a replay buffer as UMI writes it (zarr 2, one-frame JPEG-XL chunks by
imagecodecs' own numcodecs codec, a folder and a `.zarr.zip`; tests/data/umi/make_fixture.py) opens, verifies, merges,
trains and resumes as any store; without imagecodecs it is refused in one line; a damaged frame is named."""
import hashlib, json, shutil, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import ROOT, dpt
from dptoolkit.store import StoreError, describe, open_store, verify
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint

UMI = ROOT / "tests" / "data" / "umi"
FOLDER, ZIP = UMI / "umi_layout.zarr", UMI / "umi_layout.zarr.zip"
WROTE = json.loads((UMI / "versions.json").read_text())
SMALL = ["policy.down_dims=[32,64]", "policy.obs_encoder.backbone=small", "dataloader.batch_size=8",
         "training.device=cpu", "training.log_every=2"]


@pytest.mark.parametrize("store", [FOLDER, ZIP], ids=["folder", "zip"])
def test_umi_store_reads_as_its_writer_decodes(store):
    info = verify(store, progress=False)
    cam = info.arrays["camera0_rgb"]
    assert (cam.shape, cam.chunks, cam.compressor) == ((50, 64, 64, 3), (1, 64, 64, 3), "imagecodecs_jpegxl-99")
    assert (info.episodes, info.steps, info.zarr_format) == (3, 50, 2)
    frames = np.asarray(open_store(store)["data/camera0_rgb"][:])
    assert list(frames.shape) == WROTE["frames"]["shape"]
    assert hashlib.sha256(frames.tobytes()).hexdigest() == WROTE["frames"]["sha256"]     # what the writer decoded


def test_inspect_and_verify_from_the_command_line():
    r = dpt("inspect", ZIP, "--verify", check=0)
    assert "imagecodecs_jpegxl-99" in r.stdout and "episodes: 3" in r.stdout, r.stdout


def test_without_imagecodecs_one_line_names_array_codec_and_install():
    code = ("import sys; sys.modules['imagecodecs'] = None\n"      # as if the package were not installed
            "from dptoolkit.cli import console\n"
            f"sys.argv = ['dpt', 'inspect', {str(ZIP)!r}]\nsys.exit(console())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "data/camera0_rgb" in err[0] and "'imagecodecs_jpegxl'" in err[0], err
    assert "pip install 'dptoolkit[codecs]'" in err[0], err


def test_merge_keeps_each_frame_compressed(tmp_path):
    out = tmp_path / "both.zarr"
    r = dpt("merge", ZIP, FOLDER, "-o", out, check=0)
    info = describe(out)
    assert info.arrays["camera0_rgb"].compressor == "imagecodecs_jpegxl-99", r.stdout
    assert info.arrays["camera0_rgb"].chunks == (1, 64, 64, 3)
    g, src = open_store(out), open_store(FOLDER)
    assert np.array_equal(g["data/camera0_rgb"][50:], src["data/camera0_rgb"][:])
    frames_bytes = sum(f.stat().st_size for f in (out / "data" / "camera0_rgb").iterdir())
    src_bytes = sum(f.stat().st_size for f in (FOLDER / "data" / "camera0_rgb").iterdir())
    assert frames_bytes <= 2 * src_bytes + 4096            # the same chunks, not decoded into Blosc


def test_umi_zip_trains_with_one_command_and_resumes(tmp_path):
    """`dpt train --data umi.zarr.zip`: the `umi` config by content (the camera through a view, the action a join of
    three arrays), in a fresh process (the ranks register the codec themselves), decoded on the fly by 2 loader
    workers; then resumed to 6 steps."""
    run = tmp_path / "run"
    args = ["train", "--data", ZIP, "--nprocs", "1", f"logging.run_dir={run}", "task.dataset.storage=chunks",
            "dataloader.num_workers=2", "training.checkpoint_every=2", *SMALL]
    r = dpt(*args, "training.max_steps=4", check=0, timeout=600)
    assert json.loads((run / "result.json").read_text())["steps"] == 4, r.stdout[-2000:]
    cfg = (run / "config.yaml").read_text()
    assert "name: umi" in cfg and "robot0_eef_pos+robot0_eef_rot_axis_angle+robot0_gripper_width" in cfg
    r = dpt(*args, "training.max_steps=6", "training.resume=true", check=0, timeout=600)
    assert json.loads((run / "result.json").read_text())["steps"] == 6, r.stdout[-2000:]
    assert int(load_checkpoint(latest_checkpoint(run))["state"]["step"]) == 6


def test_a_damaged_frame_is_named(tmp_path):
    bad = tmp_path / "bad.zarr"
    shutil.copytree(FOLDER, bad)
    (bad / "data" / "camera0_rgb" / "17.0.0.0").write_bytes(b"\xff\x0a not a JPEG-XL frame")
    with pytest.raises(StoreError) as e: verify(bad, progress=False)
    assert "data/camera0_rgb chunk (17, 0, 0, 0)" in str(e.value) and "17.0.0.0" in str(e.value), str(e.value)
    from dptoolkit.dataset import SequenceDataset
    ds = SequenceDataset(bad, 16, 2, 1, 7, keys=["camera0_rgb"], action_key="robot0_eef_pos", storage="chunks")
    with pytest.raises(StoreError, match=r"data/camera0_rgb chunk 17 .*cannot be decoded"):
        ds.__getitems__(list(range(len(ds))))


def test_convert_keeps_frames_compressed_and_serves_the_same_windows(tmp_path):
    """`dpt convert --frames jpegxl` on RoboTwin's raw episodes (two worker processes, which register the codec
    themselves): each frame one JPEG-XL chunk, channels last; the dataset serves the same windows as the decoded
    store's within the codec's loss, and the low-dim keys exactly."""
    from dptoolkit.dataset import SequenceDataset
    raw = ROOT / "tests" / "data" / "robotwin" / "raw"
    dec, jxl = tmp_path / "dec.zarr", tmp_path / "jxl.zarr"
    dpt("convert", raw, "-o", dec, "--workers", 2, "--no-progress", check=0)
    dpt("convert", raw, "-o", jxl, "--workers", 2, "--no-progress", "--frames", "jpegxl", "--quality", 95, check=0)
    a, b = describe(dec).arrays["head_camera"], describe(jxl).arrays["head_camera"]
    assert b.compressor.startswith("imagecodecs_jpegxl") and b.chunks == (1, *a.shape[2:], 3), b
    assert b.shape == (a.shape[0], *a.shape[2:], 3)
    assert describe(jxl).attrs["convert"]["frames"] == {"codec": "imagecodecs_jpegxl", "quality": 95, "chroma": "444"}
    size = lambda p: sum(f.stat().st_size for f in (p / "data" / "head_camera").iterdir())
    assert size(jxl) < size(dec), (size(jxl), size(dec))
    kw = dict(horizon=8, n_obs_steps=2, pad_before=1, pad_after=5, keys=["head_camera", "state"])
    x, y = SequenceDataset(dec, **kw, storage="memory"), SequenceDataset(jxl, **kw, storage="chunks")
    assert len(x) == len(y) and y.shapes["head_camera"] == x.shapes["head_camera"]
    i = list(range(0, len(x), 3))
    bx, by = x.__getitems__(i), y.__getitems__(i)
    assert np.array_equal(bx["obs"]["state"], by["obs"]["state"]) and np.array_equal(bx["action"], by["action"])
    err = (bx["obs"]["head_camera"].int() - by["obs"]["head_camera"].int()).abs().float()
    assert err.mean() < 3 and err.max() < 64, (err.mean(), err.max())      # JPEG-XL at 95: a few grey levels


def test_convert_refuses_a_codec_name_and_a_quality_in_one_line(tmp_path):
    raw = ROOT / "tests" / "data" / "robotwin" / "raw"
    r = dpt("convert", raw, "-o", tmp_path / "o.zarr", "--frames", "jpegxl", "--quality", 150, "--no-progress")
    assert r.returncode != 0 and "quality 150 outside 0-100" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o.zarr").exists()


def test_config_prints_where_the_frames_are_decoded():
    r = dpt("config", ZIP, "--nprocs", 2, check=0)
    line = next((l for l in r.stdout.splitlines() if l.startswith("# decoding: data/camera0_rgb:")), None)
    assert line and "imagecodecs_jpegxl-99 frames" in line and "a step reads 128" in line, r.stdout[-1500:]  # 64 × 2
    assert "# decoding" not in dpt("config", ROOT / "data" / "images" / "beat_block_hammer.zarr", check=0).stdout


def _sampling(jpeg: bytes) -> list:
    "Each component's (H, V) sampling factors, read from a JPEG's start-of-frame marker as a decoder reads them."
    i = 2
    while i + 4 <= len(jpeg):
        marker, n = jpeg[i + 1], int.from_bytes(jpeg[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return [(jpeg[i + 11 + 3 * k] >> 4, jpeg[i + 11 + 3 * k] & 15) for k in range(jpeg[i + 9])]
        i += 2 + n
    raise AssertionError("no start-of-frame marker")


def test_jpeg_frames_keep_full_colour_unless_asked(tmp_path):
    """Issue 88: colour at 4:2:0 halved a camera policy's success, so `--frames jpeg` writes 4:4:4 (every component
    sampled at every pixel, as the file's own header says) unless `--chroma 420`, which `inspect` then names; a codec
    that cannot hold full colour is refused in one line, before anything is written."""
    raw = ROOT / "tests" / "data" / "robotwin" / "raw"
    full, half = tmp_path / "full.zarr", tmp_path / "half.zarr"
    dpt("convert", raw, "-o", full, "--workers", 1, "--no-progress", "--frames", "jpeg", check=0)
    dpt("convert", raw, "-o", half, "--workers", 1, "--no-progress", "--frames", "jpeg", "--chroma", "420", check=0)
    chunk = lambda p: next(f for f in sorted((p / "data" / "head_camera").iterdir()) if not f.name.startswith("."))
    assert _sampling(chunk(full).read_bytes()) == [(1, 1)] * 3
    assert _sampling(chunk(half).read_bytes()) == [(2, 2), (1, 1), (1, 1)]
    assert describe(full).attrs["convert"]["frames"] == {"codec": "imagecodecs_jpeg", "quality": 95, "chroma": "444"}
    assert describe(half).attrs["convert"]["frames"]["chroma"] == "420"
    assert "imagecodecs_jpeg-95-420" in dpt("inspect", half, check=0).stdout
    assert "imagecodecs_jpeg-95 " in dpt("inspect", full, check=0).stdout
    r = dpt("convert", raw, "-o", tmp_path / "w.zarr", "--frames", "webp", "--chroma", "444", "--no-progress")
    err = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(err) == 1 and "webp writes 420 only" in err[0], r.stderr
    assert not (tmp_path / "w.zarr").exists()


def test_a_store_exported_at_full_colour_reads_in_place(tmp_path):
    """`dpt convert --to lerobot --vcodec hevc --chroma 444` writes yuv444p video (the stream says so, and info.json),
    which trains in place: its windows are the windows of the store converted back, and its frames within the codec's
    loss of the store's. SVT-AV1 at 4:4:4 is refused in one line naming the encoders that can."""
    import av
    from dptoolkit.convert import from_lerobot
    from dptoolkit.dataset import SequenceDataset
    store, out = ROOT / "data" / "images" / "beat_block_hammer.zarr", tmp_path / "bbh_444"
    dpt("convert", store, "-o", out, "--to", "lerobot", "--vcodec", "hevc", "--chroma", "444", "--no-progress", check=0)
    vi = json.loads((out / "meta" / "info.json").read_text())["features"]["observation.images.head"]["info"]
    assert (vi["video.codec"], vi["video.pix_fmt"]) == ("hevc", "yuv444p"), vi
    with av.open(str(next((out / "videos").rglob("*.mp4")))) as f:
        assert (f.streams.video[0].codec_context.name, f.streams.video[0].format.name) == ("hevc", "yuv444p")
    conv = from_lerobot(out, tmp_path / "back.zarr", workers=1, progress=False)
    kw = dict(horizon=8, n_obs_steps=2, pad_before=1, pad_after=7, keys=["head_camera", "state"])
    ref = SequenceDataset(conv.path, **kw, storage="memory")
    got = SequenceDataset(out, **kw, storage="chunks")
    i = list(range(len(ref)))[::-1]
    rb, gb = ref.__getitems__(i), got.__getitems__(i)
    assert np.array_equal(rb["obs"]["head_camera"].numpy(), gb["obs"]["head_camera"].numpy())
    assert np.array_equal(rb["action"].numpy(), gb["action"].numpy())
    err = np.asarray(open_store(conv.path)["data/head_camera"][:]).astype(float) \
        - open_store(store)["data/head_camera"][:]
    assert 10 * np.log10(255 ** 2 / (err ** 2).mean()) > 28
    r = dpt("convert", store, "-o", tmp_path / "svt", "--to", "lerobot", "--chroma", "444", "--no-progress")
    err = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(err) == 1 and "h264 and hevc encode 444" in err[0], r.stderr
    assert not (tmp_path / "svt").exists()
