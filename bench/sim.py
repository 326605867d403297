"""Closed-loop success on ALOHA transfer-cube (issue 25): the scripted expert over --demos seeded episodes, a policy
trained by the toolkit on those demonstrations, and rollouts of the policy, the expert and "hold still" on the same
--episodes seeds, each with its 95 % Wilson interval; plus rollout throughput with 1 and --workers worker processes.
Variant: low-dim (`state` + `env_state`, the cube pose standing in for the camera) on a CPU; `--camera` trains on the
top camera alone (issue 36's recipe: a small CNN with spatial-softmax keypoints, 72×96 frames, one frame of history,
random 64×86 crops, the clean action predicted, DART-style perturbed demonstrations with `--noise`) and with
`--rollout-every N` measures success while it trains (the success curve and the training seconds to reach it).
Prints the table and the training cost; `--json` writes everything.
Usage: python bench/sim.py [--demos 50] [--steps 6000] [--episodes 50] [--workers 2] [--camera [--noise 0.02]
       [--size 72,96] [--rollout-every 1000]] [--override KEY=VALUE] [--out DIR] [--json F]
"""
import argparse, json, os, tempfile, time
from pathlib import Path


def recipe(camera: bool, size=(72, 96), down_dims="128,256,512") -> list:
    """The training overrides of issue 25's low-dim recipe, or with `camera` issue 36's: a small CNN, spatial-softmax
    keypoints, one frame of history, random crops (8/9 × 9/10 of the frame; centre crop in eval). Without the last two
    the camera policy succeeded 0/20 (bench/RESULTS.md)."""
    r = [f"policy.down_dims=[{down_dims}]", "policy.diffusion_step_embed_dim=128", "policy.prediction_type=sample",
         "policy.n_groups=8", "optimizer.lr=1e-3", "training.lr_warmup_steps=100"]
    if camera:
        r += ["policy.obs_encoder.backbone=small", "policy.obs_encoder.small_channels=[32,64,128]",
              "policy.obs_encoder.small_feature_dim=64", "policy.obs_encoder.pool=spatial_softmax",
              "n_obs_steps=1", f"policy.obs_encoder.crop_shape=[{size[0] * 8 // 9},{size[1] * 9 // 10}]"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=int, default=50); ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--episodes", type=int, default=50); ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64); ap.add_argument("--down-dims", default="128,256,512")
    ap.add_argument("--camera", action="store_true"); ap.add_argument("--out", type=Path); ap.add_argument("--json", type=Path)
    ap.add_argument("--scaling-episodes", type=int, default=4)
    ap.add_argument("--noise", type=float, default=0.0, help="DART noise of the demonstrations' executed joints (rad)")
    ap.add_argument("--size", default="72,96", help="camera frames H,W (with --camera)")
    ap.add_argument("--rollout-every", type=int, default=0, help="success while training, every N steps (eval.*)")
    ap.add_argument("--override", action="append", default=[], help="KEY=VALUE for the training config (repeatable)")
    a = ap.parse_args()
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log
    from dptoolkit.sim import make_demos, rollout, rollout_table
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-sim-"))
    t = time.perf_counter()
    size = tuple(int(v) for v in a.size.split(","))
    demos = make_demos("transfer_cube", n=a.demos, out=out / "demos.zarr", camera=a.camera, size=size,
                       workers=a.workers, overwrite=True, noise=a.noise)
    t_demos = time.perf_counter() - t
    print(demos, f"({t_demos:.0f} s)", flush=True)
    keys = "[head_camera,state]" if a.camera else "[env_state,state]"
    train_kw = recipe(a.camera, size, a.down_dims)
    if a.rollout_every:
        train_kw += [f"eval.rollout_every={a.rollout_every}", "eval.rollout_episodes=20", "training.keep_checkpoints=50"]
    cfg = for_store(demos.info.path, name="test",
                    overrides=[f"task.dataset.obs_keys={keys}", f"training.max_steps={a.steps}", f"dataloader.batch_size={a.batch}",
                               "scaling.keep_effective_batch_size=false",
                               f"training.checkpoint_every={a.rollout_every or a.steps}",
                               f"training.log_every={max(1, a.steps // 50)}", "task.dataset.val_ratio=0.04",
                               *train_kw, *a.override])
    t = time.perf_counter()
    res = train(cfg, nprocs=1, run_dir=out / "run", progress=True)
    t_train = time.perf_counter() - t
    log = read_log(res.run_dir)
    print(f"trained {a.steps} steps in {t_train:.0f} s: loss {log.loss.iloc[0]:.3f} → {log.loss.iloc[-1]:.3f}", flush=True)
    curve = read_log(res.run_dir, kind="rollout") if a.rollout_every else None
    if curve is not None and len(curve):
        print("success while training (20 episodes each):\n" + curve[["step", "train_s", "success"]].to_string(index=False))
    results = [rollout(res.run_dir, episodes=a.episodes, workers=a.workers, seed=1000, video_dir=out / "videos"),
               rollout("expert", episodes=a.episodes, workers=a.workers, seed=1000),
               rollout("hold", episodes=a.episodes, workers=a.workers, seed=1000)]
    table = rollout_table(results)
    print(table.round(3).to_string(), flush=True)
    one = rollout(res.run_dir, episodes=a.scaling_episodes, workers=1, seed=5000, progress=False)
    many = rollout(res.run_dir, episodes=a.scaling_episodes, workers=a.workers, seed=5000, progress=False)
    ratio = many.summary()["episodes_per_min"] / one.summary()["episodes_per_min"]
    print(f"rollout throughput: {one.summary()['episodes_per_min']:.1f} episodes/min with 1 worker, "
          f"{many.summary()['episodes_per_min']:.1f} with {a.workers} ({ratio:.2f}×; goal ≥ {0.8 * a.workers:.1f}×)")
    if a.json:
        a.json.write_text(json.dumps(dict(demos=dict(n=a.demos, expert_success=demos.success_rate, seconds=t_demos),
                                          train=dict(steps=a.steps, seconds=t_train, final_loss=float(log.loss.iloc[-1])),
                                          rollouts=table.reset_index().to_dict("records"), scaling=ratio,
                                          curve=None if curve is None else curve.to_dict("records"),
                                          videos=results[0].videos), indent=1, default=str))


if __name__ == "__main__":
    main()
