"""Writes tests/data/umi/umi_layout.zarr (a folder) and umi_layout.zarr.zip: a replay buffer laid out as UMI's
`scripts_slam_pipeline/07_generate_replay_buffer.py` writes one (real-stanford/universal_manipulation_interface), by
the writers it uses: zarr-python 2 (its `zarr.ZipStore` for the zip) and imagecodecs' own numcodecs codec
`imagecodecs_jpegxl` (UMI's `JpegXl(level=99, numthreads=1)`, one frame a chunk). Keys as UMI's: `data/camera0_rgb`
(T, H, W, 3) uint8, `robot0_eef_pos` 3, `robot0_eef_rot_axis_angle` 3, `robot0_gripper_width` 1,
`robot0_demo_start_pose` / `robot0_demo_end_pose` 6, all float32 in diffusion_policy's default Blosc LZ4 (its
ReplayBuffer's `compressors='default'`), `meta/episode_ends` int64. Frames: a camera path over a textured scene with
sensor noise (a fixture must be small: 3 episodes, 64x64 rather than UMI's 224x224).

Run it in a side virtualenv that has zarr 2 (`pip install "zarr<3" "numcodecs<0.16" imagecodecs`), from the
repository root: /path/to/venv/bin/python tests/data/umi/make_fixture.py"""
import hashlib, json, shutil, sys
from pathlib import Path

import numpy as np
import numcodecs, imagecodecs, zarr
from imagecodecs.numcodecs import Jpegxl, register_codecs

assert zarr.__version__.startswith("2."), f"zarr {zarr.__version__}: UMI's writer is zarr-python 2"
register_codecs()
OUT = Path(__file__).parent
H = W = 64
LENGTHS = [16, 20, 14]

def scene(rng):
    "A textured table top, larger than the view: the camera moves over it."
    y, x = np.mgrid[0:3 * H, 0:3 * W].astype(np.float32)
    img = np.stack([120 + 60 * np.sin(x / 17) * np.cos(y / 23), 110 + 50 * np.cos(x / 11 + y / 29),
                    90 + 40 * np.sin((x + y) / 31)], -1)
    for _ in range(12):                                     # objects: flat-coloured blocks
        cy, cx, r = rng.integers(0, 3 * H), rng.integers(0, 3 * W), rng.integers(6, 20)
        img[max(0, cy - r):cy + r, max(0, cx - r):cx + r] = rng.integers(0, 255, 3)
    return img

def episode(rng, n):
    img, t = scene(rng), np.linspace(0, 1, n)[:, None]
    a, b = rng.uniform(-0.3, 0.3, 3), rng.uniform(-0.3, 0.3, 3)
    pos = (a + (b - a) * t).astype(np.float32)                       # the gripper moves between two poses
    rot = (0.1 * np.sin(3 * t + rng.uniform(0, 3, 3))).astype(np.float32)
    width = (0.04 + 0.04 * np.cos(4 * t)).astype(np.float32)
    frames = []
    for p in pos:                                                    # the wrist camera follows the gripper
        oy, ox = int((p[0] + 0.5) * 2 * H), int((p[1] + 0.5) * 2 * W)
        f = img[oy:oy + H, ox:ox + W] + rng.normal(0, 2, (H, W, 3))  # sensor noise
        frames.append(np.clip(f, 0, 255).astype(np.uint8))
    pose = lambda q: np.broadcast_to(np.concatenate([pos[q], rot[q]]), (n, 6)).astype(np.float64)
    return dict(camera0_rgb=np.stack(frames), robot0_eef_pos=pos, robot0_eef_rot_axis_angle=rot,
                robot0_gripper_width=width, robot0_demo_start_pose=pose(0), robot0_demo_end_pose=pose(-1))

def write(store):
    rng = np.random.default_rng(0)
    eps = [episode(rng, n) for n in LENGTHS]
    root = zarr.group(store=store, overwrite=True)
    data, meta = root.require_group("data"), root.require_group("meta")
    lowdim = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE)   # ReplayBuffer's default
    for k in eps[0]:
        v = np.concatenate([e[k] for e in eps])
        if k == "camera0_rgb":
            data.create_dataset(k, data=v, chunks=(1, H, W, 3), compressor=Jpegxl(level=99, numthreads=1))
        else:
            data.create_dataset(k, data=v, chunks=v.shape, compressor=lowdim)
    meta.create_dataset("episode_ends", data=np.cumsum(LENGTHS).astype(np.int64), compressor=None)
    return np.concatenate([e["camera0_rgb"] for e in eps])

folder = OUT / "umi_layout.zarr"
shutil.rmtree(folder, ignore_errors=True)
raw = write(zarr.DirectoryStore(str(folder)))
(OUT / "umi_layout.zarr.zip").unlink(missing_ok=True)
with zarr.ZipStore(str(OUT / "umi_layout.zarr.zip"), mode="w") as z: write(z)
back = zarr.open(str(folder), mode="r")["data/camera0_rgb"][:]
(OUT / "versions.json").write_text(json.dumps(dict(zarr=zarr.__version__, numcodecs=numcodecs.__version__,
                                                   imagecodecs=imagecodecs.__version__, python=sys.version.split()[0],
                                                   frames=dict(shape=list(back.shape),     # what the writer's own codec decodes
                                                               sha256=hashlib.sha256(back.tobytes()).hexdigest(),
                                                               max_abs_error_vs_raw=int(np.abs(back.astype(int) - raw).max()))),
                                              indent=1) + "\n")
size = lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
print(f"{folder}: {size(folder)} bytes; zip {size(OUT / 'umi_layout.zarr.zip')} bytes; frames decoded {raw.nbytes} bytes")
