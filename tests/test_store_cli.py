"""Store inspection and sample data through the real `dpt` command: every bad input is one line, exit 1, no traceback."""
import json
import numpy as np
import pytest
import zarr

from dptoolkit.store import describe, make_sample_store, write_store
from conftest import dpt


def _raw(path, data=None, ends=(5, 12, 20), meta=True):
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    data = data if data is not None else {"state": np.zeros((20, 2), np.float32), "action": np.zeros((20, 2), np.float32)}
    for k, v in data.items(): g.create_array(f"data/{k}", data=np.asarray(v))
    if meta and ends is not None: g.create_array("meta/episode_ends", data=np.asarray(ends, np.int64))
    return path


def test_sample_data_and_inspect(tmp_path):
    r = dpt("sample-data", tmp_path / "s", "--tasks", 2, "--episodes", 4, "--dim", 16, "--image", check=0)
    assert "beat_block_hammer.zarr: 4 episodes" in r.stdout
    p = tmp_path / "s" / "beat_block_hammer.zarr"
    # zarr format-2 layout on disk: what zarr 2.x (diffusion_policy, RoboTwin) reads
    for f in (".zgroup", "data/.zgroup", "data/action/.zarray", "meta/episode_ends/.zarray"):
        assert (p / f).exists(), f
    meta = json.loads((p / "data/state/.zarray").read_text())
    assert meta["zarr_format"] == 2 and meta["compressor"]["cname"] == "zstd" and meta["chunks"][1:] == [16]
    r = dpt("inspect", p, check=0)
    assert "action_dim: 16" in r.stdout and "head_camera" in r.stdout
    j = json.loads(dpt("inspect", p, "--json", check=0).stdout)
    assert j["action_dim"] == 16 and j["episodes"] == 4 and j["arrays"]["head_camera"]["dtype"] == "uint8"
    assert j["disk_bytes"] > 0 and j["decoded_bytes"] > j["disk_bytes"]


def test_sample_data_deterministic(tmp_path):
    a = make_sample_store(tmp_path / "a.zarr", seed=3); b = make_sample_store(tmp_path / "b.zarr", seed=3)
    ga, gb = zarr.open_group(str(tmp_path / "a.zarr")), zarr.open_group(str(tmp_path / "b.zarr"))
    assert np.array_equal(ga["data/state"][:], gb["data/state"][:]) and a.steps == b.steps
    c = make_sample_store(tmp_path / "c.zarr", seed=4)
    assert c.steps != a.steps or not np.array_equal(zarr.open_group(str(tmp_path / "c.zarr"))["data/state"][:50], ga["data/state"][:50])


def test_reads_zarr_format_3(tmp_path):
    info = write_store(tmp_path / "v3.zarr", {"action": np.ones((12, 3), np.float32)}, [4, 12], zarr_format=3)
    assert info.zarr_format == 3 and info.action_dim == 3 and (tmp_path / "v3.zarr" / "zarr.json").exists()


def _pickled(p):
    _raw(p)
    (p / "data" / "obj").mkdir()
    (p / "data" / "obj" / ".zarray").write_text(json.dumps(dict(shape=[20], chunks=[20], dtype="|O", compressor=None,
                                                                fill_value=0, filters=[{"id": "pickle"}], order="C", zarr_format=2)))
    return p


BAD = {
    "missing": (lambda p: p, "no such file or folder"),
    "a_file": (lambda p: (p.write_text("x"), p)[1], "not a zarr store"),
    "not_zarr": (lambda p: (p.mkdir(), p)[1], "not a zarr store (no .zgroup or zarr.json"),
    "no_data": (lambda p: (zarr.open_group(str(p), mode="w", zarr_format=2).create_array("meta/episode_ends", data=np.array([3])), p)[1], "no data/ group"),
    "no_ends": (lambda p: _raw(p, meta=False), "no meta/episode_ends"),
    "decreasing": (lambda p: _raw(p, ends=[5, 4, 20]), "not strictly increasing at index 1: 5 then 4"),
    "negative": (lambda p: _raw(p, ends=[-2, 12, 20]), "must be > 0"),
    "last_mismatch": (lambda p: _raw(p, ends=[5, 12, 25]), "episode_ends[-1] = 25 but the data arrays have 20 steps"),
    "lengths": (lambda p: _raw(p, data={"state": np.zeros((20, 2)), "action": np.zeros((18, 2))}), "data/action=18, data/state=20"),
    "pickled": (_pickled, "data/obj is an object (pickled) array"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_store_is_one_clear_line(tmp_path, case):
    make, msg = BAD[case]
    p = make(tmp_path / "bad.zarr")
    r = dpt("inspect", p)
    assert r.returncode == 1, r
    assert r.stderr.startswith("dpt: error: ") and msg in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert str(tmp_path / "bad.zarr") in r.stderr           # names the culprit file


def test_usage_error_exit_2():
    r = dpt("inspect")
    assert r.returncode == 2 and "dpt: error:" in r.stderr and "Traceback" not in r.stderr
