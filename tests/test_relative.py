"""Relative representations (`policy.action_repr` / `obs_repr`, issue 46's demo recipe) end to end on a real run: the
normalizer carries the offsets' limits, the checkpoint's policy acts from where the arm is, `dpt eval` scores it,
`dpt export` refuses it in one line, and a store without a joint state of the action's width is refused before any
process starts."""
import numpy as np
import pytest
import torch

from conftest import dpt
from dptoolkit.config import for_store
from dptoolkit.evaluate import load_policy
from dptoolkit.policy import PolicyError
from dptoolkit.store import sample_data
from dptoolkit.train import train

REL = ["policy.action_repr=relative", "policy.obs_repr=relative", "training.max_steps=4", "training.log_every=2",
       "training.checkpoint_every=4"]


def test_relative_run_trains_evaluates_and_is_not_exported(merged, tmp_path):
    run = train(for_store(merged, name="test", overrides=REL), nprocs=1, run_dir=tmp_path / "run",
                progress=False).run_dir
    pol, cfg = load_policy(run)
    assert (pol.action_repr, pol.obs_repr, pol.relative_key) == ("relative", "relative", "state")
    assert {"action_rel", "state_rel"} <= set(pol.normalizer.keys)
    joints = [d for d in range(14) if d % 7 != 6]                       # grippers (every 7th) open and close
    rel, ab = pol.normalizer.stats_action_rel, pol.normalizer.stats_action
    assert ((rel[1] - rel[0])[joints] < (ab[1] - ab[0])[joints]).all()  # offsets over a window span less than positions
    T = pol.n_obs_steps
    obs = {"state": torch.randn(2, T, 14)}
    moved = {"state": obs["state"] + 0.25}
    g = lambda: torch.Generator().manual_seed(0)
    a, b = pol.predict_action(obs, generator=g())["action"], pol.predict_action(moved, generator=g())["action"]
    torch.testing.assert_close(b - a, torch.full_like(a, 0.25), atol=1e-4, rtol=0)   # acts from where the arm is
    r = dpt("eval", run, "--json", check=0)
    assert '"policy"' in r.stdout
    r = dpt("export", run, "-o", tmp_path / "m.ckpt")
    assert r.returncode == 1 and "have no relative representation" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.ckpt").exists()


def test_relative_without_a_joint_state_is_refused_before_any_process(tmp_path):
    store = sample_data(tmp_path, tasks=1, episodes=2, image=True)[0]
    cfg = for_store(store, name="test", overrides=[*REL, "task.dataset.obs_keys=[head_camera]"])
    with pytest.raises(PolicyError, match="no low-dim observation key of width 14"):
        train(cfg, nprocs=1, run_dir=tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
