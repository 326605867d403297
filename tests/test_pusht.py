"""Diffusion Policy's own benchmark (issue 79) on a fixture of its authors' PushT store (three real episodes,
tests/data/pusht/make_fixture.py): the packaged PushT configs train on the store as it is stored, a run plays in
gym-pusht through the envs room (`dpt rollout`, and a bare `dpt rollout RUN` plays the run's own environment), the
observation map agrees with the store's own keypoints and frames, the store's episodes replay exactly, and bad input
gets one line each."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gym_pusht", reason="gym-pusht is not installed (pip install 'dptoolkit[sim]')")

from conftest import alive, dpt, rank_processes
from dptoolkit.config import ConfigError, for_store, select_config
from dptoolkit.environments import PUSHT_ID, EnvError, pusht_keypoints
from dptoolkit.environments import GymEnv
from dptoolkit.envs import check_env, replay_pusht
from dptoolkit.train import train

FIX = Path(__file__).parent / "data" / "pusht" / "pusht_fixture.zarr"
TINY = ["policy.down_dims=[16,32]", "policy.diffusion_step_embed_dim=16", "policy.num_inference_steps=4",
        "dataloader.batch_size=16", "training.log_every=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("pusht") / "run"
    train(for_store(FIX, TINY + ["training.max_steps=4", "training.checkpoint_every=4"]), nprocs=1, run_dir=d,
          progress=False)
    return d


def test_one_step_of_each_packaged_pusht_config(tmp_path):
    out = dpt("config", FIX, check=0).stdout                # a new user's first command on the authors' store
    assert out.startswith("name: pusht_keypoint") and "# also packaged for this store: pusht_image" in out, out[:300]
    one = ["training.max_steps=1", "dataloader.batch_size=2", "training.log_every=1"]
    r = train(for_store(FIX, one), nprocs=1, run_dir=tmp_path / "kp", progress=False)       # the paper's size: 65.8 M
    assert r.metrics["steps"] == 1 and np.isfinite(r.metrics["final_loss"])
    # the image policy reads the stored channels-last float frames through ResNet-18 (GroupNorm, 84×84 crop); a
    # narrower U-Net than the paper's [512, 1024, 2048] keeps this test's step short
    r = train(for_store(FIX, one + ["policy.down_dims=[32,64]"], name="pusht_image"), nprocs=1,
              run_dir=tmp_path / "img", progress=False)
    assert r.metrics["steps"] == 1 and np.isfinite(r.metrics["final_loss"])


def test_a_run_plays_its_own_environment(run):
    r = dpt("rollout", run, "--episodes", 2, "--workers", 2, "--max-steps", 24, "--json", check=0)
    rec = json.loads(r.stdout)[0]
    assert rec["episodes"] == 2 and rec["seeds"] == [100000, 100001]        # diffusion_policy's PushT test seeds
    eps = rec["episodes_table"]
    assert all(e["steps"] == 24 and e["task"] == PUSHT_ID and 0 <= e["score"] <= 1 for e in eps)
    assert rec["score"] == pytest.approx(np.mean([e["score"] for e in eps]))


def test_the_observation_map_agrees_with_the_store(tmp_path):
    import zarr
    g = zarr.open_group(str(FIX), mode="r")
    S, K, img, A = (np.asarray(g[f"data/{k}"][:]) for k in ("state", "keypoint", "img", "action"))
    assert max(np.abs(pusht_keypoints(s[2:]) - k).max() for s, k in zip(S, K)) < 0.05   # px, of a 512 px window
    env = GymEnv(PUSHT_ID, ["img", "agent_pos"])
    u = env.env.unwrapped                 # the first state, angle first (the replay check's order), then its actions
    env.env.reset(seed=0)
    u._setup()
    u.agent.position, u.block.angle = list(map(float, S[0, :2])), float(S[0, 4])
    u.block.position = list(map(float, S[0, 2:4]))
    u.space.step(u.dt)
    for t in range(20):
        o = env.spec.obs(u.get_obs(), u._get_info())
        assert o["img"].shape == (3, 96, 96) and o["img"].dtype == np.uint8
        assert np.abs(o["img"].astype(np.float32) - img[t].transpose(2, 0, 1)).mean() < 1.0   # of 255
        np.testing.assert_allclose(o["agent_pos"], S[t, :2], atol=1e-3)
        env.step(A[t])


def test_the_store_replays_exactly():
    rep = replay_pusht(FIX)
    assert rep["exact"].all() and (rep["max_error_px"] < 1e-3).all(), rep
    assert rep["score"].between(0.5, 1).all(), rep         # the demonstrations push the T onto its goal


def test_bad_input_one_line_each(run, tmp_path):
    r = dpt("rollout", run, "--env", "gym_pusht/PushX-v0", "--episodes", 1, check=1)
    assert r.stderr.startswith("dpt: error: gym_pusht/PushX-v0: no gymnasium environment of that id") and \
        r.stderr.count("\n") == 1, r.stderr
    r = dpt("rollout", run, "--env", "gym_nothere/Thing-v0", "--episodes", 1, check=1)
    assert "no module gym_nothere registers namespace gym_nothere; install the package that provides it (its name " \
        "is often gym-nothere)" in r.stderr, r.stderr
    r = dpt("rollout", run, "--env", "gym_pussht/PushT-v0", "--episodes", 1, check=1)     # a typo: the nearest id
    assert "did you mean gym_pusht/PushT-v0?" in r.stderr and "pip install" not in r.stderr, r.stderr
    r = dpt("rollout", run, "--env", "Pendulum-v1", "--episodes", 1, check=1)             # a plain id: played, refused
    assert "the policy reads agent_pos, which Pendulum-v1 does not give (its observation map gives state)" in r.stderr \
        and "expected one of" not in r.stderr, r.stderr                                  # for its keys, not its id
    r = dpt("rollout", run, "--env", PUSHT_ID, "--env-kwargs", "damping", "--episodes", 1, check=1)
    assert "--env-kwargs 'damping': 'damping' is not KEY=VALUE" in r.stderr and "ValueError" not in r.stderr, r.stderr
    r = dpt("rollout", run, "--task", "transfer_cube", "--episodes", 1, check=1)      # a PushT run sent into ALOHA
    assert "the policy reads agent_pos, which the transfer_cube simulator does not give" in r.stderr, r.stderr
    r = dpt("rollout", run, "--env", PUSHT_ID, "--env-kwargs", "nonsense=3", "--episodes", 1, check=1)
    assert "env_kwargs {'nonsense': 3} refused by the environment" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    from dptoolkit.protocol import build_policy
    with pytest.raises(EnvError, match="reads n_contacts, which gym_pusht/PushT-v0 does not give"):
        check_env(build_policy(for_store(FIX, TINY + ["task.dataset.obs_keys=[n_contacts]"])), PUSHT_ID)
    from dptoolkit.policy import DiffusionPolicy        # an ALOHA policy (14 joints) sent into PushT: the reverse
    aloha = DiffusionPolicy(14, {"state": (14,)}, horizon=8, n_obs_steps=2, n_action_steps=4, down_dims=(16, 32),
                            n_groups=4, diffusion_step_embed_dim=16)
    with pytest.raises(EnvError, match="reads state of 14 values, gym_pusht/PushT-v0 gives 5"):
        check_env(aloha, PUSHT_ID)
    aloha.obs_encoder.low_dim["state"] = 5               # were its state as wide, its 14 actions are not PushT's 2
    with pytest.raises(EnvError, match="acts in 14 dimensions, gym_pusht/PushT-v0 takes 2"):
        check_env(aloha, PUSHT_ID)
    from dptoolkit.store import write_store             # a width no recipe names: the low-dim recipe at it
    assert select_config(write_store(tmp_path / "a3.zarr", {"state": np.zeros((9, 3), np.float32),
                                                           "action": np.zeros((9, 3), np.float32)}, [9]).path) == "lowdim"
    assert not list(run.glob("rollouts*"))


def test_a_killed_rollout_worker_is_one_line_and_keeps_what_finished(run):
    """Issue 81 (2): a rollout whose worker process is killed says which seeds it left, keeps (prints) the episodes that
    finished and names the command that plays the rest, instead of BrokenProcessPool."""
    import os, signal, subprocess, time
    import psutil
    p = subprocess.Popen(["dpt", "rollout", str(run), "--episodes", "200", "--workers", "2", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        t0, workers = time.time(), []
        while len(workers) < 2 and time.time() - t0 < 60 and p.poll() is None:
            workers = alive(rank_processes(p.pid))
            time.sleep(0.1)
        assert len(workers) == 2, p.communicate()
        # no wait: 200 episodes in 10 lockstep groups of 20 are seconds of work, and a busy CI machine saw the workers
        # so late that a second's wait let all 40 of an earlier version finish (exit 0, nothing to kill), and once
        # with 80 the kill came after the last group (a bench beside CI)
        for w in alive(rank_processes(p.pid)) or workers:   # the workers alive now (a process seen before may be gone)
            try:
                w.send_signal(signal.SIGKILL)
                break
            except psutil.NoSuchProcess: continue
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1 and err.count("\n") == 1, err
    import re
    m = re.search(r"a worker process ended abruptly \(killed, or out of memory\) with seed\(s\) (\d+)[, ].*"
                  r"; (\d+) of 200 episodes finished and are kept; play the rest with: (.*)$", err.strip())
    assert m, err
    first, kept, cmd = int(m[1]), int(m[2]), m[3]
    # the held-out seeds are 100000 …; however many finished before the kill (a busy machine lets more), the seeds
    # left and the command that plays them follow from what finished
    assert 100000 <= first < 100200 and first - 100000 <= kept < 200, err   # every seed before the first left finished
    m = re.fullmatch(rf"dpt rollout {re.escape(str(run))} --env gym_pusht/PushT-v0 --seed {first} --episodes (\d+)", cmd)
    assert m and 200 - kept <= int(m[1]) <= 100200 - first, err            # the span covers every seed left


def test_a_pusht_run_is_fine_tuned_in_its_own_environment(tmp_path):
    """Issue 79: `dpt finetune` in a gymnasium environment: a flow policy trained on the PushT fixture is fine-tuned
    (RIPT) with its episodes played in gym-pusht, the run's own `eval.env`; expert iteration is refused there (it
    writes ALOHA episodes into the store)."""
    from dptoolkit.rl import RLError, finetune, prepare_finetune, rl_log
    src = tmp_path / "flow"
    train(for_store(FIX, TINY + ["policy.objective=flow", "training.max_steps=2", "training.checkpoint_every=2"]),
          nprocs=1, run_dir=src, progress=False)
    rl = ["rl.states=1", "rl.group=2", "rl.pool=2", "rl.max_steps=12", "rl.epochs=1", "rl.minibatches=1",
          "rl.iterations=1", "rl.checkpoint_every=1"]
    finetune(src, out=tmp_path / "ft", nprocs=1, progress=False, overrides=rl)
    log = rl_log(tmp_path / "ft")
    assert log["step"].tolist() == [1] and int(log["episodes"].iloc[0]) == 2, log
    assert (tmp_path / "ft" / "result.json").exists() and (tmp_path / "ft" / "checkpoints" / "latest").exists()
    import yaml
    assert yaml.safe_load((tmp_path / "ft" / "config.yaml").read_text().split("# run\n")[0])["rl"]["task"] == PUSHT_ID
    with pytest.raises(RLError, match="in a gymnasium environment fine-tune with rl.method=ript"):
        prepare_finetune(src, tmp_path / "it", 1, ["rl.method=iterate"])


def test_a_study_over_pusht_is_scored_in_gym_pusht(tmp_path):
    "Issue 79: a study on the PushT store measures its runs by success in gym-pusht (the config's eval.env), not MSE."
    from dptoolkit.study_grid import _manifest
    from dptoolkit.study import make_study
    from dptoolkit.study_runner import _run_cfg
    made = make_study(for_store(FIX, TINY + ["training.max_steps=2"]), {"optimizer.lr": [1e-3, 3e-4]}, [0],
                      tmp_path / "s", rollout=dict(episodes=2))
    m = _manifest(made)
    assert m["sim"] == PUSHT_ID and len(m["runs"]) == 2
    cfg = _run_cfg(m, m["runs"][0])     # each run is watched in its environment, its final checkpoint always
    assert (cfg.eval.rollout_every, cfg.eval.rollout_episodes, cfg.eval.env) == (2, 2, PUSHT_ID)
