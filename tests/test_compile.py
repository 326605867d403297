"""torch.compile that learns: the start-up self-check against eager (real inductor on CPU, and a backend that scales
gradients on purpose), the fallback of `compile: auto`, and the grad-norm spike guard."""
import re

import yaml

import numpy as np
import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from dptoolkit.config import for_store
from dptoolkit.report import read_log
from dptoolkit.store import sample_data
from dptoolkit.train import train, train_worker
from dptoolkit.checkpoint import TrainError


def _scaling_backward(factor, after=0):
    "An AOT backward compiler whose gradients are × `factor` from the graph's call number `after` + 1 on."
    def compiler(gm, example_inputs):
        calls = [0]
        def run(*args):
            calls[0] += 1
            out = gm(*args)
            if calls[0] <= after: return out
            return [o * factor if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out]
        return make_boxed_func(run)
    return compiler

scale_grads = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm), bw_compiler=_scaling_backward(1000.0))


@pytest.fixture(scope="module")
def camera_store(tmp_path_factory):
    return sample_data(tmp_path_factory.mktemp("cam"), tasks=1, episodes=4, image=True)[0]


def _cfg(store, run_dir, *extra):
    cfg = for_store(store, name="test", overrides=["training.max_steps=12", "training.device=cpu", "training.log_every=2",
                                                   "training.checkpoint_every=0", "training.resume=false", *extra])
    cfg.logging.run_dir = str(run_dir)
    return cfg


def test_inductor_camera_model_matches_eager(camera_store, tmp_path):
    """Real inductor (C++ code on CPU) on the camera test config: the self-check passes and the banner/run metadata
    say so, and every logged loss and grad norm equals the eager run's (same seed) within float noise."""
    small = ["policy.down_dims=[16]", "policy.obs_encoder.small_channels=[8]"]   # few kernels to build (issue 91)
    eager = train(_cfg(camera_store, tmp_path / "eager", *small), nprocs=1, progress=False)
    comp = train(_cfg(camera_store, tmp_path / "comp", "training.compile=true", *small), nprocs=1, progress=False)
    meta = lambda d: yaml.safe_load((tmp_path / d / "config.yaml").read_text())["run"]["compile"]
    m = re.search(r"compiled \(inductor; self-check passed: loss (\S+) compiled vs (\S+) eager", meta("comp"))
    assert m, meta("comp")
    assert abs(float(m[1]) - float(m[2])) <= 1e-4 * abs(float(m[2]))
    assert meta("eager") == "eager"
    a, b = read_log(tmp_path / "eager"), read_log(tmp_path / "comp")
    assert len(a) == len(b) == 6
    np.testing.assert_allclose(b.loss, a.loss, rtol=1e-4)
    np.testing.assert_allclose(b.grad_norm, a.grad_norm, rtol=1e-3)
    assert comp.metrics["steps"] == eager.metrics["steps"] == 12


def test_broken_backend_is_refused_naming_both_figures(camera_store, tmp_path):
    "compile=true with a backend whose gradients are 1000× too large: one TrainError with both losses and norms, no run."
    cfg = _cfg(camera_store, tmp_path / "run", "training.compile=true", "training.compile_backend=test_compile:scale_grads")
    with pytest.raises(TrainError) as e: train_worker(cfg)
    msg = str(e.value)
    m = re.search(r"loss (\S+) compiled vs (\S+) eager, grad norm (\S+) vs (\S+)", msg)
    assert m and "disagrees with eager" in msg and "training.compile=false" in msg, msg
    assert float(m[1]) == pytest.approx(float(m[2]), rel=1e-5)
    assert float(m[3]) / float(m[4]) == pytest.approx(1000, rel=1e-3)
    assert not (tmp_path / "run" / "logs.jsonl").exists()


def test_auto_falls_back_to_eager(camera_store, tmp_path, capsys):
    """`compile: auto` with a failing self-check trains eagerly (and says so): losses equal the eager run's. `auto` only
    compiles on CUDA, so the fallback is driven here through `compile_checked` with the run's own pieces."""
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.parallelize import compile_checked
    cfg = _cfg(camera_store, tmp_path / "run")
    from dptoolkit.dataset import SequenceDataset
    torch.manual_seed(0)
    pol = DiffusionPolicy.from_config(cfg)
    ds = SequenceDataset(camera_store, cfg.horizon, cfg.n_obs_steps, cfg.pad_before, cfg.pad_after, keys=["head_camera", "state"])
    batch = ds.__getitems__(list(range(8)))
    net, note = compile_checked(pol, pol, scale_grads, batch, fallback=True)
    assert net is pol and note == "eager (compile self-check failed)"
    assert "training eagerly (compile: auto)" in capsys.readouterr().out
    net, note = compile_checked(pol, pol, "aot_eager", batch, fallback=True)
    assert net is not pol and note.startswith("compiled (aot_eager; self-check passed")


def test_grad_spike_stops_the_run(camera_store, tmp_path, monkeypatch):
    """A model whose gradients go wrong mid-run (× 1e5 from the third training step on, the loss value unchanged) is
    stopped at the next log step, naming the norm and the first window's median; no checkpoint is written after it.
    (Driven through the model's forward in this process, so it does not depend on how a compiler splits graphs.)"""
    from dptoolkit.policy import DiffusionPolicy
    real, calls = DiffusionPolicy.forward, [0]
    def spiking(self, *a, **kw):
        loss = real(self, *a, **kw); calls[0] += 1
        return loss if calls[0] <= 2 else loss * 1e5 - loss.detach() * (1e5 - 1)   # same value, gradient × 1e5
    monkeypatch.setattr(DiffusionPolicy, "forward", spiking)
    cfg = _cfg(camera_store, tmp_path / "run", "training.checkpoint_every=2")
    with pytest.raises(TrainError) as e: train_worker(cfg)
    msg = str(e.value)
    assert "first log window's median" in msg and "training.grad_spike=1000" in msg, msg
    log = read_log(tmp_path / "run")
    assert list(log.step) == [2, 4] and log.grad_norm_max.iloc[0] < 100       # the first window was fine; the
    assert log.grad_norm_max.iloc[1] > 1000 * log.grad_norm_median.iloc[0]     # spiking one is logged, then stops
    ck = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*"))
    assert ck == ["step_000002"]                                               # nothing written after the spike
    # without the guard the same run completes (the clip keeps the steps small): the guard is what stopped it
    calls[0] = 0
    assert train_worker(_cfg(camera_store, tmp_path / "run2", "training.grad_spike=null"))["steps"] == 12
