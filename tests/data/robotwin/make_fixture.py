"""Makes the RoboTwin fixture of tests/test_convert.py with RoboTwin's own, unmodified code:

    python tests/data/robotwin/make_fixture.py --robotwin ROBOTWIN --python SIDE_PYTHON

(ROBOTWIN: a checkout of RoboTwin-Platform/RoboTwin, branch stable_2.0; SIDE_PYTHON: a virtualenv with their
dependencies and no dptoolkit, see bench/robotwin.py.) Writes next to this file:
- `raw/<task>/demo_clean/data/episode<i>.hdf5`: raw episodes written by their `envs/utils/pkl2hdf5.py`
  (`bench/robotwin_raw.py`): beat_block_hammer 2 × 8 steps, handover_block 1 × 6 steps, four 48×64 cameras, 14-dim;
- `process_data/<task>-demo_clean-<n>.zarr`: what their `policy/DP/process_data.py` makes of them (zarr 2.18);
- `versions.json`: the versions that made them.
Nothing of their code is kept.
"""
import argparse, json, shutil, subprocess, tempfile
from pathlib import Path

HERE = Path(__file__).parent
TASKS = {"beat_block_hammer": (2, 8), "handover_block": (1, 6)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robotwin", required=True), ap.add_argument("--python", required=True)
    ap.add_argument("--rev", help="their commit, when ROBOTWIN is not a git checkout")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        rt = Path(t) / "RoboTwin"
        for part in ("policy/DP", "envs/utils/pkl2hdf5.py", "envs/utils/images_to_video.py"):
            src, dst = Path(a.robotwin) / part, rt / part
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
        for task, (n, steps) in TASKS.items():
            subprocess.run([a.python, HERE.parents[2] / "bench/robotwin_raw.py", rt, task, "demo_clean", str(n),
                            str(steps), "--size", "48,64"], check=True)
            subprocess.run([a.python, "process_data.py", task, "demo_clean", str(n)], cwd=rt / "policy/DP", check=True,
                           capture_output=True)
        for d in ("raw", "process_data"): shutil.rmtree(HERE / d, ignore_errors=True)
        shutil.copytree(rt / "data", HERE / "raw")
        shutil.copytree(rt / "policy/DP/data", HERE / "process_data")
    v = subprocess.run([a.python, "-c", "import json, zarr, numcodecs, h5py, cv2, numpy; print(json.dumps({m.__name__: "
                        "m.__version__ for m in (zarr, numcodecs, h5py, cv2, numpy)}))"],
                       capture_output=True, text=True, check=True).stdout
    rev = a.rev or subprocess.run(["git", "-C", a.robotwin, "rev-parse", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
    (HERE / "versions.json").write_text(json.dumps(dict(json.loads(v), robotwin=rev or "stable_2.0"), indent=1) + "\n")
    print(f"wrote {HERE / 'raw'} and {HERE / 'process_data'}")


if __name__ == "__main__":
    main()
