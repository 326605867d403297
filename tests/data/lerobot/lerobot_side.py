"""Run with the real lerobot (0.4.4, a side virtualenv: it needs torch < 2.11). Two commands:

    python lerobot_side.py write DIR         # a tiny dataset written by LeRobotDataset.create / add_frame / save_episode
    python lerobot_side.py read DIR OUT.npz  # what LeRobotDataset(root=DIR, video_backend="pyav") returns, every frame

`read` saves state, action, episode_index, task and every camera (float [0, 1] → uint8) for all frames.
"""
import json, shutil, sys
from pathlib import Path

import numpy as np


def write(out: Path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    shutil.rmtree(out, ignore_errors=True)
    features = {"observation.state": {"dtype": "float32", "shape": (14,), "names": None},
                "action": {"dtype": "float32", "shape": (14,), "names": None},
                "observation.images.top": {"dtype": "video", "shape": (48, 64, 3),
                                           "names": ["height", "width", "channels"]}}
    ds = LeRobotDataset.create(repo_id="dptoolkit/fixture", fps=50, features=features, root=out, use_videos=True)
    rng = np.random.default_rng(0)
    for e, (n, task) in enumerate([(12, "transfer the cube"), (9, "hand over the block")]):
        for i in range(n):
            img = np.zeros((48, 64, 3), np.uint8)
            img[..., 0], img[..., 2] = 40 + 10 * i, 120 + 8 * e
            img[10 + i:20 + i, 20:30] = (200, 30, 30)
            ds.add_frame({"observation.state": rng.standard_normal(14).astype(np.float32),
                          "action": rng.standard_normal(14).astype(np.float32), "observation.images.top": img,
                          "task": task})
        ds.save_episode()
    ds.finalize()


def read(root: Path, out: Path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset("dptoolkit/fixture", root=root, video_backend="pyav")
    rows = [ds[i] for i in range(len(ds))]
    arrays = {"state": np.stack([r["observation.state"].numpy() for r in rows]),
              "action": np.stack([r["action"].numpy() for r in rows]),
              "episode_index": np.array([int(r["episode_index"]) for r in rows]),
              "task": np.array([r["task"] for r in rows])}
    for c in ds.meta.camera_keys:
        arrays[c] = np.stack([(r[c].numpy() * 255).round().astype(np.uint8) for r in rows])
    np.savez_compressed(out, **arrays)
    print(json.dumps({"frames": len(ds), "episodes": ds.num_episodes, "fps": ds.fps, "cameras": ds.meta.camera_keys}))


if __name__ == "__main__":
    {"write": lambda: write(Path(sys.argv[2])), "read": lambda: read(Path(sys.argv[2]), Path(sys.argv[3]))}[sys.argv[1]]()
