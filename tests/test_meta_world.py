"""Meta-World through the environment door (issue 89): its scripted experts write a store (`dpt sim-data --env`),
a policy trains two steps on it, and `dpt rollout` plays the run in Meta-World with nothing but the task's name:
the store records the environment, the run inherits it (`eval.env`), `play` passes the task as `env_name`.
Needs metaworld (make setup installs it without its mujoco pin); skipped with the reason where it is absent."""
import pytest
import zarr

from conftest import dpt

pytest.importorskip("metaworld", reason="Meta-World is installed by make setup (pip install metaworld --no-deps)")
TASKS = "pick-place-v3,drawer-open-v3"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mw")
    r = dpt("sim-data", "--env", "Meta-World/MT1", "--tasks", TASKS, "--episodes", 2, "-o", d / "mw.zarr",
            "--no-progress", check=0)
    assert "episodes: 4" in r.stdout and "tasks: pick-place-v3, drawer-open-v3" in r.stdout, r.stdout
    dpt("train", "--config", "test", "--data", d / "mw.zarr", "--out", d / "run", "--no-progress",
        "training.max_steps=2", "training.checkpoint_every=2", "policy.down_dims=[16,32]",
        "eval.rollout_every=2", "eval.rollout_episodes=1", "eval.rollout_workers=1", check=0)   # scored while training
    return d


def test_one_seed_one_scene_in_every_process(tmp_path):
    """A rollout seed names one scene: the same observation from one seed in two processes and on a second reset in
    one (Meta-World's MT1 draws its goals from NumPy's global state unless seeded; the spec seeds it)."""
    import json, subprocess, sys
    code = ("import json; from dptoolkit.environments import GymEnv; e = GymEnv('Meta-World/MT1', ['state'], "
            "env_name='pick-place-v3'); print(json.dumps([e.reset(s)['state'].tolist() for s in (7, 8, 7)]))")
    runs = [json.loads(subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                                      check=True, cwd=tmp_path).stdout.splitlines()[-1]) for _ in range(2)]
    assert runs[0] == runs[1]                                    # two processes, one scene per seed
    assert runs[0][0] == runs[0][2] and runs[0][0] != runs[0][1]  # seed 7 again: its scene; seed 8: another


def test_the_experts_write_a_store_that_records_its_environment(run):
    g = zarr.open_group(str(run / "mw.zarr"), mode="r")
    assert g["data/state"].shape[1] == 39 and g["data/action"].shape[1] == 4
    assert list(g["meta/episode_task"][:]) == [0, 0, 1, 1]
    assert g.attrs["env"]["id"] == "Meta-World/MT1" and g.attrs["metaworld"]["kept"] == {"pick-place-v3": 2,
                                                                                          "drawer-open-v3": 2}
    assert "env: Meta-World/MT1" in (run / "run" / "config.yaml").read_text()      # the run inherits it


def test_the_run_rolls_out_in_meta_world_by_task_name(run):
    r = dpt("rollout", run / "run", "--task-name", "drawer-open-v3", "--episodes", 2, "--workers", 1,
            "--no-progress", "--max-steps", 40, check=0)
    row = [l for l in r.stdout.splitlines() if l.startswith("run ")][0].split()
    assert row[1] == "2" and int(row[2]) in (0, 1, 2), r.stdout                    # two episodes, success counted
    assert "UserWarning" not in r.stderr, r.stderr[-2000:]                          # the env checker is off


def test_success_while_training_and_after_is_scored_task_by_task(run):
    """The watcher plays a two-task Meta-World run in each of its tasks, told each one's name (it once asked which
    task and skipped the rollout); `dpt rollout RUN --every` does the same, or the tasks asked for."""
    import json
    recs = [json.loads(l) for l in open(run / "run" / "logs.jsonl") if '"kind": "rollout"' in l]
    assert recs and recs[-1]["step"] == 2 and recs[-1]["episodes"] == 2, (run / "run" / "rollouts.log").read_text()
    assert {t: r["episodes"] for t, r in recs[-1]["tasks"].items()} == {"pick-place-v3": 1, "drawer-open-v3": 1}
    r = dpt("rollout", run / "run", "--every", 2, "--tasks", "drawer-open-v3", "--episodes", 2, "--workers", 1,
            "--max-steps", 20, "--json", check=0)
    rec = json.loads(r.stdout)[-1]
    assert rec["task"] == "drawer-open-v3" and rec["episodes"] == 2 and rec["seeds"] == [100000, 100001], rec


def test_bad_input_one_line_each(run):
    r = dpt("rollout", run / "run", "--episodes", 1, "--workers", 1, "--no-progress", check=1)   # two tasks: which?
    assert "Meta-World/MT1 plays one task: pass task_name= (--task-name) or env_kwargs env_name=" in r.stderr, r.stderr
    r = dpt("rollout", run / "run", "--every", 2, "--tasks", "drawer-opn-v3", "--episodes", 1, check=1)
    assert ("--tasks drawer-opn-v3: the run plays Meta-World/MT1 on pick-place-v3, drawer-open-v3, not 'drawer-opn-v3'; "
            "did you mean drawer-open-v3?") in r.stderr, r.stderr
    r = dpt("rollout", run / "run", "--env", "gym_pusht/PushT-v0", "--episodes", 1, "--no-progress", check=1)
    assert "the policy reads state of 39 values, gym_pusht/PushT-v0 gives 5" in r.stderr, r.stderr  # another env
    r = dpt("sim-data", "--env", "Meta-World/MT1", "--tasks", "drawer-opn-v3", "--episodes", 1, "-o",
            run / "x.zarr", check=1)
    assert "drawer-opn-v3: Meta-World has no task of that name; did you mean drawer-open-v3?" in r.stderr, r.stderr
    assert not (run / "x.zarr").exists()
    r = dpt("sim-data", "--env", "gym_pusht/PushT-v0", "-o", run / "x.zarr", check=1)
    assert "scripted demonstrations come from Meta-World/MT1" in r.stderr, r.stderr


def test_the_store_trains_with_dpt_train_data_alone(run):
    """Issue 102: no --config: a 4-wide store without cameras gets diffusion_policy's low-dim recipe at its width, and
    the run rolls out where the store was recorded."""
    r = dpt("train", "--data", run / "mw.zarr", "--out", run / "plain", "--nprocs", 1, "--no-progress",
            "dataloader.batch_size=8", "training.max_steps=2", check=0)
    assert "dpt train: config lowdim: action 4 wide, no camera: diffusion_policy's low-dim recipe" in r.stderr, r.stderr
    assert "dpt train: recorded in Meta-World/MT1: rollouts play there (eval.env)" in r.stderr
    cfg = (run / "plain" / "config.yaml").read_text()
    assert "name: lowdim" in cfg and "action_dim: 4" in cfg and "env: Meta-World/MT1" in cfg
