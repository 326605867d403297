"""RoboTwin's own deploy and training code take our checkpoints, and we take theirs (issues 26 and 35).

Checked against facts read from a checkpoint RoboTwin 2.0's unmodified train.py wrote
(../shared/interop/robotwin_dp_checkpoint_layout.json, copied to tests/data) and with the real `dill`, never an
imitation of its output. The three faults issue 35 found with their real code each have a test here that fails if it
comes back:
1. the optimizer: their workspace builds AdamW over `model.parameters()` before `set_normalizer`, so its one group
   covers the state dict without `normalizer.*` (211 tensors for robot_dp_14 with one camera); a group of any other
   size makes their `load_payload` raise `ValueError` in deploy and resume;
2. dill: `torch.save(..., pickle_module=dill)` names built-in types as `dill._dill._load_type('dict')` ('list',
   'int'); import must read that without dill installed;
3. `pickles._output_dir` is None, as in their own files (any path redirects or crashes their resumed train.py).
The round trip with their real code (process_data.py, train.py, DP.get_policy + deploy_policy.eval) is
`bench/robotwin.py`; its figures are in bench/RESULTS.md."""
import json, pickle, sys
from pathlib import Path

import numpy as np
import pytest
import torch

dill = pytest.importorskip("dill")     # a dev requirement: the real thing, not an imitation

from omegaconf import DictConfig
from dptoolkit.config import for_store
from dptoolkit.interop import InteropError, dp_param_keys, export, import_checkpoint
from dptoolkit.report import read_log
from dptoolkit.store import sample_data
from dptoolkit.train import train
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint

FACTS = json.loads((Path(__file__).parent / "data" / "robotwin_dp_checkpoint_layout.json").read_text())
REF = json.loads((Path(__file__).parent / "data" / "diffusion_policy_robot_dp_state_dict.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    store = sample_data(d, tasks=1, episodes=3, image=True)[0]
    cfg = for_store(store, ["policy.down_dims=[32,64]", "policy.diffusion_step_embed_dim=32", "dataloader.batch_size=4",
                            "training.max_steps=6", "training.lr_warmup_steps=4", "training.checkpoint_every=3",
                            "training.device=cpu", "training.log_every=1", "training.num_epochs=100"])
    train(cfg, nprocs=1, run_dir=d / "run", progress=False)
    return d / "run", store, cfg


def their_optimizer(model_sd: dict, lr=1e-4):
    """AdamW as RoboTwin's `RobotWorkspace.__init__` builds it: over `model.parameters()` while the normalizer is still
    empty -- the state dict's entries without `normalizer.*`, in order (the `_dummy_variable`s included)."""
    params = [torch.nn.Parameter(torch.zeros_like(v)) for k, v in model_sd.items() if not k.startswith("normalizer.")]
    return torch.optim.AdamW(params, lr=lr, betas=(0.95, 0.999), eps=1e-8, weight_decay=1e-6)


def test_the_rule_gives_211_for_robotwins_robot_dp_14():
    keys = list(REF["robot_dp_14"])
    assert len(dp_param_keys(keys)) == 211            # FACTS: "ONE param group over 211 parameters (not 247)"
    assert "ONE param group over 211 parameters" in FACTS["state_dicts"]["optimizer"]
    assert len(dp_param_keys(REF["robot_dp_16"])) == len(REF["robot_dp_16"]) - 18      # 16-dim: the same rule


def test_export_loads_into_their_workspace_optimizer_and_keeps_their_output_dir(run, tmp_path):
    ckpt = export(run[0], tmp_path / "ckpt" / "latest.ckpt")
    p = torch.load(ckpt, weights_only=False)                              # our own file
    assert sorted(p) == FACTS["top_level_keys"] and sorted(p["pickles"]) == sorted(FACTS["pickles"]["keys"])
    plain = {k: pickle.loads(v) for k, v in p["pickles"].items()}         # plain pickles: no dill needed to read them
    assert plain["global_step"] == 6 and plain["epoch"] >= 0
    assert plain["_output_dir"] is None                                   # fault 3
    assert dill.loads(p["pickles"]["_output_dir"]) is None                # what their load_payload does with it
    assert p["cfg"]._target_ == FACTS["cfg_target"]
    model = p["state_dicts"]["model"]
    for k, shape in FACTS["normalizer_keys_in_model_state_dict"].items():
        assert k in model and (list(model[k].shape) == shape or shape == [14]), k
    assert len([k for k in model if k.startswith("normalizer.")]) == len(FACTS["normalizer_keys_in_model_state_dict"]) == 36
    assert list(p["state_dicts"]["ema_model"]) == list(model)
    # fault 1: their optimizer takes ours (torch raises ValueError on a group of another size), every moment has its
    # parameter's shape, and a step runs
    opt = p["state_dicts"]["optimizer"]
    theirs = their_optimizer(model)
    theirs.load_state_dict(opt)
    n = len(theirs.param_groups[0]["params"])
    assert n == len(model) - 36 and len(opt["param_groups"][0]["params"]) == n
    for i, prm in enumerate(theirs.param_groups[0]["params"]):
        if i in theirs.state: assert theirs.state[prm]["exp_avg"].shape == prm.shape, i
    dummies = {i for i, k in enumerate(dp_param_keys(model)) if k.endswith("_dummy_variable")}
    assert len(dummies) == 3 and not dummies & set(opt["state"])          # as in theirs: no state for the dummies
    ours = load_checkpoint(latest_checkpoint(run[0]))["state"]["optimizer"]
    assert len(opt["state"]) == len(ours["state"]) > 0
    keys = dp_param_keys(model)
    i = keys.index("model.final_conv.1.bias")
    assert torch.equal(opt["state"][i]["exp_avg"], ours["state"][len(ours["state"]) - 1]["exp_avg"])
    for prm in theirs.param_groups[0]["params"]: prm.grad = torch.ones_like(prm)
    theirs.step()
    # a group over all 247 entries (what export wrote before issue 35) is what their load_payload refused
    bad = {"state": {}, "param_groups": [dict(opt["param_groups"][0], params=list(range(len(model))))]}
    with pytest.raises(ValueError, match="doesn't match the size"):
        their_optimizer(model).load_state_dict(bad)


def _save_like_robotwin(src: Path, dst: Path):
    """Re-save our export the way RoboTwin's `BaseWorkspace.save_checkpoint` does, with the real dill: the cfg an
    OmegaConf DictConfig, each `pickles` value a `dill.dumps`, `torch.save(payload, f, pickle_module=dill)`."""
    p = torch.load(src, weights_only=False)
    assert isinstance(p["cfg"], DictConfig)
    p["pickles"] = {k: dill.dumps(pickle.loads(v)) for k, v in p["pickles"].items()}
    with open(dst, "wb") as f: torch.save(p, f, pickle_module=dill)
    raw = dst.read_bytes()
    assert b"dill._dill" in raw and b"_load_type" in raw                  # what real dill writes
    return p


def test_robotwin_checkpoint_imports_with_dill_blocked_and_resumes_with_its_optimizer(run, tmp_path, monkeypatch):
    src = export(run[0], tmp_path / "ours.ckpt")
    theirs = tmp_path / "theirs.ckpt"
    _save_like_robotwin(src, theirs)
    for m in [m for m in sys.modules if m == "dill" or m.startswith("dill.")]: monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "dill", None)                        # `import dill` raises ImportError now
    with pytest.raises(ImportError): import dill as _                     # noqa: F401
    imp = import_checkpoint(theirs, tmp_path / "imp", trust=True, data=run[1])   # fault 2: 'dict', 'list', 'int'
    ck = load_checkpoint(latest_checkpoint(imp))
    assert latest_checkpoint(imp).name == "step_000006" and ck["state"]["step"] == 6
    assert not [k for k in ck["model"] if "front" in k or "left" in k or "right" in k]      # only the normalizers it uses
    a = load_checkpoint(latest_checkpoint(run[0]))
    assert all(torch.equal(a["model"][k], ck["model"][k]) for k in a["model"])
    oa, ob = a["state"]["optimizer"], ck["state"]["optimizer"]
    assert set(oa["state"]) == set(ob["state"])
    assert all(torch.equal(oa["state"][i]["exp_avg_sq"], ob["state"][i]["exp_avg_sq"]) for i in oa["state"])
    # evaluates with the run's own sampler, and resumes at their global step with the optimizer (no warm-up again)
    from dptoolkit.evaluate import evaluate
    ev = evaluate(imp, progress=False, max_windows=8)
    assert ev.info["sampler"] == "ddpm" and np.isfinite(ev.metrics.loc["policy", "mse"])
    cfg = for_store(run[1], ["training.max_steps=9", "training.device=cpu", "training.log_every=1",
                             "training.checkpoint_every=0"], name=imp / "config.yaml")
    cfg.training.lr_warmup_steps = 4
    train(cfg, nprocs=1, run_dir=imp, resume=True, progress=False)
    log = read_log(imp)
    assert log.step.tolist() == [7, 8, 9]
    assert log.lr.iloc[0] < run[2].optimizer.lr                # past warm-up: the cosine schedule, not step 1's warm-up LR


def test_old_exports_with_a_group_over_every_entry_still_import(run, tmp_path):
    "Files exported before issue 35 (one group over all state-dict entries) are read too."
    p = torch.load(export(run[0], tmp_path / "ours.ckpt"), weights_only=False)
    model, opt = p["state_dicts"]["model"], p["state_dicts"]["optimizer"]
    keys, allk = dp_param_keys(model), list(model)
    opt["state"] = {allk.index(keys[i]): st for i, st in opt["state"].items()}
    opt["param_groups"][0]["params"] = list(range(len(allk)))
    torch.save(p, tmp_path / "old.ckpt")
    imp = import_checkpoint(tmp_path / "old.ckpt", tmp_path / "imp", trust=True)
    a = load_checkpoint(latest_checkpoint(run[0]))["state"]["optimizer"]
    b = load_checkpoint(latest_checkpoint(imp))["state"]["optimizer"]
    assert all(torch.equal(a["state"][i]["exp_avg"], b["state"][i]["exp_avg"]) for i in a["state"])
    opt["param_groups"][0]["params"] = list(range(len(allk) - 1))     # neither layout: named
    torch.save(p, tmp_path / "odd.ckpt")
    with pytest.raises(InteropError, match=rf"1 group\(s\) of \[{len(allk) - 1}\] parameters; expected one group over "
                                           rf"the model's {len(keys)} parameters"):
        import_checkpoint(tmp_path / "odd.ckpt", tmp_path / "imp2", trust=True)


def test_a_global_outside_the_allow_list_is_refused_by_name(run, tmp_path):
    import os
    p = torch.load(export(run[0], tmp_path / "ours.ckpt"), weights_only=False)
    p["evil"] = os.getcwd   # any callable a pickle could name
    torch.save(p, tmp_path / "evil.ckpt")
    with pytest.raises(InteropError, match=r"names posix\.getcwd, which is not on the allow-list"):
        import_checkpoint(tmp_path / "evil.ckpt", tmp_path / "imp", trust=True)
    assert not (tmp_path / "imp").exists()
    # dill's reference to a type that is not plain data (code objects, functions) is refused too
    p = torch.load(export(run[0], tmp_path / "ours.ckpt"), weights_only=False)
    p["evil"] = dill.dumps(type(lambda: 0))                       # dill._dill._load_type('LambdaType')
    p["pickles"]["evil"] = p.pop("evil")
    torch.save(p, tmp_path / "evil2.ckpt")
    with pytest.raises(InteropError, match=r"dill type '(Function|Lambda)Type', which is not a plain data type"):
        import_checkpoint(tmp_path / "evil2.ckpt", tmp_path / "imp3", trust=True)
    assert not (tmp_path / "imp3").exists()
