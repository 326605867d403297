"""Raw RoboTwin episodes written by RoboTwin's own writer, for the interop round trip, the converter's fixture and its
benchmark. Run with the side virtualenv's python (their dependencies: h5py, cv2, numpy), from anywhere:

    SIDE_PYTHON bench/robotwin_raw.py ROBOTWIN_ROOT TASK CONFIG EPISODES STEPS [--size H,W] [--arms L,R] [--first I]

ROBOTWIN_ROOT must hold their `envs/utils/pkl2hdf5.py` and `envs/utils/images_to_video.py` (a checkout of branch
`stable_2.0`, or a copy of those two files); episodes land where their `process_data.py` reads them:
`ROBOTWIN_ROOT/data/TASK/CONFIG/data/episode<i>.hdf5`. Each step's dict is what their `_base_task.get_obs` gathers
(`observation/<camera>/rgb` as the renderer's RGB uint8 frame, `joint_action/{left,right}_{arm,gripper}` and `vector`);
`create_hdf5_from_dict` JPEG-encodes the frames with cv2 exactly as their collection does. The frames are a lit
background with a block that moves with the joints, plus noise: JPEG has real work to do.
"""
import argparse, importlib, os, sys, types

import numpy as np


def episode(e, T, H, W, ldim, rdim, cameras):
    "One episode's dict of lists, as their collection accumulates it (before `create_hdf5_from_dict`)."
    rng = np.random.default_rng(e)
    yy, xx = np.mgrid[0:H, 0:W]
    t = np.arange(T)[:, None]
    left = np.sin(0.1 * t * (1 + np.arange(ldim)) / ldim + e) * 0.5
    right = np.cos(0.07 * t * (1 + np.arange(rdim)) / rdim + e) * 0.5
    lg, rg = (t[:, 0] % 20 > 10).astype(float), (t[:, 0] % 16 > 8).astype(float)
    obs = {}
    for k, c in enumerate(cameras):
        base = np.zeros((H, W, 3), np.uint8)
        base[..., 0] = (60 + 40 * np.sin(xx * 320 / W / 37 + k)).astype(np.uint8)
        base[..., 1] = (90 + 30 * np.cos(yy * 240 / H / 23 + e)).astype(np.uint8)
        base[..., 2] = 140
        frames = []
        for i in range(T):
            img = base.copy()
            cy, cx, r = int(H / 2 + H / 4 * left[i, 0]), int(W / 2 + W / 3.5 * right[i, 0]), max(2, H // 12)
            img[max(cy - r, 0):cy + r, max(cx - r, 0):cx + r] = (220, 40 + 20 * k, 30)
            frames.append(np.clip(img.astype(int) + rng.integers(-6, 7, img.shape), 0, 255).astype(np.uint8))
        obs[c] = {"rgb": frames}
    vector = np.concatenate([left, lg[:, None], right, rg[:, None]], axis=1)
    return {"observation": obs,
            "joint_action": {"left_arm": list(left), "left_gripper": list(lg), "right_arm": list(right),
                             "right_gripper": list(rg), "vector": list(vector)}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root"), ap.add_argument("task"), ap.add_argument("config")
    ap.add_argument("episodes", type=int), ap.add_argument("steps", type=int)
    ap.add_argument("--size", default="240,320", help="H,W of every camera (D435: 240,320)")
    ap.add_argument("--arms", default="6,6", help="joints per arm (6,6 → 14-dim vector; 7,7 → 16)")
    ap.add_argument("--cameras", default="head_camera,left_camera,right_camera,front_camera")
    ap.add_argument("--first", type=int, default=0, help="index of the first episode (and its seed)")
    a = ap.parse_args()
    pkg = types.ModuleType("rt_utils")
    pkg.__path__ = [os.path.join(a.root, "envs", "utils")]
    sys.modules["rt_utils"] = pkg                      # their writer, without envs/utils/__init__ (it imports SAPIEN)
    writer = importlib.import_module("rt_utils.pkl2hdf5")
    import h5py
    H, W = (int(v) for v in a.size.split(","))
    ldim, rdim = (int(v) for v in a.arms.split(","))
    out = os.path.join(a.root, "data", a.task, a.config, "data")
    os.makedirs(out, exist_ok=True)
    for e in range(a.first, a.first + a.episodes):
        data = episode(e, a.steps, H, W, ldim, rdim, a.cameras.split(","))
        with h5py.File(os.path.join(out, f"episode{e}.hdf5"), "w") as f: writer.create_hdf5_from_dict(f, data)
    print(f"wrote {a.episodes} episodes of {a.steps} steps to {out}")


if __name__ == "__main__":
    main()
