"""Issue 66: RL post-training on a small scale — two iterations on two ranks from a tiny flow policy, its exact resume,
the gradient all-reduce against one process holding every rank's data, and each bad input refused in one line before
any rank starts. (The leave-one-out advantage, the kept-group rule and one Euler step's log-likelihood by hand are
checked in the rl and objective chapters.)"""
import json, os, re, shutil, subprocess, sys, textwrap

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("gym_aloha", reason="the simulator extra is not installed (pip install 'dptoolkit[sim]')")

from conftest import ROOT, dpt
from dptoolkit.checkpoint import lock_run, unlock_run
from dptoolkit.config import for_store
from dptoolkit.rl import RLError, finetune, prepare_finetune, rl_log
from dptoolkit.aloha import make_demos
from dptoolkit.train import train

TINY = ["rl.states=1", "rl.group=2", "rl.pool=2", "rl.max_steps=18", "rl.epochs=1", "rl.minibatches=2",
        "rl.checkpoint_every=1"]
VOLATILE = {"time", "wall_s", "rollout_s", "update_s"}


@pytest.fixture(scope="module")
def bc(tmp_path_factory):
    d = tmp_path_factory.mktemp("rl")
    make_demos(n=2, out=d / "demos.zarr", workers=1, progress=False)
    train(for_store(d / "demos.zarr", name="test", overrides=[
        "task.dataset.obs_keys=[state,env_state]", "policy.objective=flow", "training.max_steps=4",
        "training.log_every=2", "policy.num_inference_steps=4"]), nprocs=1, run_dir=d / "bc", progress=False)
    return d


def test_two_iterations_on_two_ranks_resume_bit_exactly(bc):
    full = finetune(bc / "bc", out=bc / "full", nprocs=2, progress=False, overrides=TINY + ["rl.iterations=2"])
    assert full.metrics["iterations"] == 2 and full.metrics["episodes"] == 8 and full.metrics["world_size"] == 2
    log = rl_log(bc / "full")
    assert log["step"].tolist() == [1, 2] and log["episodes"].tolist() == [4, 8]
    for seeds in log["seeds"]: assert seeds == [[10000], [10001]]   # each rank its own shard of the 2 states
    finetune(bc / "bc", out=bc / "half", nprocs=2, progress=False, overrides=TINY + ["rl.iterations=1"])
    finetune(bc / "bc", out=bc / "half", nprocs=2, progress=False, overrides=["rl.iterations=2"])   # continues
    a, b = (rl_log(bc / r).drop(columns=list(VOLATILE)).to_dict("records") for r in ("full", "half"))
    assert a == b
    for f in ("full", "half"):
        assert json.loads((bc / f / "checkpoints" / "step_000002" / "info.json").read_text())["episodes"] == 8
    wa, wb = (load_file(bc / r / "checkpoints" / "step_000002" / "model.safetensors") for r in ("full", "half"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = (torch.load(bc / r / "checkpoints" / "step_000002" / "state.pt", weights_only=True)["rl"]
              for r in ("full", "half"))
    assert sa["solved"] == sb["solved"] and all(torch.equal(x, y) for ga, gb in zip(sa["gens"], sb["gens"])
                                                for x, y in zip(ga, gb))
    # the fine-tuned run is a run: dpt rollout plays it, dpt report reads it
    r = dpt("rollout", bc / "full", "--episodes", 1, "--workers", 1, "--max-steps", 6, "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes"] == 1
    r = dpt("report", bc / "full", "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes"] == 8 and json.loads(r.stdout)[0]["world_size"] == 2


UPDATE = textwrap.dedent('''
    import os, sys, torch, torch.distributed as dist
    from omegaconf import OmegaConf
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.rl import Noise, Played, ppo_update, sample_chunk
    def make(seed):
        torch.manual_seed(0)
        pol = DiffusionPolicy(2, {"state": (2,)}, horizon=8, n_obs_steps=2, n_action_steps=4, down_dims=(8, 16),
                              objective="flow").eval()
        g = torch.Generator().manual_seed(seed)
        obs = {"state": torch.randn(6, 2, 2, generator=g)}
        out = sample_chunk(pol, obs, g, Noise("sde", 0.5, None, 4))
        return pol, Played([None] * 3, obs, out["path"], out["log_prob"], torch.tensor([0, 0, 1, 1, 2, 2]))
    rl = OmegaConf.create(dict(epochs=1, minibatches=1, clip=0.2, max_grad_norm=100.0, dual_clip=3.0, target_kl=0))
    adv = {0: [1.0, -0.5, 0.0], 1: [0.0, 0.0, 0.0]}   # rank 1 keeps nothing: the step must still be the same
    if sys.argv[1] == "ranks":
        dist.init_process_group("gloo")
        r = dist.get_rank()
        pol, played = make(r)
    else:   # one process: both ranks' decisions in one batch
        pol, p0 = make(0)
        _, p1 = make(1)
        played = Played([None] * 6, {"state": torch.cat([p0.obs["state"], p1.obs["state"]])},
                        torch.cat([p0.path, p1.path]), torch.cat([p0.log_prob, p1.log_prob]),
                        torch.cat([p0.episode, p1.episode + 3]))
        r = "one"
    params = list(pol.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    a = adv[r] if r != "one" else adv[0] + adv[1]
    st = ppo_update(pol, params, opt, played, a, rl, Noise("sde", 0.5, None, 4), torch.Generator().manual_seed(0))
    torch.save({k: v.clone() for k, v in pol.state_dict().items()}, os.path.join(sys.argv[2], f"{r}.pt"))
''')


def test_gradients_are_all_reduced_as_one_batch(tmp_path):
    (tmp_path / "u.py").write_text(UPDATE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(tmp_path / "u.py"), "one", str(tmp_path)], check=True, env=env, timeout=120)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29731",
                    str(tmp_path / "u.py"), "ranks", str(tmp_path)], check=True, env=env, timeout=180,
                   capture_output=True)
    one, r0, r1 = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("one", 0, 1))
    torch.manual_seed(0)
    from dptoolkit.policy import DiffusionPolicy
    before = DiffusionPolicy(2, {"state": (2,)}, horizon=8, n_obs_steps=2, n_action_steps=4, down_dims=(8, 16),
                             objective="flow").state_dict()
    assert any(not torch.equal(before[k], one[k]) for k in one)                  # the update moved the weights
    for k in one:
        assert torch.equal(r0[k], r1[k]), k                                      # every rank took the same step
        torch.testing.assert_close(r0[k], one[k], rtol=1e-5, atol=1e-6)          # as one process on all the data


def test_bad_input_is_refused_in_one_line_before_any_rank(bc, merged, tmp_path):
    run = bc / "bc"
    with pytest.raises(RLError, match="rl.group=1: a leave-one-out advantage needs at least 2"):
        prepare_finetune(run, tmp_path / "o", 2, ["rl.group=1"])
    with pytest.raises(RLError, match="3 ranks but rl.pool=2 initial states"):
        prepare_finetune(run, tmp_path / "o", 3, ["rl.pool=2"])
    other = tmp_path / "other"     # the same run on a store no simulator recorded
    shutil.copytree(run, other)
    (other / "config.yaml").write_text((run / "config.yaml").read_text().replace(str(bc / "demos.zarr"), str(merged)))
    with pytest.raises(RLError, match="which no simulator recorded"): prepare_finetune(other, tmp_path / "o", 2)
    ddpm = tmp_path / "ddpm"       # a DDPM policy: no likelihood of its chunk
    shutil.copytree(run, ddpm)
    (ddpm / "config.yaml").write_text((run / "config.yaml").read_text().replace("objective: flow", "objective: ddpm"))
    with pytest.raises(RLError, match="cannot return the log-likelihood of the chunk it samples .objective ddpm"):
        prepare_finetune(ddpm, tmp_path / "o", 2)
    steered = prepare_finetune(ddpm, tmp_path / "o", 2, ["rl.noise=latent"])   # steering needs no chain likelihood
    assert steered.policy._target_ == "dptoolkit.steer.SteeredPolicy" and steered.rl.lr == 1e-3
    lock_run(run)                  # a run being trained
    try:
        with pytest.raises(RLError, match="is being trained now"): prepare_finetune(run, tmp_path / "o", 2)
    finally: unlock_run(run)
    assert not (tmp_path / "o").exists()                                         # nothing written
    r = dpt("finetune", run, "--out", tmp_path / "o", "rl.group=1", check=1)
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("dpt: error: rl.group=1")
    r = dpt("finetune", run, "--out", tmp_path / "o", "training.seed=3", check=1)
    assert "rl.KEY=VALUE" in r.stderr
    for bad, says in (("rl.min_std=-1", "rl.min_std=-1: must be ≥ 0"), ("rl.weigh=chunk", "expected decision or episode"),
                      ("rl.method=sft", "rl.method='sft': expected ppo, imitate or iterate"),
                      ("rl.explore=-0.1", "rl.explore=-0.1: radians of noise, from 0 to below 1"),
                      ("rl.explore=0.02", "rl.explore=0.02: only expert iteration (rl.method=iterate) plays with"),
                      ("rl.explore_keep=noisy", "rl.explore_keep='noisy': expected executed or clean"),
                      ("training.device=tpu", "training.device=auto|cpu|cuda"),
                      ("rl.noise=gauss", "rl.noise='gauss': expected sde, learned or latent"),
                      ("rl.latent_std=0", "rl.latent_std=0: must be > 0"),
                      ("rl.lr=-1", "rl.lr=-1: must be ≥ 0")):
        with pytest.raises(RLError, match=re.escape(says)): prepare_finetune(run, tmp_path / "o", 2, [bad])
    # the source run trained on the CPU; its fine-tune picks its own device (auto: a GPU where one is visible)
    assert yaml_device(run) == "cpu"
    assert prepare_finetune(run, tmp_path / "o", 2).training.device == "auto"
    assert prepare_finetune(run, tmp_path / "o", 2, ["training.device=cpu"]).training.device == "cpu"
    assert not (tmp_path / "o").exists()


def test_latent_steering_keeps_the_policy_frozen_and_resumes_bit_exactly(bc):
    """rl.noise=latent (steer chapter): the run is a SteeredPolicy whose policy weights are the source's EMA, bit for
    bit, after every iteration; 1 + 1 iterations end where 2 do; dpt rollout plays the steered run."""
    from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint
    from dptoolkit.evaluate import load_policy
    lat = TINY + ["rl.noise=latent", "rl.latent_hidden=16", "rl.seed=3"]
    finetune(bc / "bc", out=bc / "lat-full", nprocs=2, progress=False, overrides=lat + ["rl.iterations=2"])
    finetune(bc / "bc", out=bc / "lat-half", nprocs=2, progress=False, overrides=lat + ["rl.iterations=1"])
    finetune(bc / "bc", out=bc / "lat-half", nprocs=2, progress=False, overrides=["rl.iterations=2"])
    a, b = (rl_log(bc / r).drop(columns=list(VOLATILE)).to_dict("records") for r in ("lat-full", "lat-half"))
    assert a == b and [r["episodes"] for r in a] == [4, 8]
    wa, wb = (load_file(bc / r / "checkpoints" / "step_000002" / "model.safetensors") for r in ("lat-full", "lat-half"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    src = load_checkpoint(latest_checkpoint(bc / "bc"))["ema"]
    assert {k for k in wa if k not in src} == {f"steer.{i}.{w}" for i in (0, 2, 4) for w in ("weight", "bias")}
    assert all(torch.equal(wa[k], src[k]) for k in src)                 # the policy itself never moved
    pol, _ = load_policy(bc / "lat-full")
    assert type(pol).__name__ == "SteeredPolicy" and pol.steer[2].out_features == 16   # rl.latent_hidden
    r = dpt("rollout", bc / "lat-full", "--episodes", 1, "--workers", 1, "--max-steps", 6, "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes"] == 1


def yaml_device(run) -> str:
    from omegaconf import OmegaConf
    return OmegaConf.load(run / "config.yaml").training.device


ITERATE = ["rl.method=iterate", "rl.episodes=4", "rl.max_steps=18", "rl.bc_steps=3", "rl.batch=2"]


def test_expert_iteration_two_rounds_on_two_ranks_resume_exactly(bc, tmp_path):
    """rl.method=iterate: each round plays its episodes sharded over the ranks, grows the store, trains BC on every rank;
    a run killed after round 2's play resumes without playing again and ends where an unbroken one does."""
    full = finetune(bc / "bc", out=tmp_path / "it", nprocs=2, progress=False,
                    overrides=ITERATE + ["rl.iterations=2", "rl.explore=0.02"])   # played with noise on the arms
    assert full.metrics["iterations"] == 2 and full.metrics["episodes"] == 8
    log = rl_log(tmp_path / "it")
    assert log["step"].tolist() == [1, 2] and log["iteration_episodes"].tolist() == [4, 4]
    assert (log["demos"] == 2 + log["groups_kept"].cumsum()).all()    # the store grows by each round's kept successes
    assert (log["groups_kept"] == log["successes"]).all()              # no rl.keep_per_state: every success kept
    rounds = tmp_path / "it" / "rounds"
    played = [json.loads((rounds / "1" / "played" / f"rank{k}.json").read_text())["episodes"] for k in (0, 1)]
    assert played == [2, 2]                                            # 4 episodes, each rank 2 of its own
    for r in ("1", "2"):
        bc_log = [json.loads(l) for l in (rounds / r / "bc" / "logs.jsonl").read_text().splitlines()]
        assert max(rec.get("step", 0) for rec in bc_log) == 3          # BC trained rl.bc_steps on both ranks
        assert json.loads((rounds / r / "bc" / "result.json").read_text())["world_size"] == 2
    ck = tmp_path / "it" / "checkpoints"
    assert (ck / "latest").read_text() == "step_000002"
    for a, b in (("model", "model"), ("ema", "ema")):                  # the run's round-2 weights are its BC run's
        wa = load_file(ck / "step_000002" / f"{a}.safetensors")
        wb = load_file(rounds / "2" / "bc" / "checkpoints" / (rounds / "2" / "bc" / "checkpoints" / "latest")
                       .read_text().strip() / f"{b}.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # killed after round 2's episodes were saved: no store, no BC, round 1 'latest'
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "it", cut)
    shutil.rmtree(cut / "rounds" / "2" / "data.zarr")
    shutil.rmtree(cut / "rounds" / "2" / "bc")
    shutil.rmtree(cut / "checkpoints" / "step_000002")
    (cut / "checkpoints" / "latest").write_text("step_000001")
    before = (cut / "rounds" / "2" / "played" / "rank0.npz").stat().st_mtime_ns
    finetune(bc / "bc", out=cut, nprocs=2, progress=False)
    assert (cut / "rounds" / "2" / "played" / "rank0.npz").stat().st_mtime_ns == before   # not played again
    a, b = (rl_log(r).drop(columns=list(VOLATILE)).to_dict("records") for r in (tmp_path / "it", cut))
    assert a == b
    wa, wb = (load_file(r / "checkpoints" / "step_000002" / "ema.safetensors") for r in (tmp_path / "it", cut))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # the iterated run is a run: dpt rollout plays its last round's policy (dpt report reads it as it reads PPO's)
    r = dpt("rollout", tmp_path / "it", "--episodes", 1, "--workers", 1, "--max-steps", 6, "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes"] == 1
    with pytest.raises(RLError, match="3 ranks but rl.episodes=2 per round of 1 tries per state"):
        prepare_finetune(bc / "bc", tmp_path / "o", 3, ["rl.method=iterate", "rl.episodes=2"])
    with pytest.raises(RLError, match="rl.bc_steps=0: must be at least 1"):
        prepare_finetune(bc / "bc", tmp_path / "o", 2, ["rl.method=iterate", "rl.bc_steps=0"])
    ddpm = tmp_path / "ddpm"       # a DDPM policy: no likelihood, which expert iteration does not need
    shutil.copytree(bc / "bc", ddpm)
    (ddpm / "config.yaml").write_text((bc / "bc" / "config.yaml").read_text().replace("objective: flow", "objective: ddpm"))
    assert prepare_finetune(ddpm, tmp_path / "o", 2, ["rl.method=iterate"]).rl.method == "iterate"


def test_a_continued_fine_tune_logs_each_iteration_once_and_says_what_changed(bc, tmp_path, capsys):
    """Issue 81 (1, 3, 4, 6): a fine-tune killed after it logged an iteration past its last checkpoint logs that
    iteration once when it continues; a continued fine-tune names each setting it changes and refuses another method,
    noise or task; a source run without checkpoints and a --resume with nothing to resume get one line each."""
    out = tmp_path / "ft"
    finetune(bc / "bc", out=out, nprocs=2, progress=False, overrides=TINY + ["rl.iterations=1"])
    with open(out / "logs.jsonl", "a") as f:      # logged, never checkpointed: the run was killed right after
        f.write(json.dumps(dict(kind="rl", step=2, episodes=8, success=0.0)) + "\n")
    capsys.readouterr()
    cfg = prepare_finetune(bc / "bc", out, 2, ["rl.iterations=2", "rl.group=4"])
    assert cfg.rl.group == 4
    err = capsys.readouterr().err
    assert f"finetune: continuing {out.name} with rl.group=4 (its own config had 2)" in err, err
    for bad in ("rl.noise=learned", "rl.method=imitate"):
        with pytest.raises(RLError, match=f"would make it another run: fine-tune into a new --out"):
            prepare_finetune(bc / "bc", out, 2, [bad])
    finetune(bc / "bc", out=out, nprocs=2, progress=False, overrides=["rl.iterations=2"])   # continues at iteration 1
    assert rl_log(out)["step"].tolist() == [1, 2]
    bare = tmp_path / "bare"                     # a run whose checkpoints are gone
    shutil.copytree(bc / "bc", bare)
    shutil.rmtree(bare / "checkpoints")
    with pytest.raises(RLError, match="no checkpoint to fine-tune .no checkpoints/latest.: fine-tuning starts from a "
                                      "trained run's latest checkpoint"):
        prepare_finetune(bare, tmp_path / "o", 2)
    r = dpt("finetune", bc / "bc", "--out", tmp_path / "new", "--resume", check=1)
    assert "--resume: " in r.stderr and "holds no fine-tune to continue" in r.stderr and r.stderr.count("\n") == 1
    r = dpt("finetune", bc / "bc", "--out", out, "--resume", "rl.iterations=2", check=0)   # nothing left: it says so
    assert f"finetune: continuing {out} from its step_000002" in r.stderr, r.stderr
