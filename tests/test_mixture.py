"""Weighted task mixtures at training time (issue 37): `task.dataset.task_weights` sets each task's share of the sampled
windows on every rank, the banner and config.yaml say the mixture, logs.jsonl counts windows per task, a resumed run
draws the same windows, and a weight for a task the store does not have is refused before any process starts."""
import os, signal, subprocess, time

import numpy as np
import yaml

from conftest import dpt
from dptoolkit.report import read_log

WEIGHTS = "task.dataset.task_weights={beat_block_hammer:3,handover_block:1,stack_blocks_two:0}"
OV = ["training.max_steps=30", "training.log_every=5", "training.checkpoint_every=10", "training.deterministic=true",
      WEIGHTS]


def test_mixture_holds_in_the_logs_and_resumes_exactly(merged, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    r = dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", full, "--no-progress", *OV, check=0)
    assert "(mixture beat_block_hammer 75%, handover_block 25%)" in r.stdout
    run = yaml.safe_load((full / "config.yaml").read_text())["run"]
    assert run["mixture"] == {"beat_block_hammer": 0.75, "handover_block": 0.25}
    log = read_log(full)
    counts = np.array([[rec[t] for t in ("beat_block_hammer", "handover_block", "stack_blocks_two")]
                       for rec in log.task_windows])
    assert (counts.sum(1) == 5 * log.global_batch.iloc[0]).all()          # every window of each log window, all ranks
    assert counts[:, 2].sum() == 0
    share = counts[:, 0].sum() / counts.sum()
    assert abs(share - 0.75) < 0.06, share                                 # 960 draws: ±0.014 standard deviation
    # kill after the first checkpoint, resume: the same windows drawn, so the same losses
    p = subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(merged), "--nprocs", "2", "--out", str(cut),
                          "--no-progress", *OV], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    t0 = time.time()
    while not (cut / "checkpoints" / "latest").exists() and time.time() - t0 < 120: time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    at = int((cut / "checkpoints" / "latest").read_text().split("_")[1])
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", cut, "--resume", "--no-progress", *OV,
        check=0)
    a, b = read_log(full).set_index("step"), read_log(cut).set_index("step")
    later = [s for s in a.index if s > at]
    assert later and a.loc[later, "loss"].tolist() == b.loc[later, "loss"].tolist()
    assert [a.task_windows[s] for s in later] == [b.task_windows[s] for s in later]


def test_unknown_task_refused_before_any_process(merged, tmp_path):
    r = dpt("train", "--config", "test", "--data", merged, "--out", tmp_path / "r", "--no-progress",
            "task.dataset.task_weights={open_laptop:2}")
    assert r.returncode == 1 and "task_weights names task 'open_laptop'; the store's tasks are 0: beat_block_hammer" \
        in r.stderr, r.stderr
    assert "rank" not in r.stderr and not (tmp_path / "r").exists()
    r = dpt("train", "--config", "test", "--data", merged, "--out", tmp_path / "r", "--no-progress",
            "task.dataset.task_weights={beat_block_hammer:-1}")
    assert r.returncode == 1 and "task.dataset.task_weights.beat_block_hammer=-1: expected a number ≥ 0" in r.stderr
