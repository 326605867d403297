"""RoboTwin's own deploy and training code take our checkpoints, and we take theirs (issue 26), checked against the facts
read from a checkpoint RoboTwin 2.0's code wrote (../shared/interop/robotwin_dp_checkpoint_layout.json, copied to
tests/data): every key and shape, the observation keys their deploy normalizes, plain pickles, the optimizer in their
parameter order; and a payload pickled the way RoboTwin pickles (dill's global names, four camera normalizers, an
optimizer state) imports without dill, keeps only the normalizers the model uses, evaluates and resumes with its
optimizer."""
import json, pickle, sys, types
from pathlib import Path

import numpy as np
import pytest
import torch

from dptoolkit.config import for_store
from dptoolkit.interop import InteropError, export, import_checkpoint, run_config
from dptoolkit.report import read_log
from dptoolkit.store import sample_data
from dptoolkit.train import latest_checkpoint, load_checkpoint, train

FACTS = json.loads((Path(__file__).parent / "data" / "robotwin_dp_checkpoint_layout.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    store = sample_data(d, tasks=1, episodes=3, image=True)[0]
    cfg = for_store(store, ["policy.down_dims=[32,64]", "policy.diffusion_step_embed_dim=32", "dataloader.batch_size=4",
                            "training.max_steps=6", "training.lr_warmup_steps=4", "training.checkpoint_every=3",
                            "training.device=cpu", "training.log_every=1", "training.num_epochs=100"])
    train(cfg, nprocs=1, run_dir=d / "run", progress=False)
    return d / "run", store, cfg


def test_export_has_what_robotwins_checkpoint_has(run, tmp_path):
    ckpt = export(run[0], tmp_path / "ckpt" / "latest.ckpt")
    p = torch.load(ckpt, weights_only=False)                              # our own file
    assert sorted(p) == FACTS["top_level_keys"] and sorted(p["pickles"]) == sorted(FACTS["pickles"]["keys"])
    plain = {k: pickle.loads(v) for k, v in p["pickles"].items()}         # plain pickles: no dill needed to read them
    assert plain["global_step"] == 6 and plain["epoch"] >= 0 and isinstance(plain["_output_dir"], str)
    assert p["cfg"]._target_ == FACTS["cfg_target"]
    model = p["state_dicts"]["model"]
    for k, shape in FACTS["normalizer_keys_in_model_state_dict"].items():
        assert k in model and (list(model[k].shape) == shape or shape == [14]), k
    assert len([k for k in model if k.startswith("normalizer.")]) == len(FACTS["normalizer_keys_in_model_state_dict"]) == 36
    assert list(p["state_dicts"]["ema_model"]) == list(model)
    # their deploy normalizes every observation key it sends with normalizer.params_dict[key]
    for key in FACTS["deploy_observation"]["keys_sent_to_predict_action"]:
        scale, offset = model[f"normalizer.params_dict.{key}.scale"], model[f"normalizer.params_dict.{key}.offset"]
        x = torch.rand(1, 3, 3, 24, 32) if key.endswith("_cam") else torch.randn(1, 3, 14)
        y = x * scale + offset
        assert torch.isfinite(y).all() and (key != "left_cam" or (y.min() >= -1 and y.max() <= 1))
    # the optimizer: one group over every state-dict entry (their model.parameters()), AdamW state under their indices
    opt = p["state_dicts"]["optimizer"]
    assert len(opt["param_groups"]) == 1 and opt["param_groups"][0]["params"] == list(range(len(model)))
    keys = list(model)
    ours = load_checkpoint(latest_checkpoint(run[0]))["state"]["optimizer"]
    assert len(opt["state"]) == len(ours["state"]) > 0
    i = keys.index("model.final_conv.1.bias")
    assert opt["state"][i]["exp_avg"].shape == model["model.final_conv.1.bias"].shape
    assert all(not keys[j].startswith(("normalizer.", "_dummy", "mask_generator", "obs_encoder._dummy")) for j in opt["state"])


def _robotwin_style(src: Path, dst: Path):
    """Re-save our export the way RoboTwin's workspace pickles (torch.save with pickle_module=dill): the stream names
    `dill._dill._load_type`, dill's reference to a built-in type, here in every `pickles` value (int(...) / str(...))."""
    p = torch.load(src, weights_only=False)
    fake = types.ModuleType("dill._dill")
    def _load_type(name): return {"IntType": int, "StringType": str}[name]
    _load_type.__module__, _load_type.__qualname__ = "dill._dill", "_load_type"
    fake._load_type = _load_type
    class Builtin:   # a built-in type as dill pickles it: dill._dill._load_type('IntType')
        def __init__(self, name): self.name = name
        def __call__(self, v): return v
        def __reduce__(self): return (_load_type, (self.name,))
    class Value:
        def __init__(self, v): self.v = v
        def __reduce__(self): return (Builtin("IntType" if isinstance(self.v, int) else "StringType"), (self.v,))
    sys.modules["dill"], sys.modules["dill._dill"] = types.ModuleType("dill"), fake
    try:
        p["pickles"] = {k: pickle.dumps(Value(pickle.loads(v))) for k, v in p["pickles"].items()}
        torch.save(p, dst)
    finally:
        del sys.modules["dill"], sys.modules["dill._dill"]
    assert b"_load_type" in b"".join(p["pickles"].values())


def test_robotwin_checkpoint_imports_without_dill_and_resumes_with_its_optimizer(run, tmp_path):
    src = export(run[0], tmp_path / "ours.ckpt")
    theirs = tmp_path / "theirs.ckpt"; _robotwin_style(src, theirs)
    assert "dill" not in sys.modules
    imp = import_checkpoint(theirs, tmp_path / "imp", trust=True, data=run[1])
    ck = load_checkpoint(latest_checkpoint(imp))
    assert latest_checkpoint(imp).name == "step_000006" and ck["state"]["step"] == 6
    assert not [k for k in ck["model"] if "front" in k or "left" in k or "right" in k]      # only the normalizers it uses
    a = load_checkpoint(latest_checkpoint(run[0]))
    assert all(torch.equal(a["model"][k], ck["model"][k]) for k in a["model"])
    oa, ob = a["state"]["optimizer"], ck["state"]["optimizer"]
    assert set(oa["state"]) == set(ob["state"]) and all(torch.equal(oa["state"][i]["exp_avg_sq"], ob["state"][i]["exp_avg_sq"]) for i in oa["state"])
    # evaluates with the run's own sampler, and resumes at their global step with the optimizer (no warm-up again)
    from dptoolkit.evaluate import evaluate
    ev = evaluate(imp, progress=False, max_windows=8)
    assert ev.info["sampler"] == "ddpm" and np.isfinite(ev.metrics.loc["policy", "mse"])
    cfg = for_store(run[1], ["training.max_steps=9", "training.device=cpu", "training.log_every=1", "training.checkpoint_every=0"],
                    name=imp / "config.yaml")
    cfg.training.lr_warmup_steps = 4
    train(cfg, nprocs=1, run_dir=imp, resume=True, progress=False)
    log = read_log(imp)
    assert log.step.tolist() == [7, 8, 9]
    assert log.lr.iloc[0] < run[2].optimizer.lr                # past warm-up: the cosine schedule, not step 1's warm-up LR


def test_a_global_outside_the_allow_list_is_refused_by_name(run, tmp_path):
    import os
    p = torch.load(export(run[0], tmp_path / "ours.ckpt"), weights_only=False)
    p["evil"] = os.getcwd   # any callable a pickle could name
    torch.save(p, tmp_path / "evil.ckpt")
    with pytest.raises(InteropError, match=r"names posix\.getcwd, which is not on the allow-list"):
        import_checkpoint(tmp_path / "evil.ckpt", tmp_path / "imp", trust=True)
    assert not (tmp_path / "imp").exists()
