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


def _by_task(store):
    """RoboTwin's instructions out of a converted store, so LeRobot's tasks are its task names: the LeRobot fixtures
    predate the instructions (test_language.py takes instructions out to LeRobot); → the instructions removed."""
    g = zarr.open_group(str(store), mode="r+")
    said = g.attrs["instructions"]
    del g.attrs["instructions"]
    return said


def test_store_to_lerobot_and_back(tmp_path):
    dpt("convert", FIX / "robotwin/raw", "-o", tmp_path / "s.zarr", "--cameras", "head_camera", "--workers", 1,
        "--no-progress", check=0)
    assert [len(r) for r in _by_task(tmp_path / "s.zarr")] == [10, 10, 10]    # RoboTwin 2.0's seen phrasings came in
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


def test_lerobot_reads_our_full_colour_export_as_we_do(tmp_path):
    """The RoboTwin fixture's store exported at full colour resolution (`to_lerobot(codec="hevc", chroma="444",
    crf=18)`: yuv444p HEVC without B-frames, tests/data/lerobot/make_fixture.py --parts 444): the real lerobot 0.4.4
    loads it (`LeRobotDataset(video_backend="pyav")`, what it returned is the .npz), and our reader, in place and
    converted, gives the frames lerobot gave, pixel for pixel, with the vectors exactly; `to_lerobot` still writes
    that export (the same info.json, frames within the encoder's run-to-run noise)."""
    from dptoolkit.convert import from_lerobot, to_lerobot
    ref, read = FIX / "lerobot/from_store_444", np.load(FIX / "lerobot/from_store_444_read_by_lerobot.npz")
    vi = json.loads((ref / "meta/info.json").read_text())["features"]["observation.images.head"]["info"]
    assert (vi["video.codec"], vi["video.pix_fmt"]) == ("hevc", "yuv444p")
    back = zarr.open_group(str(from_lerobot(ref, tmp_path / "back.zarr", workers=1, progress=False).path), mode="r")
    for cam in ("front", "head", "left", "right"):
        assert np.array_equal(back[f"data/{cam}_camera"][:], read[f"observation.images.{cam}"]), cam
    assert np.array_equal(back["data/action"][:], read["action"]) and np.array_equal(back["data/state"][:], read["state"])
    from dptoolkit.store import open_store
    assert np.array_equal(open_store(ref)["data/head_camera"][:], read["observation.images.head"])   # in place
    shutil.copytree(FIX / "robotwin/raw", tmp_path / "raw")
    dpt("convert", tmp_path / "raw", "-o", tmp_path / "s.zarr", "--workers", 1, "--no-progress", check=0)
    del zarr.open_group(str(tmp_path / "s.zarr"), mode="r+").attrs["instructions"]
    again = to_lerobot(tmp_path / "s.zarr", tmp_path / "again", codec="hevc", chroma="444", crf=18, progress=False)
    assert json.loads((again / "meta/info.json").read_text()) == json.loads((ref / "meta/info.json").read_text())
    err = open_store(again)["data/head_camera"][:].astype(float) - read["observation.images.head"]
    assert 10 * np.log10(255 ** 2 / max((err ** 2).mean(), 1e-9)) > 40            # the writer has not drifted


def test_our_lerobot_export_is_what_lerobots_own_tools_need(tmp_path):
    """`to_lerobot` of the RoboTwin fixture store, checked against what the real lerobot 0.4.4 returned on the same
    export (tests/data/lerobot/from_store_lerobot_tools.json, made by make_fixture.py): every `meta/episodes` column
    its tools read, statistics equal to the ones lerobot computes on the same frames (per episode, then aggregated),
    and `delete_episodes` / `merge_datasets` results."""
    import pandas as pd
    from dptoolkit.convert import convert, to_lerobot
    tools = json.loads((FIX / "lerobot/from_store_lerobot_tools.json").read_text())
    store = convert(FIX / "robotwin/raw", tmp_path / "s.zarr", workers=1, progress=False).path
    _by_task(store)
    out = to_lerobot(store, tmp_path / "lr", progress=False)
    eps = pd.read_parquet(out / "meta/episodes/chunk-000/file-000.parquet")
    assert list(eps.columns) == tools["episodes_columns"] and len(eps.columns) == 135
    assert {"meta/episodes/chunk_index", "meta/episodes/file_index", "stats/index/q99"} <= set(eps.columns)
    ours = json.loads((out / "meta/stats.json").read_text())
    for feat, st in tools["lerobot_stats"].items():   # every non-video feature lerobot lists, each statistic
        for k, v in st.items():
            np.testing.assert_allclose(ours[feat][k], v, rtol=1e-5, atol=1e-9, err_msg=f"{feat} {k}")
    for feat, st in tools["aggregated_from_our_episodes"].items():   # lerobot's aggregate of our per-episode rows
        for k, v in st.items(): np.testing.assert_allclose(ours[feat][k], v, rtol=1e-9, atol=1e-12)
    assert set(ours) >= {"timestamp", "frame_index", "episode_index", "index", "task_index",
                         "observation.images.head"} and np.array(ours["observation.images.head"]["std"]).shape == (3, 1, 1)
    # lerobot's delete_episodes(ds, [1]) kept episodes 0 and 2 (renumbered 0, 1) with our vectors
    d, state = tools["delete_episodes"], zarr.open_group(str(store), mode="r")["data/state"][:]
    assert (d["episodes"], d["frames"]) == (2, 12)
    np.testing.assert_array_equal(np.array(d["state"], np.float32), np.concatenate([state[:7], state[14:]]))
    # merge_datasets([a dataset lerobot wrote with our features (episodes 0 and 2), ours]): 5 episodes, ours last
    m = tools["merge_datasets"]
    assert (m["episodes"], m["frames"]) == (5, 31) and m["episode_index"][-5:] == [4] * 5
    np.testing.assert_allclose(np.array(m["state"][12:], np.float32), state, atol=1e-6)


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
