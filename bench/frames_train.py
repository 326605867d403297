"""Training samples/s of the camera policy from a compressed source (issue 88): `robot_dp_14` (RoboTwin's ResNet-18 +
U-Net, the config `dpt train` selects for a 14-D store with a camera) trained by `dpt train` on this CPU from the same
frames kept three ways (`bench/frames.py`'s `write_sources`: a decoded store, one JPEG-XL chunk a frame, a LeRobot v3
dataset's AV1 read in place), with 0, 1 and 2 loader workers, chunks storage. The frames are the camera path over
scikit-image's photographs at 240x320. Ratios are to the decoded store with as many workers, in this one run.

    pip install scikit-image
    python bench/frames_train.py [--frames 400] [--steps 12] [--batch 8]
"""
import argparse, json, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frames import photo_path, write_sources   # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        srcs = write_sources(photo_path(a.frames, 240, 320), d)
        for w in (0, 1, 2):
            for src in srcs:
                run = d / f"run-{src.name}-{w}"
                r = subprocess.run(["dpt", "train", "--data", str(src), "--nprocs", "1", "--no-progress",
                                    f"logging.run_dir={run}", "task.dataset.storage=chunks", "training.device=cpu",
                                    f"dataloader.num_workers={w}", f"dataloader.batch_size={a.batch}",
                                    f"training.max_steps={a.steps}", "training.checkpoint_every=0",
                                    "logging.tensorboard=false"], capture_output=True, text=True)
                if r.returncode: sys.exit(f"{src.name}, {w} workers:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
                res = json.loads((run / "result.json").read_text())
                out[(src.name, w)] = res["samples_per_s"]
                print(f"{src.name:9s} workers {w}: {res['samples_per_s']:6.2f} samples/s "
                      f"({res['samples_per_s'] / out[('dec.zarr', w)]:.2f}x the decoded store)", flush=True)


if __name__ == "__main__":
    main()
