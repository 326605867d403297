"""Closed-loop success on ALOHA transfer-cube (issues 25 and 36): the scripted expert over --demos seeded episodes, a
policy trained by the toolkit on those demonstrations, and rollouts of the policy, the expert and "hold still" on the
same --episodes seeds, each with its 95 % Wilson interval; plus rollout throughput with 1 and --workers worker processes.
Variant: low-dim (`state` + `env_state`, the cube pose standing in for the camera) on a CPU; `--camera` trains on the
top camera + qpos (issue 36's recipe: a small CNN with spatial-softmax keypoints, 72×96 frames, one frame of history,
random 64×86 crops, the clean action predicted, DART-style perturbed demonstrations with `--noise`); `--aux` adds the
cube's pose as a training target the encoder predicts from the frame (`policy.obs_encoder.aux_keys`: never an input).
Success by step: `--rollout-every N` while it trains (the watcher beside the ranks), or `--curve-every N` after training
from the saved checkpoints (the ranks keep every core; each record carries the training seconds of its checkpoint).
`--worlds 1,2` trains the same recipe with 1 and 2 processes (same per-device batch, as `sweep` does) and prints the
time to --target success of each with its range and speed-up (`time_to_success`). `--store` reuses demonstrations.
Prints the tables and the training cost; `--json` writes everything.
Usage: python bench/sim.py [--demos 50] [--steps 6000] [--episodes 50] [--workers 2] [--camera [--aux] [--noise 0.02]
       [--size 72,96]] [--rollout-every N | --curve-every N] [--worlds 1,2] [--target 0.8] [--store S]
       [--override KEY=VALUE] [--out DIR] [--json F]
The camera figures of bench/RESULTS.md: --camera --aux --noise 0.02 --demos 60 --steps 4000 --curve-every 1000
"""
import argparse, json, os, tempfile, time
from pathlib import Path


def recipe(camera: bool, size=(72, 96), down_dims="128,256,512", aux: bool = False) -> list:
    """The training overrides of issue 25's low-dim recipe, or with `camera` issue 36's: a small CNN, spatial-softmax
    keypoints, one frame of history, random crops (8/9 × 9/10 of the frame; centre crop in eval). Without the last two
    the camera policy succeeded 0/20 (bench/RESULTS.md). `aux`: the encoder also learns to predict the cube's pose
    (`env_state`, loaded as a training target only) from the frame, and that prediction stands in for it."""
    r = [f"policy.down_dims=[{down_dims}]", "policy.diffusion_step_embed_dim=128", "policy.prediction_type=sample",
         "policy.n_groups=8", "optimizer.lr=1e-3", "training.lr_warmup_steps=100"]
    if camera:
        r += ["policy.obs_encoder.backbone=small", "policy.obs_encoder.small_channels=[32,64,128]",
              "policy.obs_encoder.small_feature_dim=64", "policy.obs_encoder.pool=spatial_softmax",
              "n_obs_steps=1", f"policy.obs_encoder.crop_shape=[{size[0] * 8 // 9},{size[1] * 9 // 10}]"]
    if camera and aux: r += ["policy.obs_encoder.aux_keys=[env_state]"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=int, default=50); ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--episodes", type=int, default=50); ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64); ap.add_argument("--down-dims", default="128,256,512")
    ap.add_argument("--camera", action="store_true")
    ap.add_argument("--aux", action="store_true", help="with --camera: the cube's pose predicted from the frame")
    ap.add_argument("--out", type=Path); ap.add_argument("--json", type=Path)
    ap.add_argument("--store", type=Path, help="demonstrations made before (dpt sim-data): skip making them")
    ap.add_argument("--scaling-episodes", type=int, default=4)
    ap.add_argument("--noise", type=float, default=0.0, help="DART noise of the demonstrations' executed joints (rad)")
    ap.add_argument("--size", default="72,96", help="camera frames H,W (with --camera)")
    ap.add_argument("--rollout-every", type=int, default=0, help="success while training, every N steps (eval.*)")
    ap.add_argument("--curve-every", type=int, default=0, help="success of the saved checkpoints every N steps, after")
    ap.add_argument("--curve-episodes", type=int, default=20, help="episodes per point of the success curve (both modes)")
    ap.add_argument("--worlds", default="1", help="world sizes to train, e.g. 1,2 (time to --target success)")
    ap.add_argument("--target", type=float, default=0.8, help="success rate for the time-to-success table")
    ap.add_argument("--override", action="append", default=[], help="KEY=VALUE for the training config (repeatable)")
    a = ap.parse_args()
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log
    from dptoolkit.aloha import make_demos
    from dptoolkit.sim import rollout, rollout_table
    from dptoolkit.success import rollout_run
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-sim-"))
    t = time.perf_counter()
    size = tuple(int(v) for v in a.size.split(","))
    if a.store: demos, store = None, a.store
    else:
        demos = make_demos("transfer_cube", n=a.demos, out=out / "demos.zarr", camera=a.camera, size=size,
                           workers=a.workers, overwrite=True, noise=a.noise)
        store = demos.info.path
        print(demos, f"({time.perf_counter() - t:.0f} s)", flush=True)
    t_demos = time.perf_counter() - t
    keys = ("[head_camera,state,env_state]" if a.aux else "[head_camera,state]") if a.camera else "[env_state,state]"
    train_kw = recipe(a.camera, size, a.down_dims, a.aux)
    if a.rollout_every:
        train_kw += [f"eval.rollout_every={a.rollout_every}", f"eval.rollout_episodes={a.curve_episodes}"]
    every = a.rollout_every or a.curve_every or a.steps
    runs, trained = [], {}
    for ws in [int(w) for w in a.worlds.split(",")]:
        cfg = for_store(store, name="test",
                        overrides=[f"task.dataset.obs_keys={keys}", f"training.max_steps={a.steps}",
                                   f"dataloader.batch_size={a.batch}", "scaling.keep_effective_batch_size=false",
                                   "scaling.lr_scaling=none", f"training.checkpoint_every={every}",
                                   "training.keep_checkpoints=50", f"training.log_every={max(1, a.steps // 50)}",
                                   "task.dataset.val_ratio=0.04", *train_kw, *a.override])
        t = time.perf_counter()
        res = train(cfg, nprocs=ws, run_dir=out / f"run-world{ws}", progress=True)
        trained[ws] = time.perf_counter() - t
        log = read_log(res.run_dir)
        print(f"world {ws}: trained {a.steps} steps in {trained[ws]:.0f} s: loss {log.loss.iloc[0]:.3f} → "
              f"{log.loss.iloc[-1]:.4f}", flush=True)
        if a.curve_every:
            rollout_run(res.run_dir, every=a.curve_every, episodes=a.curve_episodes, seed=1000, workers=a.workers)
        runs.append(res.run_dir)
    curves = {}
    if a.rollout_every or a.curve_every:
        for rd in runs:
            curves[rd.name] = c = read_log(rd, kind="rollout")
            print(f"{rd.name}: success by step ({a.curve_episodes} episodes each):\n"
                  + c[["step", "train_s", "success", "success_low", "success_high"]].round(3).to_string(index=False))
    tts = None
    if curves and len(runs) > 1:
        from dptoolkit.sweep import time_to_success
        tts = time_to_success(runs, target=a.target)
        print(f"time to {a.target:.0%} success (the interval's centre), ranks sharing {os.cpu_count()} cores:\n"
              + tts.round(3).to_string(index=False))
    final = runs[0]
    results = [rollout(final, episodes=a.episodes, workers=a.workers, seed=1000, video_dir=out / "videos"),
               rollout("expert", episodes=a.episodes, workers=a.workers, seed=1000),
               rollout("hold", episodes=a.episodes, workers=a.workers, seed=1000)]
    table = rollout_table(results)
    print(table.round(3).to_string(), flush=True)
    one = rollout(final, episodes=a.scaling_episodes, workers=1, seed=5000, progress=False)
    many = rollout(final, episodes=a.scaling_episodes, workers=a.workers, seed=5000, progress=False)
    ratio = many.summary()["episodes_per_min"] / one.summary()["episodes_per_min"]
    print(f"rollout throughput: {one.summary()['episodes_per_min']:.1f} episodes/min with 1 worker, "
          f"{many.summary()['episodes_per_min']:.1f} with {a.workers} ({ratio:.2f}×; goal ≥ {0.8 * a.workers:.1f}×)")
    if a.json:
        a.json.write_text(json.dumps(dict(
            demos=None if demos is None else dict(n=a.demos, expert_success=demos.success_rate, seconds=t_demos),
            train=dict(steps=a.steps, seconds=trained), rollouts=table.reset_index().to_dict("records"),
            scaling=ratio, curves={k: v.to_dict("records") for k, v in curves.items()},
            time_to_success=None if tts is None else tts.to_dict("records"), videos=results[0].videos),
            indent=1, default=str))


if __name__ == "__main__":
    main()
