"""More than one task in closed loop (issue 67), first part: each scripted expert's success on --seeds seeds (ALOHA
transfer-cube and insertion; the same waypoint experts `dpt sim-data` records with), with its 95 % Wilson interval, the
seeds it failed on and seconds per episode; `--frames F.png` draws both tasks' first
and last frames of one expert episode each (the head camera), the picture the sim chapter shows.
The policies' part of the issue (single-task and two-task camera policies over training seeds, the task_embed_dim=0
control) is not in this script yet.
Usage: python bench/tasks.py [--seeds 100] [--start 0] [--workers 2] [--noise 0] [--frames F.png] [--json F]
"""
import argparse, json, tempfile, time
from pathlib import Path


def expert(task, a):
    from dptoolkit.sim import make_demos
    from dptoolkit.stats import wilson
    from dptoolkit.store import open_store
    out = Path(tempfile.mkdtemp(prefix=f"dpt-{task}-")) / "demos.zarr"
    t = time.perf_counter()
    make_demos(task, n=a.seeds, out=out, workers=a.workers, seed=a.start, keep="all", progress=False, noise=a.noise)
    wall = time.perf_counter() - t
    attrs = dict(open_store(out).attrs)["sim"]
    ok = attrs["expert_success"]
    lo, hi = wilson(sum(ok), len(ok))
    failed = [s for s, x in zip(attrs["seeds"], ok) if not x]
    row = dict(task=task, successes=sum(ok), episodes=len(ok), low=lo, high=hi, failed_seeds=failed,
               seconds_per_episode=wall * a.workers / len(ok), wall_s=wall)
    print(f"{task:13s} expert {sum(ok)}/{len(ok)} = {sum(ok) / len(ok):.0%} [{lo:.0%}–{hi:.0%}]; failed seeds "
          f"{failed[:12]}{' …' if len(failed) > 12 else ''}; {row['seconds_per_episode']:.1f} s per episode",
          flush=True)
    return row


def frames(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dptoolkit.sim import expert_episode
    fig, ax = plt.subplots(2, 2, figsize=(8, 6))
    for i, task in enumerate(("transfer_cube", "insertion")):
        ep = expert_episode(task, 0, True, (120, 160), 400, 0.0)
        cam = ep["arrays"]["head_camera"]
        for j, (k, name) in enumerate(((0, "first frame"), (len(cam) - 1, f"step {len(cam) - 1}"))):
            ax[i, j].imshow(cam[k].transpose(1, 2, 0))
            ax[i, j].set_title(f"{task}, {name} ({'success' if ep['success'] else 'failure'})", fontsize=9)
            ax[i, j].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"frames: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=100); ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2); ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--tasks", default="transfer_cube,insertion")
    ap.add_argument("--frames", type=Path); ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res = dict(args={k: str(v) for k, v in vars(a).items()}, experts=[expert(t, a) for t in a.tasks.split(",")])
    if a.frames: frames(a.frames)
    if a.json: a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
