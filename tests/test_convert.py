"""`dpt convert` from the shell (issue 37), on fixtures the real tools made: RoboTwin's raw episodes and what their
process_data.py made of them (tests/data/robotwin, made by its make_fixture.py with their unmodified code), and a
dataset the real lerobot 0.4.4 wrote plus what LeRobotDataset returned for our export (tests/data/lerobot). The
convert chapter checks the functions; here: worker processes, the command line, the round trip, bad input."""
import json, shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import dpt

pytest.importorskip("h5py")
pytest.importorskip("av")
FIX = Path(__file__).parent / "data"


def theirs(task, n):
    return zarr.open_group(str(FIX / f"robotwin/process_data/{task}-demo_clean-{n}.zarr"), mode="r")


def test_robotwin_with_two_workers_equals_their_process_data(tmp_path):
    r = dpt("convert", FIX / "robotwin/raw/beat_block_hammer", FIX / "robotwin/raw/handover_block",
            "-o", tmp_path / "s.zarr", "--workers", 2, "--no-progress", check=0)
    assert "episodes: 3" in r.stdout and "converted in" in r.stdout
    g, off = zarr.open_group(str(tmp_path / "s.zarr"), mode="r"), 0
    for task, n in (("beat_block_hammer", 2), ("handover_block", 1)):
        ref = theirs(task, n)
        L = ref["data/state"].shape[0]
        for k in ("state", "action", "head_camera"):
            assert np.array_equal(g[f"data/{k}"][off:off + L], ref[f"data/{k}"][:]), (task, k)
        off += L
    assert dict(g.attrs)["task_names"] == ["beat_block_hammer", "handover_block"]
    assert g["data/head_camera"].chunks == (100, 3, 48, 64)


def test_store_to_lerobot_and_back(tmp_path):
    dpt("convert", FIX / "robotwin/raw", "-o", tmp_path / "s.zarr", "--cameras", "head_camera", "--workers", 1,
        "--no-progress", check=0)
    r = dpt("convert", tmp_path / "s.zarr", "-o", tmp_path / "lr", "--to", "lerobot", "--no-progress", check=0)
    assert "LeRobot v3.0 dataset" in r.stdout
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == 19 and info["total_episodes"] == 3
    assert {"observation.state", "action", "observation.images.head"} <= set(info["features"])
    dpt("convert", tmp_path / "lr", "-o", tmp_path / "back.zarr", "--no-progress", check=0)
    a, b = (zarr.open_group(str(tmp_path / p), mode="r") for p in ("s.zarr", "back.zarr"))
    for k in ("state", "action"): assert np.array_equal(a[f"data/{k}"][:], b[f"data/{k}"][:])
    assert np.array_equal(a["meta/episode_ends"][:], b["meta/episode_ends"][:])
    assert dict(b.attrs)["task_names"] == ["beat_block_hammer", "handover_block"]
    err = a["data/head_camera"][:].astype(float) - b["data/head_camera"][:]
    assert 10 * np.log10(255 ** 2 / (err ** 2).mean()) > 30           # the AV1 codec's error, nothing more


def test_bad_input_is_one_line_and_leaves_nothing(tmp_path):
    bad = tmp_path / "raw"
    shutil.copytree(FIX / "robotwin/raw", bad)
    (bad / "handover_block/demo_clean/data/episode0.hdf5").write_bytes(b"truncated")
    r = dpt("convert", bad, "-o", tmp_path / "out.zarr", "--no-progress")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "handover_block/demo_clean/data/episode0.hdf5: not a readable HDF5 file" in r.stderr
    assert not (tmp_path / "out.zarr").exists() and not list(tmp_path.glob(".out.zarr*"))
    r = dpt("convert", FIX / "robotwin/raw", "-o", tmp_path / "o.zarr", "--cameras", "wrist_camera", "--no-progress")
    assert r.returncode == 1 and "no observation/wrist_camera/rgb (this episode has cameras: front_camera, " in r.stderr
    r = dpt("convert", tmp_path, "-o", tmp_path / "o.zarr")
    assert r.returncode == 1 and "unknown layout" in r.stderr and "Traceback" not in r.stderr
    r = dpt("convert", FIX / "robotwin/raw", "-o", tmp_path / "o.zarr", "--size", "48")
    assert r.returncode == 2 and "argument --size: '48' is not H,W" in r.stderr


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    from test_bad_input import tmpfs
    with tmpfs(tmp_path / "small", "256k") as d:      # the low-dim arrays fit, the frames do not
        r = dpt("convert", FIX / "robotwin/raw", "-o", d / "s.zarr", "--workers", 2, "--no-progress")
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert f"{d / 's.zarr'}: the disk filled up while converting (" in r.stderr and "nothing was written" in r.stderr
        assert list(d.iterdir()) == []
