"""Every policy family on the same loop (issue 47): the transformer denoiser and flow matching train, checkpoint,
resume exactly and sample chunks of the right shape; `dpt export` refuses what diffusion_policy cannot load; a class
that breaks the policy protocol is refused in one line before any process starts; `policy._target_` imports one."""
import json

import pytest
import numpy as np
import torch
import zarr
from torch import nn

from conftest import dpt
from dptoolkit.config import for_store
from dptoolkit.evaluate import evaluate, load_policy
from dptoolkit.policy import PolicyError
from dptoolkit.report import read_log
from dptoolkit.train import train

RUN = ["training.log_every=1", "training.checkpoint_every=2", "training.lr_scheduler=constant",
       "training.deterministic=true", "training.device=cpu", "dataloader.batch_size=8"]
FAMILIES = {"transformer+ddpm": ["policy.denoiser=transformer"], "unet+flow": ["policy.objective=flow"],
            "transformer+flow": ["policy.denoiser=transformer", "policy.objective=flow",
                                 "policy.transformer.cond=adaln"]}   # the adaLN variant (the ddpm one: cross only)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_resumes_exactly_and_samples(family, merged, tmp_path):
    cfg = for_store(merged, name="test", overrides=[*RUN, *FAMILIES[family]])
    full = train(cfg, nprocs=1, run_dir=tmp_path / "full", progress=False, overrides=["training.max_steps=4"])
    train(cfg, nprocs=1, run_dir=tmp_path / "cut", progress=False, overrides=["training.max_steps=2"])
    cut = train(cfg, nprocs=1, run_dir=tmp_path / "cut", resume=True, progress=False,
                overrides=["training.max_steps=4"])
    a, b = read_log(full.run_dir).set_index("step").loss, read_log(cut.run_dir).set_index("step").loss
    assert a.loc[[3, 4]].tolist() == b.loc[[3, 4]].tolist()          # bit-exact after the resume
    assert np.isfinite(full.metrics["val_loss_ema"])                  # the in-run EMA (its masks were once averaged to NaN)
    pol, rcfg = load_policy(full.run_dir)
    assert (pol.denoiser, pol.objective.name) == tuple(family.split("+"))
    assert getattr(pol.model, "cond", None) == {"transformer+ddpm": "cross", "transformer+flow": "adaln"}.get(family)
    assert pol.num_inference_steps == 16                              # the test config's; flow's default is 10
    obs = {"state": torch.randn(3, pol.n_obs_steps, 14)}
    out = pol.predict_action(obs, generator=torch.Generator().manual_seed(0))
    assert out["action"].shape == (3, pol.n_action_steps, 14) and torch.isfinite(out["action"]).all()
    if family == "unet+flow":   # evaluation reads the flow sampler; export names what diffusion_policy cannot load
        res = evaluate(full.run_dir, progress=False, max_windows=8)
        assert res.info["sampler"] == "euler" and res.info["steps"] == 16
        with pytest.raises(Exception, match="sampler='ddim'"): evaluate(full.run_dir, sampler="ddim", progress=False)
    if family == "transformer+flow":
        r = dpt("export", full.run_dir, "-o", tmp_path / "m.ckpt")
        assert r.returncode == 1 and "transformer" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "m.ckpt").exists()


class _Base(nn.Module):
    image_keys, low_dim_keys, n_obs_steps, n_action_steps, action_dim = [], ["state"], 3, 6, 14
    def __init__(self, normalizer=None):
        super().__init__()
        self.normalizer, self.lin = normalizer, nn.Linear(14, 14)
    @classmethod
    def from_config(cls, cfg, normalizer=None): return cls(normalizer)
    def draw(self, batch, generator=None): return {}
    def forward(self, batch): return self.lin(batch["obs"]["state"].float()).pow(2).mean()
    def predict_action(self, obs, generator=None): return {"action": self.lin(obs["state"][:, -6:].float())}


class NoForward(_Base):
    forward = nn.Module.forward


class VectorLoss(_Base):
    def forward(self, batch): return self.lin(batch["obs"]["state"].float()).pow(2).mean((1, 2))


class Raises(_Base):
    def forward(self, batch): return batch["obs"]["wrist_camera"].mean()


class WrongChunk(_Base):
    def predict_action(self, obs, generator=None): return {"action": obs["state"][:, -2:].float()}


@pytest.mark.parametrize("cls, says", [(NoForward, "breaks the policy protocol: no forward"),
                                       (VectorLoss, "returned a tensor of shape [2]; the loop needs a scalar loss"),
                                       (WrongChunk, "predict_action returned 'action' [2, 2, 14]; expected [2, 6, 14]"),
                                       (Raises, "draw + forward on two windows of")])
def test_a_policy_that_breaks_the_protocol_is_refused_before_any_process(cls, says, merged, tmp_path):
    with pytest.raises(PolicyError, match=r"^policy " + cls.__name__) as e:
        train(for_store(merged, name="test"), nprocs=2, run_dir=tmp_path / "r", progress=False, policy=cls)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "r").exists()


MODULE = """
import torch
from torch import nn
class Lin(nn.Module):
    image_keys, low_dim_keys = [], ["state"]
    def __init__(self, cfg, normalizer=None):
        super().__init__()
        self.n_obs_steps, self.n_action_steps, self.action_dim = cfg.n_obs_steps, cfg.n_action_steps, 14
        self.normalizer, self.lin = normalizer, nn.Linear(14, 14)
    @classmethod
    def from_config(cls, cfg, normalizer=None): return cls(cfg, normalizer)
    def draw(self, batch, generator=None): return {"noise": torch.randn(batch["action"].shape, generator=generator)}
    def forward(self, batch, noise): return (self.lin(batch["obs"]["state"].float()).mean() - noise.mean()) ** 2
    def predict_action(self, obs, generator=None):
        return {"action": self.lin(obs["state"].float())[:, :1].expand(-1, self.n_action_steps, -1)}
"""


def test_policy_target_imports_a_class_by_path_on_every_rank(merged, tmp_path, monkeypatch):
    (tmp_path / "mypolicies.py").write_text(MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", tmp_path / "r", "--no-progress",
        "policy._target_=mypolicies.Lin", "training.max_steps=2", "training.log_every=1", check=0)
    assert read_log(tmp_path / "r").step.tolist() == [1, 2]
    pol, cfg = load_policy(tmp_path / "r")
    assert type(pol).__name__ == "Lin" and cfg.policy._target_ == "mypolicies.Lin"
    r = dpt("eval", tmp_path / "r", "--json", check=0)                  # dpt eval imports it by path too
    assert '"policy"' in r.stdout


def test_a_task_conditioned_policy_knows_its_tasks_from_training_to_eval(merged, tasks_dir, tmp_path):
    "policy.task_embed_dim on the merged three-task store: 2 ranks, resumed bit-exactly, evaluated per task by name."
    cfg = for_store(merged, name="test", overrides=[*RUN, "policy.task_embed_dim=4"])
    full = train(cfg, nprocs=2, run_dir=tmp_path / "full", progress=False, overrides=["training.max_steps=4"])
    train(cfg, nprocs=2, run_dir=tmp_path / "cut", progress=False, overrides=["training.max_steps=2"])
    cut = train(cfg, nprocs=2, run_dir=tmp_path / "cut", resume=True, progress=False,
                overrides=["training.max_steps=4"])
    a, b = read_log(full.run_dir).set_index("step").loss, read_log(cut.run_dir).set_index("step").loss
    assert a.loc[[3, 4]].tolist() == b.loc[[3, 4]].tolist()
    pol, rcfg = load_policy(full.run_dir)
    names = sorted(p.stem for p in tasks_dir.glob("*.zarr"))
    assert list(rcfg.policy.task_names) == list(pol.task_names) == names and pol.task_embed.weight.shape == (3, 4)
    # the embedding is trained: its weights moved between the checkpoints of steps 2 and 4
    w2 = load_policy(cut.run_dir, checkpoint=cut.run_dir / "checkpoints" / "step_000002", ema=False)[0].task_embed.weight
    w4 = load_policy(cut.run_dir, ema=False)[0].task_embed.weight
    assert not torch.equal(w2, w4)
    r = dpt("eval", full.run_dir, "--task-name", names[1], "--split", "all", "--windows", 8, "--json", check=0)
    ev = json.loads(r.stdout)
    assert ev["info"]["windows"] == 8 and ev["policy"]["mse"] > 0
    res = evaluate(full.run_dir, split="all", task_name=names[2], max_windows=8, progress=False)
    assert set(zarr.open_group(str(merged), mode="r")["meta/episode_task"][:][res.episode].tolist()) == {2}
    r = dpt("eval", full.run_dir, "--task-name", "nope", "--split", "all", check=1)
    assert "task 'nope'" in r.stderr and "Traceback" not in r.stderr
    obs = {"state": torch.randn(2, pol.n_obs_steps, 14)}
    with pytest.raises(PolicyError, match="pass each window's task index"): pol.predict_action(obs)
    # a store without task names: one line before any process
    one = sorted(tasks_dir.glob("*.zarr"))[0]
    r = dpt("train", "--config", "test", "--data", one, "--out", tmp_path / "one", "policy.task_embed_dim=4", check=1)
    assert r.stderr.count("\n") == 1 and "has no task names" in r.stderr and not (tmp_path / "one").exists()
