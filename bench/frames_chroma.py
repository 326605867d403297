"""Colour resolution at rest (issue 88): what keeping colour at full resolution (4:4:4) costs in bytes, for video as
`to_lerobot` writes it (SVT-AV1 yuv420p crf 30 -- lerobot's defaults, the baseline of every ratio -- and H.264 / HEVC
at yuv420p and yuv444p over a crf range; a keyframe every 2 frames, as lerobot) and for one JPEG / AVIF chunk a frame
at 4:2:0 and 4:4:4, and how close each comes back: PSNR over RGB, and over the two colour-difference planes alone
(BT.601 Cb, Cr: where 4:2:0 loses). Frame sets: (a) ALOHA transfer-cube renders at 72x96 (the closed-loop bench's
demonstrations, `--store`), (b) PushT renders at 96x96 (diffusion_policy's own store), (c) camera footage: a camera
path over the photographs scikit-image bundles (bench/frames.py's), at 240x320. Ratios are to the AV1 row of the
same frames, measured in this run.

    python bench/frames_chroma.py [--store DIR/transfer_cube.zarr] [--frames 600] [--json out.json] [--bframes]

`--bframes` adds x264 / x265 with their default B-frames (kind `video+B`): what `to_lerobot`'s `bf=0` costs.
"""
import argparse, json, os, sys, tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from frames import photo_path, pusht_frames   # noqa: E402  (bench/frames.py)

VIDEOS = [("libsvtav1", "420", 30), ("h264", "420", 30), ("hevc", "420", 30), ("hevc", "420", 22),
          ("h264", "444", 18), ("h264", "444", 22), ("h264", "444", 26), ("hevc", "444", 18), ("hevc", "444", 22),
          ("hevc", "444", 26), ("hevc", "444", 30)]
IMAGES = [("jpeg", "420", 95), ("jpeg", "444", 95), ("avif", "444", 80)]
BFRAMES = [("h264", "444", 18), ("hevc", "444", 18), ("hevc", "444", 22)]   # --bframes: as the encoders default


def cbcr(x):
    "BT.601 colour-difference planes of uint8 RGB (..., 3) frames, float."
    x = x.astype(np.float64)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    return np.stack([-0.168736 * r - 0.331264 * g + 0.5 * b, 0.5 * r - 0.418688 * g - 0.081312 * b], -1)


def psnr(a, b):
    return float(10 * np.log10(255 ** 2 / max(np.mean((a.astype(np.float64) - b) ** 2), 1e-12)))


def video_row(frames, codec, chroma, crf, tmp, bframes=False):
    """(bytes, frames decoded back) of `frames` (N, H, W, 3) written as `to_lerobot` writes a camera, 50-step episodes;
    `bframes`: with the encoder's default B-frames (x264 / x265 put them in; `to_lerobot` writes none)."""
    import av
    from dptoolkit import convert
    n = len(frames)
    lengths = np.full(n // 50, 50)
    root = Path(tempfile.mkdtemp(dir=tmp))
    saved = convert._OPTIONS.get(codec)
    if bframes and saved: convert._OPTIONS[codec] = {k: v for k, v in saved.items() if k != "bf"}
    try:
        convert.encode_camera(np.ascontiguousarray(frames[:lengths.sum()].transpose(0, 3, 1, 2)), lengths, root, "cam",
                              50, codec=codec, crf=crf, pix_fmt=convert.video_pix_fmt(codec, chroma))
    finally:
        if saved is not None: convert._OPTIONS[codec] = saved
    mp4 = next(root.rglob("*.mp4"))
    with av.open(str(mp4)) as c:
        back = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])])
    return mp4.stat().st_size, back


def image_row(frames, name, chroma, q):
    from dptoolkit.codecs import frame_codec
    c = frame_codec(name, q, chroma)
    encs = [c.encode(f[None]) for f in frames]
    return sum(map(len, encs)), np.stack([np.asarray(c.decode(e)).reshape(frames.shape[1:]) for e in encs])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="the closed-loop bench's transfer_cube.zarr (its head camera)")
    ap.add_argument("--pusht", type=Path, default=ROOT.parent / "shared/data/pusht/pusht_cchi_v7_replay.zarr")
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--bframes", action="store_true", help="also the rows of BFRAMES with the encoders' B-frames")
    a = ap.parse_args()
    sets = {}
    if a.store:
        import zarr
        cam = zarr.open_group(str(a.store), mode="r")["data/head_camera"]
        sets["ALOHA transfer-cube renders 72x96"] = np.ascontiguousarray(np.moveaxis(cam[:a.frames], 1, -1))
    if a.pusht.exists(): sets["PushT renders 96x96"] = pusht_frames(a.pusht, a.frames, 96, 96)
    sets["camera path over photographs 240x320"] = photo_path(a.frames, 240, 320)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, fr in sets.items():
            fr = fr[:len(fr) // 50 * 50]
            base = None
            todo = ([("video", v) for v in VIDEOS] + [("image", i) for i in IMAGES]
                    + [("video+B", v) for v in (BFRAMES if a.bframes else [])])
            for kind, (name, chroma, q) in todo:
                size, back = (image_row(fr, name, chroma, q) if kind == "image"
                              else video_row(fr, name, chroma, q, tmp, bframes=kind == "video+B"))
                base = base or size
                rows.append(dict(frames=label, kind=kind, codec=name, chroma=chroma, q=q, KB=round(size / 1e3, 1),
                                 vs_av1=round(size / base, 2), psnr=round(psnr(back, fr), 1),
                                 psnr_cbcr=round(psnr(cbcr(back), cbcr(fr)), 1)))
                print(rows[-1], flush=True)
    import pandas as pd
    df = pd.DataFrame(rows)
    for label, d in df.groupby("frames", sort=False):
        print(f"\n{label} ({len(sets[label]) // 50 * 50} frames)")
        print(d.drop(columns="frames").to_string(index=False))
    if a.json: a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
