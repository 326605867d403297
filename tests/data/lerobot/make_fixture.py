"""Makes the LeRobot fixture of the convert chapter and tests/test_convert.py with the real `lerobot` package:

    python tests/data/lerobot/make_fixture.py --python LEROBOT_PYTHON

(LEROBOT_PYTHON: a virtualenv with `pip install lerobot==0.4.4`; it pins torch < 2.11, so it cannot share ours.)
Writes next to this file:
- `written_by_lerobot/` and `read_by_lerobot.npz`: a dataset lerobot wrote, and what `LeRobotDataset` returns for it;
- `from_store/` and `from_store_read_by_lerobot.npz`: `to_lerobot` of the RoboTwin fixture's store (tests/data/robotwin/raw
  converted), and what `LeRobotDataset` returns for it;
- `from_store_lerobot_tools.json`: lerobot's own tools run on `from_store/` (statistics lerobot computes on its
  frames, `aggregate_stats`, `delete_episodes`, `merge_datasets` with a dataset lerobot wrote).
"""
import argparse, json, shutil, subprocess, tempfile
from pathlib import Path

HERE = Path(__file__).parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True)
    a = ap.parse_args()
    side = lambda *args: subprocess.run([a.python, HERE / "lerobot_side.py", *map(str, args)], check=True)
    side("write", HERE / "written_by_lerobot")
    side("read", HERE / "written_by_lerobot", HERE / "read_by_lerobot.npz")
    from dptoolkit.convert import convert, to_lerobot
    with tempfile.TemporaryDirectory() as t:
        store = convert(HERE.parent / "robotwin/raw", Path(t) / "robotwin.zarr", workers=1, progress=False).path
        shutil.rmtree(HERE / "from_store", ignore_errors=True)
        to_lerobot(store, HERE / "from_store", progress=False)
    side("read", HERE / "from_store", HERE / "from_store_read_by_lerobot.npz")
    side("tools", HERE / "from_store", HERE / "from_store_lerobot_tools.json")
    v = subprocess.run([a.python, "-c", "import lerobot, torch, av; print(lerobot.__version__, torch.__version__, "
                        "av.__version__)"], capture_output=True, text=True, check=True).stdout.split()
    (HERE / "versions.json").write_text(json.dumps(dict(lerobot=v[0], torch=v[1], av=v[2]), indent=1) + "\n")


if __name__ == "__main__":
    main()
