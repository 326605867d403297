"""Runs that can be trusted (part of issue 16): a diverging run stops with one sentence and keeps its last good checkpoint,
every JSON file is strict JSON, and damaged or missing chunks are named by `dpt inspect --verify` and by training."""
import json, shutil, time
from pathlib import Path

import numpy as np
import pytest
import torch

from dptoolkit.store import sample_data
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint
from conftest import dpt


def _reject(c): raise ValueError(f"non-standard JSON constant {c}")


def _strict(path):
    "Every JSON document in a file (one per line for .jsonl) parses with NaN/Infinity refused."
    text = Path(path).read_text()
    return [json.loads(l, parse_constant=_reject) for l in text.splitlines() if l.strip()] if path.suffix == ".jsonl" \
        else json.loads(text, parse_constant=_reject)


def test_diverging_run_stops_and_keeps_the_last_good_checkpoint(merged, tmp_path):
    run = tmp_path / "run"
    ov = ["--nprocs", 2, "--no-progress", "training.log_every=5"]
    dpt("train", "--config", "test", "--data", merged, "--out", run, *ov, "training.max_steps=20", "training.checkpoint_every=10", check=0)
    for f in [run / "logs.jsonl", run / "result.json"]: _strict(f)
    r = dpt("train", "--config", "test", "--data", merged, "--out", run, "--resume", *ov, "training.max_steps=400", "optimizer.lr=1e6", check=1)
    t_end = time.time()
    err = [l for l in r.stderr.splitlines() if l.startswith("dpt: error")]
    assert len(err) == 1 and "TrainError: step 25: loss is nan" in err[0] and "step_000020, stays 'latest'" in err[0], r.stderr[-2000:]
    assert "leaked semaphore" not in r.stderr
    logs = _strict(run / "logs.jsonl")                           # NaN is written as null: strict parsers accept the file
    nan = [l for l in logs if l["loss"] is None]
    assert nan and nan[0]["step"] == 25 and t_end - nan[0]["time"] < 10
    assert (run / "checkpoints" / "latest").read_text() == "step_000020"
    ck = load_checkpoint(latest_checkpoint(run))
    assert all(torch.isfinite(v).all() for part in ("model", "ema") for v in ck[part].values() if v.is_floating_point())
    from dptoolkit.report import read_log
    assert np.isnan(read_log(run).set_index("step").loc[25, "loss"])   # null reads back as NaN
    # the advice works: resume from the good checkpoint with a lower learning rate
    r = dpt("train", "--config", "test", "--data", merged, "--out", run, "--resume", *ov, "training.max_steps=30", "optimizer.lr=1e-4", check=0)
    assert "learning rate 0.001 → 0.0001" in r.stdout and json.loads(r.stdout.strip().splitlines()[-1])["steps"] == 30


@pytest.fixture
def damaged(tmp_path):
    store = sample_data(tmp_path / "d", tasks=1, episodes=6, seed=3)[0]
    f = store / "data" / "state" / "0.0"
    raw = bytearray(f.read_bytes()); raw[16:36] = bytes(20); f.write_bytes(bytes(raw))
    return store


def test_verify_and_training_name_the_damaged_chunk(damaged, tmp_path):
    assert dpt("inspect", damaged).returncode == 0                # metadata alone cannot see it
    r = dpt("inspect", damaged, "--verify", check=1)
    assert "1 damaged chunk(s)" in r.stderr and f"{damaged}/data/state/0.0" in r.stderr and "blosc" in r.stderr
    r = dpt("train", "--config", "test", "--data", damaged, "--out", tmp_path / "run", "--nprocs", 2, "--no-progress", check=1)
    line = [l for l in r.stderr.splitlines() if l.startswith("dpt: error")]
    assert len(line) == 1 and f"data/state chunk 0 ({damaged}/data/state/0.0) cannot be decoded" in line[0]
    assert "leaked semaphore" not in r.stderr and "Traceback" not in r.stderr

# a missing chunk file (zarr would read zeros): tests/test_bad_input.py rows S9 (verify and the dataset a rank opens)
