"""The ALOHA simulator chapter end to end on a small scale (issue 25): `dpt sim-data` writes a store the toolkit trains
on, `dpt rollout` runs the trained policy and the baselines in worker processes on recorded seeds, and bad input gets
one line: a missing gym-aloha, a renderer that cannot start, a policy whose action dimension is not the task's."""
import json, os, subprocess, sys

import numpy as np
import pytest

pytest.importorskip("gym_aloha", reason="the simulator extra is not installed (pip install 'dptoolkit[sim]')")

from conftest import dpt
from dptoolkit.config import for_store
from dptoolkit.store import describe
from dptoolkit.train import train


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    r = dpt("sim-data", "--episodes", 2, "-o", d / "demos.zarr", "--workers", 2, "--camera", "--size", "24x32", "--no-progress", check=0)
    assert "expert success 2/2" in r.stdout, r.stdout
    cfg = for_store(d / "demos.zarr", name="test", overrides=["task.dataset.obs_keys=[env_state,state]", "training.max_steps=10",
                                                            "training.checkpoint_every=10", "training.log_every=5"])
    train(cfg, nprocs=1, run_dir=d / "run", progress=False)
    return d


def test_sim_data_writes_a_store_the_toolkit_trains_on(sim_run):
    info = describe(sim_run / "demos.zarr")
    assert info.episodes == 2 and info.steps == 800 and info.action_dim == 14
    assert info.arrays["head_camera"].shape[1:] == (3, 24, 32) and info.arrays["head_camera"].dtype == "uint8"
    assert info.arrays["env_state"].shape[1:] == (7,)
    assert (sim_run / "run" / "result.json").exists()
    # issue 80: each episode carries its task's seen phrasings, the unseen ones are held out apart; dpt inspect says so
    from dptoolkit.language import episode_instructions, held_out_instructions
    from dptoolkit.aloha import PHRASINGS
    seen, unseen = PHRASINGS["transfer_cube"]
    assert episode_instructions(info) == [seen, seen] and held_out_instructions(info) == {"transfer_cube": unseen}
    out = dpt("inspect", sim_run / "demos.zarr", check=0).stdout
    assert f"held out for evaluation (transfer_cube): {unseen[0]}" in out and "5 distinct over 2 of 2 episodes" in out


def test_rollout_policy_and_baselines_on_recorded_seeds(sim_run, tmp_path):
    r = dpt("rollout", sim_run / "run", "--episodes", 2, "--workers", 2, "--max-steps", 30, "--seed", 7, "--baselines",
            "--json", "--video", tmp_path / "v", "--videos", 1, check=0)
    res = {x["policy"]: x for x in json.loads(r.stdout)}
    assert set(res) == {"run", "expert", "hold"}
    for x in res.values():
        assert x["seeds"] == [7, 8] and x["episodes"] == 2 and 0 <= x["ci_low"] <= x["success_rate"] <= x["ci_high"] <= 1
    assert res["hold"]["successes"] == 0 and res["expert"]["successes"] == 2     # the expert finishes within 400 steps
    assert all(e["steps"] == 30 for e in res["run"]["episodes_table"])          # a 10-step policy does not succeed in 30
    (video,) = res["run"]["videos"]
    assert os.path.getsize(video) > 1000 and open(video, "rb").read(12)[4:8] == b"ftyp"   # an mp4


def test_action_dimension_mismatch_is_refused_before_any_episode(tmp_path):
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.aloha import SimError
    from dptoolkit.sim import rollout
    p = DiffusionPolicy(16, {"state": (16,)}, down_dims=(16, 32))
    with pytest.raises(SimError, match="acts in 16 dimensions, transfer_cube takes 14"): rollout(p, episodes=1, progress=False)


def test_missing_simulator_and_failing_renderer_say_what_to_do(tmp_path):
    block = ("import sys, importlib.abc\nclass B(importlib.abc.MetaPathFinder):\n def find_spec(self, n, p, t=None):\n"
             "  if n.split('.')[0] == 'gym_aloha': raise ImportError('blocked', name=n)\nsys.meta_path.insert(0, B())\n")
    r = subprocess.run([sys.executable, "-c", block + "import sys\nsys.argv = ['dpt', 'sim-data', '--episodes', '1', '-o', "
                        f"'{tmp_path / 'x.zarr'}']\nfrom dptoolkit.cli import main\nsys.exit(main())"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "dpt: error: the simulator needs gym-aloha (MuJoCo + dm_control): pip install 'dptoolkit[sim]' (missing: gym_aloha)"], r.stderr
    env = {**os.environ, "MUJOCO_GL": "osmesa"}    # osmesa cannot start on this machine
    code = "from dptoolkit.aloha import AlohaSim\ne = AlohaSim(camera=True)\ne.reset(0)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "MUJOCO_GL=osmesa" in r.stderr and "libegl1" in r.stderr, r.stderr[-2000:]


def test_insertion_expert_store_and_rollouts_in_their_own_task(tmp_path):
    "Issue 67: the second task — its expert reaches reward 4, its store, and a run of it rolls out in insertion."
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.aloha import SimError, make_demos
    from dptoolkit.sim import check_policy, recorded, rollout
    d = make_demos("insertion", n=1, out=tmp_path / "ins.zarr", workers=1, progress=False, seed=4)
    assert d.success == [True] and describe(tmp_path / "ins.zarr").arrays["env_state"].shape == (400, 14)
    cfg = for_store(tmp_path / "ins.zarr", name="test", overrides=["task.dataset.obs_keys=[state,env_state]",
                                                                  "training.max_steps=2", "training.log_every=1"])
    train(cfg, nprocs=1, run_dir=tmp_path / "run", progress=False)
    assert recorded(tmp_path / "run").env == "insertion"
    r = dpt("rollout", tmp_path / "run", "--episodes", 1, "--workers", 1, "--max-steps", 12, "--baselines", "--json",
            check=0)
    res = {x["policy"]: x for x in json.loads(r.stdout)}
    assert res["run"]["episodes_table"][0]["steps"] == 12 and res["expert"]["successes"] == 1   # insertion's expert
    cube = DiffusionPolicy(14, {"state": (14,), "env_state": (7,)}, down_dims=(16, 32))
    with pytest.raises(SimError, match="reads env_state of 7 values .transfer_cube's., the insertion simulator gives 14"):
        check_policy(cube, "insertion")
    with pytest.raises(SimError, match="env_state of 7"): rollout(cube, "insertion", episodes=1, progress=False)


def test_a_task_name_chooses_the_environment_of_a_task_conditioned_policy():
    "Issue 67: --task-name of a policy told its task picks the simulator task of that name; a name it lacks: one line."
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.aloha import SimError
    from dptoolkit.sim import rollout, rollout_task
    p = DiffusionPolicy(14, {"state": (14,)}, down_dims=(16, 32), task_embed_dim=4,
                        task_names=["transfer_cube", "insertion"])
    for name in ("insertion", "transfer_cube"):
        res = rollout(p, task_name=name, episodes=1, workers=1, max_steps=6, progress=False)
        assert res.episodes["task"].tolist() == [name] and res.episodes["steps"].tolist() == [6]
    assert rollout_task("insertion", "transfer_cube") == "insertion"          # --task wins: the environment asked for
    with pytest.raises(SimError, match="--task-name stack_cups: the simulator has no task of that name"):
        rollout_task(None, "stack_cups")


def test_two_simulator_tasks_merge_into_a_store_named_by_their_tasks(tmp_path):
    "Issue 67: env_state differs in size across the tasks (7 / 14): merge names it and the keys it can take instead."
    from dptoolkit.merge import MergeError, merge
    from dptoolkit.aloha import make_demos
    for t in ("transfer_cube", "insertion"):
        make_demos(t, n=1, out=tmp_path / f"{t[:4]}.zarr", workers=1, progress=False)
    with pytest.raises(MergeError, match=r"data/env_state has shape \(\*, 14\), expected \(\*, 7\).*--keys action,state"):
        merge([tmp_path / "tran.zarr", tmp_path / "inse.zarr"], tmp_path / "two.zarr", progress=False)
    assert not (tmp_path / "two.zarr").exists()
    info = merge([tmp_path / "tran.zarr", tmp_path / "inse.zarr"], tmp_path / "two.zarr", keys=["state", "action"],
                 progress=False)
    assert info.task_names == ["transfer_cube", "insertion"]      # the simulator's task names, not the file names
    assert info.attrs["sim"]["tasks"] == ["transfer_cube", "insertion"] and info.attrs["sim"]["keys"] == ["state",
                                                                                                           "action"]
    # a task-conditioned policy trained on it, watched while it trains: each checkpoint rolled out in both tasks
    cfg = for_store(tmp_path / "two.zarr", name="test", overrides=[
        "policy.task_embed_dim=4", "training.max_steps=2", "training.log_every=1", "training.checkpoint_every=2",
        "eval.rollout_every=2", "eval.rollout_episodes=1", "eval.rollout_workers=1"])
    train(cfg, nprocs=1, run_dir=tmp_path / "run", progress=False)
    recs = [json.loads(l) for l in open(tmp_path / "run" / "logs.jsonl") if '"kind": "rollout"' in l]
    assert len(recs) == 1 and recs[0]["task"] == ["transfer_cube", "insertion"] and recs[0]["episodes"] == 2, recs
    assert set(recs[0]["tasks"]) == {"transfer_cube", "insertion"}
    assert all(r["episodes"] == 1 and 0 <= r["success"] <= 1 for r in recs[0]["tasks"].values())
    assert "transfer_cube" in (tmp_path / "run" / "rollouts.log").read_text()   # the watcher's line names each task
    r = dpt("rollout", tmp_path / "run", "--every", 0, "--episodes", 1, "--workers", 1, "--tasks", "insertion,stack",
            check=1)
    assert "--tasks insertion,stack: the simulator has no task 'stack'" in r.stderr
    # --pad env_state keeps the objects' poses: a task-conditioned policy reads all 14 values and, in transfer-cube
    # (7), each episode pads them with zeros as the merge did
    with pytest.raises(MergeError, match="or zero-pad it to the widest with --pad env_state"):
        merge([tmp_path / "tran.zarr", tmp_path / "inse.zarr"], tmp_path / "pad.zarr", progress=False)
    dpt("merge", tmp_path / "tran.zarr", tmp_path / "inse.zarr", "-o", tmp_path / "pad.zarr", "--pad", "env_state",
        "--no-progress", check=0)
    info = describe(tmp_path / "pad.zarr")
    assert info.arrays["env_state"].shape[1] == 14 and info.attrs["merge"]["padded"] == {"env_state": [7, 14]}
    assert "env_state" in info.attrs["sim"]["keys"]
    cfg = for_store(tmp_path / "pad.zarr", name="test", overrides=[
        "task.dataset.obs_keys=[state,env_state]", "policy.task_embed_dim=4", "training.max_steps=2"])
    train(cfg, nprocs=1, run_dir=tmp_path / "padrun", progress=False)
    for name in ("transfer_cube", "insertion"):
        r = dpt("rollout", tmp_path / "padrun", "--task-name", name, "--episodes", 1, "--workers", 1, "--max-steps", 6,
                "--json", check=0)
        assert [e["steps"] for e in json.loads(r.stdout)[0]["episodes_table"]] == [6], r.stdout


def test_gym_alohas_own_registration_plays_through_the_envs_door():
    """Issue 79: a second gymnasium environment through the same door as PushT — gym-aloha's own registration of
    transfer-cube (its seeds place the cube as our simulator's do), qpos as `state`, reward 4 = success, score = its
    highest reward / 4."""
    from dptoolkit.environments import EnvError
    from dptoolkit.environments import GymEnv
    from dptoolkit.envs import check_env, play
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.aloha import AlohaSim
    env_id = "gym_aloha/AlohaTransferCube-v0"
    env = GymEnv(env_id, ["state"])
    o = env.reset(7)
    assert o["head_camera"].shape == (3, 480, 640) and o["head_camera"].dtype == np.uint8
    ours = AlohaSim("transfer_cube").reset(7)
    np.testing.assert_allclose(o["state"], ours["qpos"], atol=1e-6)        # the same start, seed for seed
    np.testing.assert_allclose(env.env.unwrapped._env.physics.data.qpos[16:19], ours["env_state"][:3], atol=1e-6)
    pol = DiffusionPolicy(14, {"state": (14,)}, horizon=8, n_obs_steps=2, n_action_steps=4, down_dims=(16, 32),
                          n_groups=4, diffusion_step_embed_dim=16, num_inference_steps=2)
    res = play(pol, env_id, episodes=2, workers=1, seed=7, max_steps=12, progress=False)
    assert res.episodes["steps"].tolist() == [12, 12] and res.episodes["score"].between(0, 1).all()
    assert res.summary()["score"] == pytest.approx(res.episodes["max_reward"].mean() / 4)
    blind = DiffusionPolicy(14, {"state": (14,), "env_state": (7,)}, horizon=8, n_obs_steps=2, n_action_steps=4,
                            down_dims=(16, 32), n_groups=4, diffusion_step_embed_dim=16)
    with pytest.raises(EnvError, match="reads env_state, which gym_aloha/AlohaTransferCube-v0 does not give"):
        check_env(blind, env_id)
