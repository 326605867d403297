"""Any robot's data trains with the README's commands (issue 102): LeRobot datasets lerobot itself wrote in an SO-100's
layout (6 joints, two cameras) and a Franka's (7 joints + gripper, wrist and third-person cameras of different sizes)
get a recipe from their shapes, train two steps, resume and evaluate; frames in either layout and codec merge and
export to LeRobot, and lerobot's own loader reads the export; the set-up says in one line which simulator it could not
install and goes on."""
import json, os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import ROOT, dpt

LR = ROOT / "tests" / "data" / "lerobot"
# the recipe as picked, at a size a 2-core test trains in seconds: its full size (two ResNet-18s and a 1024-wide U-Net,
# 495 MB of weights) wrote 2 GB a checkpoint, which is not what these tests are about
SMALL = ["policy.down_dims=[32,64]", "policy.diffusion_step_embed_dim=32", "policy.obs_encoder.backbone=small",
         "dataloader.batch_size=4"]
pytest.importorskip("av", reason="LeRobot's videos decode with PyAV (pip install 'dptoolkit[convert]')")


def test_an_so100_dataset_picks_a_recipe_and_a_named_one_adapts(tmp_path):
    r = dpt("config", LR / "so100", check=0)
    assert "name: robot_dp\n" in r.stdout and "action_dim: 6" in r.stdout, r.stdout
    assert "# config robot_dp: action 6 wide, cameras laptop_camera, phone_camera: RoboTwin's camera recipe" in r.stdout
    assert "# shapes from the data: action 6; laptop_camera 3×48×64; phone_camera 3×48×64; state 6" in r.stdout
    r = dpt("train", "--data", LR / "so100", "--config", "robot_dp_14", "--out", tmp_path / "run", "--nprocs", 1,
            "--no-progress", *SMALL, "training.max_steps=2", check=0)
    assert ("dpt train: robot_dp_14 was written for action 14; head_camera 3×240×320; state 14; its shapes set to "
            "this store's") in r.stderr, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["steps"] == 2


def test_a_franka_dataset_trains_resumes_and_evaluates_with_the_chosen_recipe(tmp_path):
    run = tmp_path / "run"
    common = ["--data", LR / "franka", "--out", run, "--nprocs", 1, "--no-progress", *SMALL,
              "training.checkpoint_every=2"]
    r = dpt("train", *common, "training.max_steps=2", check=0)
    assert "dpt train: config robot_dp: action 8 wide, cameras exterior_camera, wrist_camera" in r.stderr, r.stderr
    cfg = (run / "config.yaml").read_text()
    assert "exterior_camera:\n    - 3\n    - 48\n    - 64" in cfg and "wrist_camera:\n    - 3\n    - 32\n    - 32" in cfg
    r = dpt("train", *common, "--resume", "training.max_steps=4", check=0)
    assert "| steps 2→4 |" in r.stdout + r.stderr                    # from the checkpoint, not from step 0
    steps = [json.loads(l)["step"] for l in open(run / "logs.jsonl") if '"loss"' in l]
    assert steps == [2, 4], steps
    out = json.loads(dpt("eval", run, "--json", check=0).stdout)
    assert len(out["policy"]["per_dim"]["mse"]) == 8 and np.isfinite(out["policy"]["mse"])


def test_frames_merge_across_layout_and_codec_and_a_channels_last_store_exports(tmp_path):
    """The same LeRobot dataset converted decoded (channels first) and as JPEG chunks (channels last) merges; the
    channels-last store exports to LeRobot, where our reader gives its frames (within the video's loss)."""
    pytest.importorskip("imagecodecs")
    from dptoolkit.codecs import register_codecs
    register_codecs()                                                # JPEG chunks read here, in this process
    src = LR / "written_by_lerobot"
    dpt("convert", src, "-o", tmp_path / "a.zarr", "--no-progress", check=0)
    dpt("convert", src, "-o", tmp_path / "b.zarr", "--frames", "jpeg", "--no-progress", check=0)
    a, b = (zarr.open_group(str(tmp_path / f"{n}.zarr"), mode="r")["data/top_camera"] for n in "ab")
    assert a.shape[1] == 3 and b.shape[-1] == 3                      # two layouts at rest
    r = dpt("merge", tmp_path / "a.zarr", tmp_path / "b.zarr", "-o", tmp_path / "m.zarr", "--no-progress", check=0)
    m = zarr.open_group(str(tmp_path / "m.zarr"), mode="r")["data/top_camera"]
    assert m.shape == (2 * a.shape[0], *a.shape[1:])
    assert np.array_equal(m[a.shape[0]:], np.moveaxis(b[:], -1, 1))  # the JPEG frames as decoded, turned
    dpt("convert", tmp_path / "b.zarr", "-o", tmp_path / "out", "--to", "lerobot", "--no-progress", check=0)
    from dptoolkit.store import open_store
    exported = open_store(tmp_path / "out")["data/top_camera"][:]
    assert exported.shape == a.shape
    assert np.abs(exported.astype(int) - np.moveaxis(b[:], -1, 1).astype(int)).mean() < 6


def test_lerobot_reads_our_export_of_a_channels_last_store():
    """tests/data/lerobot/from_store_hwc: `to_lerobot` of a store whose frames are JPEG chunks (channels last), and what
    lerobot 0.4.4's `LeRobotDataset` returned for it (make_fixture.py --parts hwc): our reader gives the same frames."""
    from dptoolkit.store import open_store
    theirs = np.load(LR / "from_store_hwc_read_by_lerobot.npz")
    g = open_store(LR / "from_store_hwc")
    for cam in ("head", "front", "left", "right"):
        ours = g[f"data/{cam}_camera"][:]
        assert ours.shape[1] == 3
        assert np.array_equal(ours, theirs[f"observation.images.{cam}"]), cam
    assert np.allclose(g["data/state"][:], theirs["state"])


def test_the_set_up_says_which_simulator_it_cannot_install_and_goes_on(tmp_path):
    """A simulator whose install fails (here: no package index at all) is one line of the set-up, which goes on and
    exits 0; the tests that play it skip (importorskip with the reason)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    env = {**os.environ, "PYTHON": str(venv / "bin" / "python"), "DPT_INSTALLER": "pip", "DPT_SETUP_PARTS": "sims",
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull}
    r = subprocess.run(["bash", "tools/setup.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("setup: ")]
    ver = ".".join(map(str, sys.version_info[:2]))
    for what in ("gym-aloha (the ALOHA simulator)", "gym-pusht (the PushT simulator)", "Meta-World"):
        hit = [l for l in lines if l.startswith(f"setup: {what} cannot be installed on Python {ver} (")]
        assert len(hit) == 1 and hit[0].endswith("everything else is installed, and the chapters and tests that "
                                                 "play it skip"), lines
    assert "Traceback" not in r.stdout + r.stderr
