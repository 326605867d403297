"""Success measured while a policy trains (issue 36): `eval.rollout_every` starts the watcher beside the ranks, each
rollout step's checkpoint is rolled out in the real simulator (gym-aloha, MuJoCo) and its success record lands in
logs.jsonl and TensorBoard; `dpt rollout RUN --every N` does the same afterwards from saved checkpoints; bad input is
refused before any episode. Small: a tiny low-dim policy, 2 episodes of 60 steps per rollout."""
import json, os

import numpy as np
import pytest
import zarr

from conftest import dpt

pytest.importorskip("gym_aloha")
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from dptoolkit.aloha import make_demos
    d = tmp_path_factory.mktemp("demos")
    return make_demos("transfer_cube", n=3, out=d / "demos.zarr", workers=1, progress=False).info.path


TINY = ["task.dataset.obs_keys=[env_state,state]", "training.max_steps=20", "training.log_every=5",
        "dataloader.batch_size=16", "training.checkpoint_every=0", "eval.rollout_episodes=2", "eval.rollout_seed=500",
        "eval.rollout_workers=1", "task.dataset.val_ratio=0"]


def test_success_records_while_training(demos, tmp_path):
    from dptoolkit.report import plot_success, read_log, success_time
    run = tmp_path / "run"
    r = dpt("train", "--config", "test", "--data", demos, "--out", run, "--no-progress", *TINY,
            "eval.rollout_every=10", "logging.tensorboard=true", timeout=600, check=0)
    assert "waiting for the rollouts of step 20" in r.stdout
    s = read_log(run, "rollout")
    # the watcher rolls out the newest checkpoint (never a queue): on a loaded machine the 20 tiny steps can pass
    # step 10 before the watcher's first look (CI saw [20]); the final step is always rolled out
    steps = s["step"].tolist()
    assert steps in ([10, 20], [20]) and (s["episodes"] == 2).all(), steps
    assert s["seeds"].tolist() == [[500, 501]] * len(steps)
    assert (s["success_low"] <= s["success"]).all() and (s["success"] <= s["success_high"]).all()
    assert s["train_s"].is_monotonic_increasing and s["train_s"].iloc[0] > 0
    assert read_log(run)["step"].tolist() == [5, 10, 15, 20]                 # training records apart
    res = json.loads((run / "result.json").read_text())
    assert res["success"] == s["success"].iloc[-1] and res["episodes"] == 2
    assert len(plot_success(run).axes) == 2 and len(success_time(run, 0.0)) == 3
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/success")] == steps
    assert not list((run / "rollouts").glob("step_*")), "snapshots are removed after their rollout"


def test_rollouts_after_training_from_saved_checkpoints(demos, tmp_path):
    from dptoolkit.report import read_log
    run = tmp_path / "run"
    dpt("train", "--config", "test", "--data", demos, "--out", run, "--no-progress", *TINY,
        "training.checkpoint_every=10", "training.keep_checkpoints=5", check=0)
    r = dpt("rollout", run, "--every", 10, "--episodes", 2, "--seed", 500, "--workers", 1, "--max-steps", 60,
            timeout=600, check=0)
    assert "step_000010: success" in r.stdout and "step_000020: success" in r.stdout
    assert read_log(run, "rollout")["step"].tolist() == [10, 20]


def test_refused_before_any_episode(demos, tmp_path):
    from dptoolkit.store import sample_data, write_store
    plain = sample_data(tmp_path, tasks=1, episodes=3)[0]
    r = dpt("train", "--config", "test", "--data", plain, "--out", tmp_path / "r", "eval.rollout_every=5",
            "--no-progress")
    assert r.returncode == 1 and "was not made by the simulator (no 'sim' attributes)" in r.stderr
    assert not (tmp_path / "r").exists()
    g = zarr.open_group(str(demos), mode="r")               # a store whose policy reads a camera the simulator lacks
    data = {k: g[f"data/{k}"][:] for k in ("state", "action", "env_state")}
    data["wrist_camera"] = np.zeros((len(data["state"]), 3, 24, 32), np.uint8)
    odd = write_store(tmp_path / "odd.zarr", data, g["meta/episode_ends"][:], attrs=dict(g.attrs)).path
    r = dpt("train", "--config", "test", "--data", odd, "--out", tmp_path / "r2", "eval.rollout_every=5",
            "task.dataset.obs_keys=[wrist_camera,state]", "--no-progress")
    assert r.returncode == 1 and "the policy reads wrist_camera, which the transfer_cube simulator does not give" \
        in r.stderr, r.stderr
    dpt("train", "--config", "test", "--data", odd, "--out", tmp_path / "r3", "task.dataset.obs_keys=[wrist_camera,state]",
        "training.max_steps=2", "--no-progress", check=0)
    r = dpt("rollout", tmp_path / "r3", "--episodes", 1, "--workers", 1)
    assert r.returncode == 1 and "r3: the policy reads wrist_camera, which the transfer_cube simulator does not give" \
        in r.stderr and "episode" not in r.stdout


def test_killed_rollout_leaves_no_workers(tmp_path):
    "SIGKILL of the process running a rollout ends its worker processes too (they would simulate on, unowned)."
    import subprocess, sys, time
    import psutil
    # 400 episodes: minutes of work for each worker, so one that outlives its owner is told from one slow to die on a
    # loaded machine; a worker that has exited but waits to be reaped by init (a zombie) runs nothing: it has ended
    code = "from dptoolkit.sim import rollout; rollout('hold', episodes=400, workers=2, progress=False)"
    p = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "MUJOCO_GL": "egl"})
    workers, deadline = [], time.monotonic() + 120
    while len(workers) < 2 and time.monotonic() < deadline and p.poll() is None:   # the children of its forkserver
        time.sleep(0.2)
        servers = [c for c in psutil.Process(p.pid).children() if "forkserver" in " ".join(c.cmdline())]
        workers = [w for s in servers for w in s.children()]
    assert len(workers) == 2, f"the rollout did not start its 2 workers: {workers} (exit {p.poll()})"
    time.sleep(2)                                       # inside their first episodes
    p.kill()
    p.wait()
    def running():
        out = []
        for w in workers:
            try: out += [w.pid] if w.status() != psutil.STATUS_ZOMBIE else []
            except psutil.NoSuchProcess: pass
        return out
    deadline = time.monotonic() + 60
    while running() and time.monotonic() < deadline: time.sleep(0.05)
    assert not running(), f"workers outlived the killed rollout: {running()}"


def test_camera_policy_taught_the_cube_pose_never_reads_it(tmp_path):
    """`policy.obs_encoder.aux_keys=[env_state]` end to end: DART camera demonstrations from the shell (`--noise`), a
    run that loads env_state as a target, a checkpoint with the prediction head, a policy that reads the camera and
    qpos only, and a closed-loop episode of it in the simulator."""
    import torch
    from safetensors import safe_open
    from dptoolkit.evaluate import load_policy
    store = tmp_path / "cam.zarr"
    r = dpt("sim-data", "--episodes", 1, "--camera", "--size", "24x32", "--noise", 0.02, "--keep-failed",
            "--workers", 1, "-o", store, "--no-progress", timeout=300, check=0)
    assert zarr.open_group(str(store), mode="r").attrs["sim"]["noise"] == 0.02, r.stdout
    run = tmp_path / "run"
    dpt("train", "--config", "test", "--data", store, "--out", run, "--no-progress", "training.max_steps=4",
        "task.dataset.obs_keys=[head_camera,state,env_state]", "policy.obs_encoder.aux_keys=[env_state]",
        "policy.obs_encoder.pool=spatial_softmax", "dataloader.batch_size=8", "task.dataset.val_ratio=0", check=0)
    ckpt = next((run / "checkpoints").glob("step_*"))
    with safe_open(str(next(ckpt.glob("*.safetensors"))), "pt") as f:
        assert any("obs_encoder.aux_head.weight" in k for k in f.keys())
    pol = load_policy(run)[0]
    assert (pol.low_dim_keys, pol.image_keys, pol.aux_keys) == (["state"], ["head_camera"], ["env_state"])
    T = pol.n_obs_steps
    obs = {"head_camera": torch.zeros(1, T, 3, 24, 32, dtype=torch.uint8), "state": torch.zeros(1, T, 14)}
    assert pol.predict_action(obs)["action"].shape[-1] == 14                  # no env_state given
    r = dpt("rollout", run, "--episodes", 1, "--max-steps", 12, "--workers", 1, "--steps", 2, "--json", timeout=300,
            check=0)
    row = json.loads(r.stdout)[0]
    assert (row["episodes"], row["mean_steps"], row["unstable"]) == (1, 12, 0), row   # 12 steps driven from pixels
    assert row["sampling_steps"] == 2, row                                # each chunk sampled in 2 steps, not the config's
    r = dpt("rollout", run, "--every", 1, "--steps", 1)
    assert r.returncode == 1 and "dpt: error: --steps is for one run's final policy" in r.stderr, r.stderr


def test_a_dead_watcher_is_said_and_recorded(demos, tmp_path):
    """Issue 50 (bad-input row T18): the watcher killed while the run trains; the run still ends well (exit 0), and says
    in one line that success stopped being recorded, where the watcher's output is and the command that rolls out the
    saved checkpoints; result.json records it."""
    import psutil, signal, subprocess, time
    run = tmp_path / "run"
    p = subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(demos), "--out", str(run), "--no-progress",
                          *TINY, "training.max_steps=100000", "eval.rollout_every=10"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        watcher, t0 = None, time.time()
        while watcher is None and time.time() - t0 < 180 and p.poll() is None:
            for c in psutil.Process(p.pid).children(recursive=True):
                try: watcher = c if "dptoolkit.success:watch" in c.cmdline() else watcher
                except psutil.NoSuchProcess: pass
            time.sleep(0.2)
        assert watcher is not None, p.communicate()[0][-2000:]
        watcher.kill()
        time.sleep(1)                                      # (a zombie until the run reaps it at its end)
        os.killpg(p.pid, signal.SIGINT)                    # the run stops at its next log step, with a checkpoint
        out = p.communicate(timeout=300)[0]
    finally:                                               # a failed assertion leaves no run training on
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
    said = "the rollout watcher ended before the run did (killed by SIGKILL)"
    assert p.returncode == 130 and said in out and f"dpt rollout {run} --every 10" in out, out[-3000:]
    assert said in json.loads((run / "result.json").read_text())["rollouts_error"]


def test_fewer_flow_steps_is_said_for_the_velocity_target(demos, tmp_path):
    """Issue 69: a flow run that predicts the velocity, sampled in fewer Euler steps than its own, says in one line what
    that was measured to cost (the clean-chunk target, flow's default, says nothing: the objective chapter checks it)."""
    dpt("train", "--config", "test", "--data", demos, "--out", tmp_path / "v", "--nprocs", 1, "--no-progress",
        "task.dataset.obs_keys=[env_state,state]", "training.max_steps=2", "policy.objective=flow",
        "policy.num_inference_steps=4", "policy.down_dims=[16,32]", "policy.prediction_type=epsilon", check=0)
    r = dpt("rollout", tmp_path / "v", "--episodes", 1, "--workers", 1, "--max-steps", 6, "--steps", 1, "--json", check=0)
    notes = [l for l in r.stderr.splitlines() if l.startswith("note:")]
    assert len(notes) == 1 and "predicts the flow's velocity" in notes[0] and "1 of its 4 Euler steps" in notes[0], r.stderr
    assert json.loads(r.stdout)[0]["sampling_steps"] == 1
