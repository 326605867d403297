"""Makes the LeRobot fixture of the convert chapter and tests/test_convert.py with the real `lerobot` package:

    python tests/data/lerobot/make_fixture.py --python LEROBOT_PYTHON

(LEROBOT_PYTHON: a virtualenv with `pip install lerobot==0.4.4`; it pins torch < 2.11, so it cannot share ours.)
Writes next to this file:
- `written_by_lerobot/` and `read_by_lerobot.npz`: a dataset lerobot wrote, and what `LeRobotDataset` returns for it;
- `from_store/` and `from_store_read_by_lerobot.npz`: `to_lerobot` of the RoboTwin fixture's store (tests/data/robotwin/raw
  converted), and what `LeRobotDataset` returns for it;
- `from_store_lerobot_tools.json`: lerobot's own tools run on `from_store/` (statistics lerobot computes on its
  frames, `aggregate_stats`, `delete_episodes`, `merge_datasets` with a dataset lerobot wrote);
- `from_store_444/` and `from_store_444_read_by_lerobot.npz`: the same store exported at full colour resolution
  (`to_lerobot(codec="hevc", chroma="444", crf=18)`: yuv444p HEVC), and what `LeRobotDataset` returns for it.
`--parts 444` makes only the last two (the others as they are); `--parts robots,hwc` makes these (any-robot tests):
- `so100/`, `franka/`: small datasets lerobot writes itself in an SO-100's layout (6 joints, two cameras) and a
  Franka's (7 joints + gripper, a wrist and a third-person camera of different sizes) (`lerobot_side.py robot`);
- `from_store_hwc/` and `from_store_hwc_read_by_lerobot.npz`: `to_lerobot` of the RoboTwin fixture converted with its
  frames as JPEG chunks (channels last, `frames="jpeg"`), and what `LeRobotDataset` returns for it.
"""
import argparse, json, shutil, subprocess, tempfile
from pathlib import Path

import zarr

HERE = Path(__file__).parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True)
    ap.add_argument("--parts", default="all", help="all, 444 (the full-colour export only), or robots,hwc")
    a = ap.parse_args()
    side = lambda *args: subprocess.run([a.python, HERE / "lerobot_side.py", *map(str, args)], check=True)
    if set(a.parts.split(",")) & {"robots", "hwc"}:
        return any_robot(side, a.parts.split(","))
    if a.parts == "all":
        side("write", HERE / "written_by_lerobot")
        side("read", HERE / "written_by_lerobot", HERE / "read_by_lerobot.npz")
    from dptoolkit.convert import convert, to_lerobot
    with tempfile.TemporaryDirectory() as t:
        store = convert(HERE.parent / "robotwin/raw", Path(t) / "robotwin.zarr", workers=1, progress=False).path
        del zarr.open_group(str(store), mode="r+").attrs["instructions"]   # tasks by name, as `from_store/` has them
        for name, kw in ([("from_store", {})] if a.parts == "all" else []) + [
                ("from_store_444", dict(codec="hevc", chroma="444", crf=18))]:
            shutil.rmtree(HERE / name, ignore_errors=True)
            to_lerobot(store, HERE / name, progress=False, **kw)
    if a.parts == "all": side("read", HERE / "from_store", HERE / "from_store_read_by_lerobot.npz")
    side("read", HERE / "from_store_444", HERE / "from_store_444_read_by_lerobot.npz")
    if a.parts != "all": return
    side("tools", HERE / "from_store", HERE / "from_store_lerobot_tools.json")
    v = subprocess.run([a.python, "-c", "import lerobot, torch, av; print(lerobot.__version__, torch.__version__, "
                        "av.__version__)"], capture_output=True, text=True, check=True).stdout.split()
    (HERE / "versions.json").write_text(json.dumps(dict(lerobot=v[0], torch=v[1], av=v[2]), indent=1) + "\n")


def any_robot(side, parts):
    from dptoolkit.convert import convert, to_lerobot
    if "robots" in parts:
        for kind in ("so100", "franka"): side("robot", kind, HERE / kind)
    if "hwc" in parts:
        with tempfile.TemporaryDirectory() as t:
            store = convert(HERE.parent / "robotwin/raw", Path(t) / "hwc.zarr", workers=1, progress=False,
                            frames="jpeg", quality=95).path
            del zarr.open_group(str(store), mode="r+").attrs["instructions"]
            shutil.rmtree(HERE / "from_store_hwc", ignore_errors=True)
            to_lerobot(store, HERE / "from_store_hwc", progress=False)
        side("read", HERE / "from_store_hwc", HERE / "from_store_hwc_read_by_lerobot.npz")


if __name__ == "__main__":
    main()
