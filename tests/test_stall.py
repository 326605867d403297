"""Issue 29: a rank that stops making progress is named, the run is stopped and the last checkpoint stays 'latest'.

A real 2-rank CPU run (`dpt train --nprocs 2`, and the same under torchrun), one rank frozen with SIGSTOP the way a hung
NCCL call or a stuck data worker looks from outside; `training.stall_timeout_s=15` so the test waits seconds, not the
default two minutes."""
import os, signal, socket, subprocess, sys, time

import pytest
import yaml

from dptoolkit.store import sample_data
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint

ARGS = ["--config", "test", "--no-progress", "training.max_steps=100000", "training.checkpoint_every=20",
        "training.log_every=10", "training.stall_timeout_s=15", "training.device=cpu"]


def _free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port


def _stall_rank1(cmd, rd, limit=150):
    "Start the run, SIGSTOP rank 1 once a checkpoint exists; returns (process, rank-1 pid, latest, seconds to the end, stderr)."
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        t0 = time.time()
        while not (rd / "checkpoints" / "latest").exists():
            assert p.poll() is None and time.time() - t0 < 240, p.communicate()
            time.sleep(0.3)
        meta = yaml.safe_load((rd / "config.yaml").read_text().split("# run\n")[1])["run"]
        pid = meta["ranks"][1]["pid"]
        assert meta["ranks"][1]["host"] == socket.gethostname()
        latest = (rd / "checkpoints" / "latest").read_text()
        os.kill(pid, signal.SIGSTOP); t1 = time.time()
        out, err = p.communicate(timeout=limit)
        return p, pid, latest, time.time() - t1, err
    finally:
        if p.poll() is None: p.kill(); p.communicate()


def _check_outcome(rd, pid, latest, err):
    lines = [l for l in err.splitlines() if "stalled:" in l]
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    assert line.startswith("dpt: error: stalled: no rank has made a training step for"), line
    assert f"rank 1 (pid {pid} on {socket.gethostname()}) has not answered for" in line and "process state T (stopped)" in line, line
    # rank 0 waits for rank 1 in a collective: a step's gradient all-reduce, or the log step's one when rank 1 was
    # stopped between its backward and the log step (CI saw it: the ranks ran 10 steps past the checkpoint first)
    assert "rank 0 (pid" in line and ("in forward/backward or its all-reduce" in line   # where rank 0 waits for it:
                                      or "in the log step's all-reduce" in line           # a step, a log step, or a
                                      or "is writing a checkpoint at step" in line), line  # checkpoint's collective
    import re
    at = int(re.search(r"rank 0 \(pid \d+ on [^)]+\) is [^;)]* at step (\d+)", line).group(1))
    assert at >= int(latest.removeprefix("step_")), line   # steps done; never behind the checkpoint that was latest
    assert "the last checkpoint stays 'latest'" in line
    # no rank left behind, the last checkpoint unchanged and loadable, rank 0's stacks in the run folder
    for _ in range(50):
        if not os.path.exists(f"/proc/{pid}"): break
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}"), f"rank 1 (pid {pid}) is still there"
    assert (rd / "checkpoints" / "latest").read_text() == latest
    ck = load_checkpoint(latest_checkpoint(rd))
    assert ck["state"]["step"] == int(latest.removeprefix("step_"))
    stacks = (rd / "stacks-rank0.txt").read_text()
    assert stacks.startswith("rank 0, pid") and "train_worker" in stacks, stacks[:2000]
    assert str(rd / "stacks-rank0.txt") in line


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sample_data(tmp_path_factory.mktemp("s"), tasks=1, episodes=6, seed=3)[0]


def test_a_stopped_rank_is_named_and_the_run_stopped_under_launch(store, tmp_path):
    rd = tmp_path / "run"
    p, pid, latest, took, err = _stall_rank1(["dpt", "train", "--nprocs", "2", "--data", str(store), "--out", str(rd), *ARGS], rd)
    assert p.returncode == 1, err[-3000:]
    assert took < 120, f"named after {took:.0f} s"             # the goal: a stalled rank named within 2 minutes
    _check_outcome(rd, pid, latest, err)
    assert "Traceback" not in err and "leaked semaphore" not in err, err[-3000:]


def test_a_stopped_rank_is_named_and_the_run_stopped_under_torchrun(store, tmp_path):
    "No launcher of ours: the ranks' own watch threads; the lowest live rank reports and exits, torchrun stops the rest."
    rd = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "-m", "dptoolkit.cli", "train", "--data", str(store), "--out", str(rd), *ARGS]
    p, pid, latest, took, err = _stall_rank1(cmd, rd)
    assert p.returncode != 0
    assert took < 120, f"stopped after {took:.0f} s"
    _check_outcome(rd, pid, latest, err)


def test_a_stop_file_checkpoints_and_stops_every_rank(store, tmp_path):
    "`echo reason > RUN/STOP`: the ranks agree at the next log step, checkpoint and exit 0; a resume clears the file."
    import json
    rd = tmp_path / "run"
    cmd = ["dpt", "train", "--nprocs", "2", "--data", str(store), "--out", str(rd), *ARGS]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        t0 = time.time()
        while not (rd / "checkpoints" / "latest").exists():
            assert p.poll() is None and time.time() - t0 < 240, p.communicate()
            time.sleep(0.3)
        (rd / "STOP").write_text("end of the day\n")
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None: p.kill(); p.communicate()
    assert p.returncode == 0, err[-3000:]
    res = json.loads((rd / "result.json").read_text())
    assert res["stopped_by"] == "end of the day (the run folder's STOP file)" and not res["completed"]
    assert (rd / "checkpoints" / "latest").read_text() == f"step_{res['steps']:06d}" and res["steps"] % 10 == 0
    r = subprocess.run(["dpt", "train", "--nprocs", "1", "--data", str(store), "--out", str(rd), "--resume", *ARGS[:-5],
                        f"training.max_steps={res['steps'] + 10}", "training.log_every=10", "training.device=cpu"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and not (rd / "STOP").exists(), r.stderr[-3000:]
    assert json.loads((rd / "result.json").read_text())["completed"]
