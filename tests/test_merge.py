"""merge: exact round trip (property-based), bad inputs, atomicity under errors, SIGTERM and SIGKILL, sources untouched."""
import hashlib, os, signal, subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings, strategies as st, HealthCheck

from dptoolkit.merge import MergeError, merge
from dptoolkit.store import describe, episodes, sample_data, temp_sibling, write_store
from conftest import dpt


def _tree_hash(p):
    h = hashlib.sha256()
    for f in sorted(Path(p).rglob("*")):
        if f.is_file(): h.update(f.relative_to(p).as_posix().encode()); h.update(f.read_bytes())
    return h.hexdigest()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=4), min_size=1, max_size=3),
       chunks=st.lists(st.integers(1, 50), min_size=3, max_size=3), img=st.booleans())
def test_round_trip(tmp_path_factory, lengths, chunks, img):
    d = tmp_path_factory.mktemp("rt")
    srcs, expect = [], {"state": [], "action": [], "cam": []}
    rng = np.random.default_rng(0)
    for i, lens in enumerate(lengths):
        T = sum(lens)
        data = {"state": rng.normal(size=(T, 3)).astype(np.float32), "action": rng.normal(size=(T, 3)).astype(np.float32)}
        if img: data["cam"] = rng.integers(0, 255, size=(T, 3, 4, 5), dtype=np.uint8)
        write_store(d / f"t{i}.zarr", data, np.cumsum(lens), chunk_steps=chunks[i])
        srcs.append(d / f"t{i}.zarr")
        for k, v in data.items(): expect[k].append(v)
    info = merge(srcs, d / "out.zarr", progress=False)
    g = zarr.open_group(str(d / "out.zarr"), mode="r")
    for k in info.keys:
        assert np.array_equal(g[f"data/{k}"][:], np.concatenate(expect[k]))
    all_lens = [l for lens in lengths for l in lens]
    assert g["meta/episode_ends"][:].tolist() == np.cumsum(all_lens).tolist()
    assert g["meta/episode_task"][:].tolist() == [i for i, lens in enumerate(lengths) for _ in lens]
    assert g["data/state"].chunks[0] == min(chunks[0], sum(lengths[0]))   # first source's time chunking kept


def test_merge_of_merge_keeps_tasks(tmp_path):
    a = sample_data(tmp_path / "a", tasks=2, episodes=2, seed=1)
    b = sample_data(tmp_path / "b", tasks=4, episodes=1, seed=2)[2:]
    merge(a, tmp_path / "ab.zarr", progress=False)
    info = merge([tmp_path / "ab.zarr", *b], tmp_path / "abcd.zarr", progress=False)
    assert info.task_names == ["beat_block_hammer", "handover_block", "stack_blocks_two", "place_shoe"]
    assert episodes(tmp_path / "abcd.zarr")["task"].tolist() == [0, 0, 1, 1, 2, 3]
    assert info.attrs["merge"]["sources"][0]["task_names"] == ["beat_block_hammer", "handover_block"]


def test_bad_inputs_name_the_culprit(tmp_path):
    a = sample_data(tmp_path / "a", tasks=1, episodes=2)[0]
    b16 = sample_data(tmp_path / "b", tasks=1, episodes=2, dim=16)[0]
    with pytest.raises(MergeError, match=r"b/beat_block_hammer.zarr: data/action has shape \(\*, 16\), expected \(\*, 14\) as in .*a/beat_block_hammer.zarr"):
        merge([a, b16], tmp_path / "x.zarr", progress=False)
    f64 = tmp_path / "f64.zarr"
    write_store(f64, {"state": np.zeros((5, 14)), "action": np.zeros((5, 14))}, [5])
    with pytest.raises(MergeError, match=r"f64.zarr: data/(action|state) has dtype float64, expected float32"):
        merge([a, f64], tmp_path / "x.zarr", progress=False)
    with pytest.raises(MergeError, match="has no data/head_camera"):
        merge([a], tmp_path / "x.zarr", keys=["head_camera"], progress=False)
    with pytest.raises(MergeError, match="listed twice"):
        merge([a, a], tmp_path / "x.zarr", progress=False)
    with pytest.raises(MergeError, match="task_names has 1 names for 2 sources"):
        merge([a, sample_data(tmp_path / "c", tasks=2, episodes=1)[1]], tmp_path / "x.zarr", task_names=["t"], progress=False)
    assert not (tmp_path / "x.zarr").exists() and not temp_sibling(tmp_path / "x.zarr").exists()
    r = dpt("merge", a, b16, "-o", tmp_path / "x.zarr")
    assert r.returncode == 1 and "expected (*, 14)" in r.stderr and "Traceback" not in r.stderr


def _big_sources(d, n=3, steps=20000):
    "Sources large enough that a merge takes a while (images: ~220 MB decoded in all)."
    paths = []
    rng = np.random.default_rng(0)
    for i in range(n):
        cam = rng.integers(0, 255, size=(steps // 10, 3, 24, 32), dtype=np.uint8)
        cam = np.repeat(cam, 10, axis=0)
        write_store(d / f"big{i}.zarr", {"cam": cam, "action": np.zeros((steps, 14), np.float32)}, [steps // 2, steps])
        paths.append(d / f"big{i}.zarr")
    return paths


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return _big_sources(tmp_path_factory.mktemp("big"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_interrupted_merge_leaves_nothing(tmp_path, big, sig):
    before = [_tree_hash(s) for s in big]
    dest = tmp_path / "out.zarr"
    p = subprocess.Popen(["dpt", "merge", *map(str, big), "-o", str(dest), "--no-progress"], stderr=subprocess.PIPE, text=True)
    tmp = temp_sibling(dest)
    t0 = time.time()
    while not (tmp / "data").exists() and time.time() - t0 < 60 and p.poll() is None: time.sleep(0.02)
    time.sleep(0.3)
    assert p.poll() is None, "merge finished before it could be interrupted"
    p.send_signal(sig); p.wait(30)
    assert not dest.exists()
    if sig == signal.SIGTERM:
        assert not tmp.exists(), "SIGTERM must clean the temporary folder"
    else:
        assert tmp.exists()                     # a kill -9 cannot clean up ...
    info = merge(big, dest, progress=False)     # ... and the next run replaces the stale temp
    assert info.steps == 60000 and not tmp.exists()
    assert [_tree_hash(s) for s in big] == before   # sources never modified


def test_refuses_a_live_writer(tmp_path):
    a = sample_data(tmp_path / "a", tasks=1, episodes=2)[0]
    tmp = temp_sibling(tmp_path / "x.zarr"); tmp.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp / ".dpt-owner").write_text(str(sleeper.pid))
        with pytest.raises(MergeError, match=f"another writer \\(pid {sleeper.pid}\\)"):
            merge([a], tmp_path / "x.zarr", progress=False)
    finally:
        sleeper.kill(); sleeper.wait()
