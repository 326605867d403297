"""Run with the real lerobot (0.4.4, a side virtualenv: it needs torch < 2.11). Two commands:

    python lerobot_side.py write DIR         # a tiny dataset written by LeRobotDataset.create / add_frame / save_episode
    python lerobot_side.py read DIR OUT.npz  # what LeRobotDataset(root=DIR, video_backend="pyav") returns, every frame
    python lerobot_side.py tools DIR OUT.json  # lerobot's own tools on DIR (a dataset `to_lerobot` wrote), see `tools`
    python lerobot_side.py robot KIND DIR    # a small dataset in a robot's layout (so100, franka), see `robot`

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


# Two robots' layouts as lerobot records them (feature names as its so100_follower and a DROID-style Franka write them):
# the action's and state's value names, and the cameras (name: height, width) -- small frames, even sizes
ROBOTS = {
    "so100": dict(robot_type="so100_follower",
                  names=[f"{j}.pos" for j in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex",
                                                "wrist_roll", "gripper")],
                  cameras={"laptop": (48, 64), "phone": (48, 64)},
                  tasks=["pick up the red cube", "put the cube in the bin"]),
    "franka": dict(robot_type="franka",
                   names=[f"joint_{i}" for i in range(7)] + ["gripper"],
                   cameras={"exterior": (48, 64), "wrist": (32, 32)},
                   tasks=["open the drawer", "close the drawer"]),
}


def robot(kind: str, out: Path):
    """A small dataset lerobot writes itself in a robot's layout (`ROBOTS`): smooth joint trajectories, the action the
    next step's joints, two cameras of their own sizes, an instruction an episode; four episodes of 14-19 frames."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    r = ROBOTS[kind]
    shutil.rmtree(out, ignore_errors=True)
    D = len(r["names"])
    features = {"observation.state": {"dtype": "float32", "shape": (D,), "names": r["names"]},
                "action": {"dtype": "float32", "shape": (D,), "names": r["names"]}}
    for c, (H, W) in r["cameras"].items():
        features[f"observation.images.{c}"] = {"dtype": "video", "shape": (H, W, 3),
                                               "names": ["height", "width", "channels"]}
    ds = LeRobotDataset.create(repo_id=f"dptoolkit/{kind}", fps=30, features=features, root=out,
                               robot_type=r["robot_type"], use_videos=True)
    rng = np.random.default_rng(len(kind))
    for e, n in enumerate((16, 14, 19, 15)):
        way = rng.uniform(-1, 1, (2, D)).astype(np.float32)
        q = way[0] + (way[1] - way[0]) * np.linspace(0, 1, n + 1)[:, None].astype(np.float32)
        for i in range(n):
            frame = {"observation.state": q[i], "action": q[i + 1], "task": r["tasks"][e % 2]}
            for j, (c, (H, W)) in enumerate(r["cameras"].items()):
                img = np.zeros((H, W, 3), np.uint8)
                img[..., 1] = 60 + 20 * j
                y, x = int((q[i, 0] * 0.4 + 0.5) * (H - 8)), int((q[i, 1] * 0.4 + 0.5) * (W - 8))
                img[y:y + 8, x:x + 8] = (220, 40, 40)
                frame[f"observation.images.{c}"] = img
            ds.add_frame(frame)
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


def _stats(d: dict) -> dict:
    return {f: {k: np.asarray(v).tolist() for k, v in s.items()} for f, s in d.items()}


def write_like(src, out: Path, episodes=(0, 2)):
    "A dataset lerobot writes itself with `src`'s features, fps and robot type, from some of `src`'s frames."
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    shutil.rmtree(out, ignore_errors=True)
    feats = {k: {kk: vv for kk, vv in v.items() if kk != "info"} for k, v in src.meta.features.items()
             if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")}
    ds = LeRobotDataset.create(repo_id="dptoolkit/theirs", fps=src.fps, features=feats, root=out,
                               robot_type=src.meta.robot_type, use_videos=True)
    for e in episodes:
        a, b = src.meta.episodes[e]["dataset_from_index"], src.meta.episodes[e]["dataset_to_index"]
        for i in range(a, b):
            r = src[i]
            ds.add_frame({**{k: (r[k].numpy() * 255).round().astype(np.uint8).transpose(1, 2, 0)
                             if k in src.meta.camera_keys else r[k].numpy() for k in feats}, "task": r["task"]})
        ds.save_episode()
    ds.finalize()
    return LeRobotDataset("dptoolkit/theirs", root=out, video_backend="pyav")


def tools(root: Path, out: Path):
    """lerobot's tools on a dataset `to_lerobot` wrote: the statistics lerobot computes on its frames
    (`compute_episode_stats` per episode of every non-video feature, then `aggregate_stats`), `aggregate_stats` over
    the per-episode statistics in its `meta/episodes`, `delete_episodes(ds, [1])`, and `merge_datasets` of a dataset
    lerobot writes itself (same features, two of the episodes' frames) with it. Saves what each returned."""
    import tempfile, pandas as pd
    from lerobot.datasets.compute_stats import aggregate_stats, compute_episode_stats
    from lerobot.datasets.dataset_tools import delete_episodes, merge_datasets
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset("dptoolkit/ours", root=root, video_backend="pyav")
    table = ds.hf_dataset.with_format("numpy")[:]
    numeric = [k for k, v in ds.meta.features.items() if v["dtype"] not in ("video", "image", "string")]
    per_ep = []
    for e in range(ds.num_episodes):
        m = table["episode_index"] == e
        per_ep.append(compute_episode_stats({k: np.asarray(table[k])[m] for k in numeric},
                                            {k: ds.meta.features[k] for k in numeric}))
    eps = pd.concat([pd.read_parquet(p) for p in sorted((root / "meta/episodes").rglob("*.parquet"))])
    ours_per_ep = [{f: {k: np.array(row[f"stats/{f}/{k}"].tolist() if hasattr(row[f"stats/{f}/{k}"], "tolist")
                                    else row[f"stats/{f}/{k}"]) for k in ("min", "max", "mean", "std", "count", "q01",
                                                                        "q10", "q50", "q90", "q99")}
                    for f in numeric} for _, row in eps.iterrows()]
    res = dict(lerobot_stats=_stats(aggregate_stats(per_ep)), aggregated_from_our_episodes=_stats(
        aggregate_stats(ours_per_ep)), episodes_columns=list(eps.columns))
    with tempfile.TemporaryDirectory() as t:
        d = delete_episodes(ds, [1], output_dir=Path(t) / "deleted", repo_id="dptoolkit/deleted")
        kept = d.hf_dataset.with_format("numpy")[:]
        res["delete_episodes"] = dict(episodes=d.num_episodes, frames=d.num_frames,
                                      state=np.asarray(kept["observation.state"]).tolist(),
                                      episode_index=np.asarray(kept["episode_index"]).tolist(),
                                      stats_state_mean=np.asarray(d.meta.stats["observation.state"]["mean"]).tolist())
        theirs = write_like(ds, Path(t) / "theirs")
        merge_datasets([theirs, ds], output_repo_id="dptoolkit/merged", output_dir=Path(t) / "merged")
        mg = LeRobotDataset("dptoolkit/merged", root=Path(t) / "merged", video_backend="pyav")   # no torchcodec here
        rows = [mg[i] for i in range(len(mg))]
        res["merge_datasets"] = dict(episodes=mg.num_episodes, frames=mg.num_frames,
                                     state=np.stack([r["observation.state"].numpy() for r in rows]).tolist(),
                                     episode_index=[int(r["episode_index"]) for r in rows],
                                     stats_state_mean=np.asarray(mg.meta.stats["observation.state"]["mean"]).tolist())
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k in ("delete_episodes", "merge_datasets")}, default=str)[:400])


if __name__ == "__main__":
    {"write": lambda: write(Path(sys.argv[2])), "read": lambda: read(Path(sys.argv[2]), Path(sys.argv[3])),
     "tools": lambda: tools(Path(sys.argv[2]), Path(sys.argv[3])),
     "robot": lambda: robot(sys.argv[2], Path(sys.argv[3]))}[sys.argv[1]]()
