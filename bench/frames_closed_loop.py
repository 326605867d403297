"""Does a camera policy trained from frames that stay compressed succeed as often as one trained from decoded frames?
(issue 88's closed-loop goal). ALOHA transfer-cube camera demonstrations (`--demos`, DART σ 0.02, head camera
`--size`, only the successes kept) are kept three ways: our decoded store (Blosc LZ4), the LeRobot v3 dataset
`to_lerobot` writes from it (AV1, crf 30, a keyframe every 2 frames: lerobot's defaults) read **in place**, and
LeRobot v3 at full colour resolution (`hevc444`: `to_lerobot(codec="hevc", chroma="444", crf=--video-crf)`, yuv444p,
read in place), one JPEG chunk a frame (q95) written from the decoded store's frames (`jpeg`: an image-codec store, compressed once,
as `dpt convert --frames jpeg` writes them; `jpeg-of-av1`: the same codec over the LeRobot dataset's AV1-decoded frames,
`dpt convert LEROBOT --frames jpeg`, compressed twice). Each source trains issue 36's pixel
recipe with the aux target (flow predicting the clean chunk; bench/tasks.py's `single+aux`) for `--steps` steps per
training seed, the same seed on every source (a paired comparison: only the frames differ), and each run's final EMA
policy plays the same `--episodes` held-out seeds 1000 ... in one Euler step. Success per source pooled over the
training seeds, 95 % Wilson; the paired difference per seed. Runs and rollouts are kept in DIR and reused.
Usage: python bench/frames_closed_loop.py DIR [--sources decoded,lerobot,jpeg] [--train-seeds 0,1] [--steps 2000]
"""
import argparse, json, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim import recipe   # noqa: E402  (bench/sim.py: issue 36's camera recipe)
from tasks import _rolled   # noqa: E402  (bench/tasks.py: a run's held-out seeds, kept beside it)


def sources(a):
    "The three ways the same demonstrations are kept, made once into DIR: {name: path}."
    from dptoolkit.convert import convert, to_lerobot
    from dptoolkit.aloha import make_demos
    d = a.dir / "transfer_cube.zarr"
    if not d.exists():
        t = time.perf_counter()
        print(make_demos("transfer_cube", n=a.demos, out=d, camera=True, size=a.size, workers=a.workers,
                         noise=a.noise, progress=False), f"({time.perf_counter() - t:.0f} s)", flush=True)
    lr = a.dir / "transfer_cube_lerobot"
    want = a.sources.split(",")
    if not lr.exists() and {"lerobot", "jpeg-of-av1"} & set(want): to_lerobot(d, lr, progress=False)
    hv = a.dir / f"transfer_cube_lerobot_hevc444_crf{a.video_crf}"
    if "hevc444" in want and not hv.exists():
        to_lerobot(d, hv, codec="hevc", chroma="444", crf=a.video_crf, progress=False)
    ja = a.dir / "transfer_cube_jpeg_of_av1.zarr"
    if "jpeg-of-av1" in want and not ja.exists(): convert(lr, ja, frames="jpeg", quality=95, progress=False)
    jp = a.dir / "transfer_cube_jpeg.zarr"
    if "jpeg" in want and not jp.exists(): jpeg_store(d, jp)
    j4 = a.dir / "transfer_cube_jpeg444.zarr"
    if "jpeg444" in want and not j4.exists(): jpeg_store(d, j4, subsampling="444")
    return {"decoded": d, "lerobot": lr, "jpeg": jp, "jpeg-of-av1": ja, "jpeg444": j4, "hevc444": hv}


def jpeg_store(src, dest, quality=95, subsampling=None):
    """`src` with its camera frames kept as one JPEG chunk each, channels-last (the layout `_write_store` gives an
    image-codec store); every other array, the meta arrays and the attrs as they are. `subsampling`: libjpeg's default
    (None: 4:2:0, as AV1's yuv420p) or "444" (full-resolution colour, `jpeg444`)."""
    import numpy as np, zarr
    from dptoolkit.codecs import frame_chunks, frame_codec
    from dptoolkit.store import create_array
    s, fc = zarr.open_group(str(src), mode="r"), frame_codec("jpeg", quality)
    if subsampling:
        import imagecodecs.numcodecs as icn
        fc = icn.Jpeg(level=quality, subsampling=subsampling)
    g = zarr.open_group(str(dest), mode="w", zarr_format=2)
    for part in ("data", "meta"):
        for k, v in s[part].arrays():
            if k == "head_camera":
                x = np.ascontiguousarray(np.moveaxis(v[:], 1, -1))      # (T, 3, H, W) → (T, H, W, 3)
                create_array(g, f"{part}/{k}", x.shape, "uint8", frame_chunks(x.shape), fc)[...] = x
            else: create_array(g, f"{part}/{k}", v.shape, v.dtype, v.chunks)[...] = v[:]
    g.attrs.update(dict(s.attrs), convert=dict(frames=dict(codec=fc.codec_id, quality=quality,
                                                           subsampling=subsampling or "420")))


def at_rest(path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--sources", default="decoded,lerobot,jpeg",
                    help="of decoded, lerobot, jpeg, jpeg444, jpeg-of-av1, hevc444")
    ap.add_argument("--video-crf", type=int, default=18, help="hevc444's crf (bench/frames_chroma.py picks it)")
    ap.add_argument("--demos", type=int, default=60); ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--size", default="72,96", help="camera frames H,W")
    ap.add_argument("--train-seeds", default="0,1"); ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64); ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=50); ap.add_argument("--inference-steps", type=int, default=1)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    a.size = tuple(int(x) for x in a.size.split(","))
    a.dir.mkdir(parents=True, exist_ok=True)
    import pandas as pd
    from dptoolkit.config import for_store
    from dptoolkit.stats import wilson
    from dptoolkit.train import train
    src = {k: v for k, v in sources(a).items() if k in a.sources.split(",")}
    for k, p in src.items(): print(f"{k}: {p} ({at_rest(p) / 1e6:.2f} MB at rest)", flush=True)
    rows = []
    for seed in [int(s) for s in a.train_seeds.split(",")]:
        for name, store in src.items():
            rd = a.dir / (f"{name}-crf{a.video_crf}-seed{seed}" if name == "hevc444" else f"{name}-seed{seed}")
            if not (rd / "result.json").exists():
                cfg = for_store(store, name="test", overrides=[
                    "task.dataset.obs_keys=[head_camera,state,env_state]", f"training.max_steps={a.steps}",
                    f"dataloader.batch_size={a.batch}", f"training.checkpoint_every={a.steps}",
                    f"training.log_every={max(1, a.steps // 20)}", "task.dataset.val_ratio=0.04",
                    f"training.seed={seed}", *recipe(True, size=a.size, aux=True), "policy.objective=flow",
                    "policy.num_inference_steps=10"])
                t = time.perf_counter()
                res = train(cfg, nprocs=1, run_dir=rd, progress=False)
                print(f"{rd.name}: trained in {time.perf_counter() - t:.0f} s, "
                      f"{res.metrics.get('samples_per_s', float('nan')):.0f} samples/s", flush=True)
            done = json.loads((rd / "result.json").read_text())
            a.tasks = "transfer_cube"
            got = _rolled(a, rd, "transfer_cube", False)
            rows.append(dict(source=name, seed=seed, success=got["success"], episodes=got["episodes"],
                             mean_max_reward=got["mean_max_reward"], train_s=done.get("wall_s"),
                             final_loss=done.get("final_loss"), outcomes=got["outcomes"]))
            print({k: v for k, v in rows[-1].items() if k != "outcomes"}, flush=True)
    df = pd.DataFrame(rows)
    agg = df.groupby("source", sort=False).agg(success=("success", "sum"), episodes=("episodes", "sum"),
                                               seeds=("seed", "nunique"), mean_max_reward=("mean_max_reward", "mean"))
    agg["rate"] = agg.success / agg.episodes
    ci = [wilson(s, n) for s, n in zip(agg.success, agg.episodes)]
    agg["low"], agg["high"] = [c[0] for c in ci], [c[1] for c in ci]
    agg["MB at rest"] = [at_rest(src[k]) / 1e6 for k in agg.index]
    print(df.drop(columns="outcomes").to_string(index=False)); print(agg.round(3).to_string())
    if a.json: a.json.write_text(json.dumps(dict(runs=rows, pooled=agg.reset_index().to_dict("records")), indent=1,
                                            default=str))


if __name__ == "__main__":
    main()
