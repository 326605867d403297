"""Frames at rest and decoded (issue 88): bytes per frame and single-core decode rate for each way a camera can be kept
-- our decoded store (Blosc LZ4, bit-shuffled: `convert.FRAME_CODEC`), one image-codec chunk a frame (codecs chapter:
JPEG-XL, AVIF, JPEG, WebP at `FRAME_CODECS`' qualities) and video as LeRobot writes it (AV1 through libsvtav1 and
H.264 through libx264, yuv420p, crf 30, a keyframe every 2 frames: lerobot's `encode_video_frames` defaults) -- on
(a) PushT renders (diffusion_policy's own store, ../shared/data/pusht) and (b) camera footage: a camera path (pan,
zoom, sensor noise) over the real photographs scikit-image's wheel bundles (astronaut, coffee, chelsea, rocket), at
96x96, 240x320 and 480x640. Video is also read the way training reads it: a window of 2 frames at a random timestamp
(seek to the keyframe, decode forward), PyAV. Then the loader: windows per second a `SequenceDataset` serves from
the decoded store, a JPEG-XL store and a LeRobot dataset read in place, with 0, 1 and 2 `DataLoader` workers, and
a projection for a 3-camera 30 fps dataset. Everything is measured in this one run; ratios are to the decoded store's figure of the same run.

    pip install scikit-image          # the photographs (bench only)
    python bench/frames.py [--frames 300] [--sizes 96x96,240x320,480x640] [--pusht PATH] [--json out.json]
"""
import argparse, io, json, os, sys, tempfile, time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent


def photo_path(n, H, W, seed=0):
    "n frames (n, H, W, 3) uint8 of a camera moving over real photographs: pan and zoom, sensor noise."
    import skimage.data as sd
    from PIL import Image
    rng = np.random.default_rng(seed)
    photos = [sd.astronaut(), sd.coffee(), sd.chelsea(), sd.rocket()]
    out = np.empty((n, H, W, 3), np.uint8)
    per = max(1, n // len(photos))
    for i in range(n):
        img = photos[min(i // per, len(photos) - 1)]
        t = (i % per) / per
        h, w = img.shape[:2]
        z = 0.6 + 0.3 * np.sin(2 * np.pi * t)                        # zoom in and out
        ch, cw = int(h * z), int(min(w, h * z * W / H))
        y0 = int((h - ch) * (0.5 + 0.4 * np.sin(2 * np.pi * t + 1)))
        x0 = int((w - cw) * (0.5 + 0.4 * np.cos(2 * np.pi * t)))
        crop = Image.fromarray(img[y0:y0 + ch, x0:x0 + cw]).resize((W, H), Image.BILINEAR)
        f = np.asarray(crop, np.float32) + rng.normal(0, 2.0, (H, W, 3))   # sensor noise
        out[i] = np.clip(f, 0, 255).astype(np.uint8)
    return out


def pusht_frames(path, n, H, W):
    import zarr
    from PIL import Image
    img = np.asarray(zarr.open_group(str(path), mode="r")["data/img"][:n])
    f = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    if (H, W) == f.shape[1:3]: return f
    return np.stack([np.asarray(Image.fromarray(x).resize((W, H), Image.BILINEAR)) for x in f])


def codecs():
    from numcodecs import Blosc
    from dptoolkit.codecs import FRAME_CODECS, frame_codec
    from dptoolkit.convert import FRAME_CODEC
    out = {"decoded (Blosc LZ4)": ("chunk", Blosc(**FRAME_CODEC))}
    for name in ("jpegxl", "avif", "jpeg", "webp"):
        out[f"{name} q{FRAME_CODECS[name][1]}"] = ("frame", frame_codec(name))
    return out


def image_codec_row(frames, kind, codec, reps=1):
    "(bytes per frame, decode frames/s on one core)."
    if kind == "chunk":       # our store: 100-frame chunks, channels first
        x = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
        encs = [codec.encode(x[i:i + 100]) for i in range(0, len(x), 100)]
        t = time.perf_counter()
        for _ in range(reps):
            for e in encs: codec.decode(e)
        dt = time.perf_counter() - t
    else:
        encs = [codec.encode(f[None]) for f in frames]
        t = time.perf_counter()
        for _ in range(reps):
            for e in encs: codec.decode(e)
        dt = time.perf_counter() - t
    return sum(map(len, encs)) / len(frames), reps * len(frames) / dt


def encode_video(frames, codec, fps=30):
    """Bytes of an mp4 as lerobot writes it: yuv420p, crf 30, g 2 (keyframe every 2 frames); the thread's scheduling
    given back after (SVT-AV1 run as root leaves it at SCHED_FIFO 99: the processes chapter)."""
    import av
    from dptoolkit.processes import keep_scheduling
    buf = io.BytesIO()
    with keep_scheduling(), av.open(buf, "w", format="mp4") as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        s.options = {"crf": "30", "g": "2"} if codec == "libx264" else {"crf": "30", "g": "2", "preset": "12"}
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")): c.mux(p)
        for p in s.encode(): c.mux(p)
    return buf.getvalue()


def video_rates(data, n, fps=30, windows=100, seed=0):
    "(sequential frames/s, random 2-frame windows' frames/s) decoding an mp4 with PyAV on one thread."
    import av
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        s.thread_type, s.thread_count = "SLICE", 1
        t = time.perf_counter()
        k = sum(1 for f in c.decode(s) if f.to_ndarray(format="rgb24") is not None)
        seq = k / (time.perf_counter() - t)
    rng = np.random.default_rng(seed)
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        s.thread_count = 1
        tb = s.time_base
        t, got = time.perf_counter(), 0
        for i in rng.integers(0, n - 2, windows):
            c.seek(int(i / fps / tb), stream=s, backward=True, any_frame=False)
            want = [i, i + 1]
            for f in c.decode(s):
                j = int(round(float(f.pts * tb) * fps))
                if j in want:
                    f.to_ndarray(format="rgb24")
                    got += 1
                    want.remove(j)
                if not want or j > i + 1: break
        rnd = got / (time.perf_counter() - t)
    return seq, rnd


def write_sources(frames, tmp, codec_name="jpegxl") -> list:
    """The same frames (and a random 14-D state and action, episodes of 50 steps) three ways: a decoded store
    (`dec.zarr`), one image-codec chunk a frame (`img.zarr`) and a LeRobot v3 dataset (`lerobot`: `to_lerobot`, AV1
    as lerobot writes it, read in place by the LeRobot chapter). Returns the three paths."""
    import zarr
    from dptoolkit.codecs import frame_codec
    from dptoolkit.convert import to_lerobot
    from dptoolkit.store import create_array, validate, write_store
    n = len(frames)
    ends = np.arange(50, n + 1, 50)
    state = np.random.default_rng(0).normal(size=(n, 14)).astype(np.float32)
    low = {"state": state, "action": state}
    write_store(tmp / "dec.zarr", {**low, "head_camera": np.ascontiguousarray(frames.transpose(0, 3, 1, 2))}, ends,
                overwrite=True)
    write_store(tmp / "img.zarr", low, ends, overwrite=True)
    g = zarr.open_group(str(tmp / "img.zarr"), mode="a")
    a = create_array(g, "data/head_camera", frames.shape, "uint8", (1, *frames.shape[1:]), frame_codec(codec_name))
    a[...] = frames
    validate(tmp / "img.zarr")
    to_lerobot(tmp / "dec.zarr", tmp / "lerobot", fps=30, progress=False)
    return [tmp / "dec.zarr", tmp / "img.zarr", tmp / "lerobot"]


def loader_rates(frames, tmp, codec_name="jpegxl", batches=30, batch=32):
    "Windows/s from each of `write_sources`' three: 0, 1, 2 DataLoader workers (chunks storage)."
    import torch
    from dptoolkit.dataset import SequenceDataset
    write_sources(frames, tmp, codec_name)
    out = {}
    for store in ("dec.zarr", "img.zarr", "lerobot"):
        ds = SequenceDataset(tmp / store, 8, 2, 1, 5, keys=["head_camera", "state"], storage="chunks")
        for w in (0, 1, 2):
            sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=batches * batch,
                                                     generator=torch.Generator().manual_seed(0))
            dl = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=w,
                                             collate_fn=lambda b: b, persistent_workers=False)
            it = iter(dl)
            next(it)                                        # workers started
            t = time.perf_counter()
            k = sum(1 for _ in it)
            out[(store, w)] = k * batch / (time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--sizes", default="96x96,240x320,480x640")
    ap.add_argument("--pusht", default=str(ROOT.parent / "shared/data/pusht/pusht_cchi_v7_replay.zarr"))
    ap.add_argument("--json")
    ap.add_argument("--loader-only", action="store_true", help="only the loader's windows/s")
    a = ap.parse_args()
    from dptoolkit.codecs import register_codecs
    register_codecs()
    import imagecodecs, av
    print(f"imagecodecs {imagecodecs.__version__}, PyAV {av.__version__}, {a.frames} frames a source, one core "
          f"(OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})")
    rows = []
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    srcs = [("photos", lambda H, W: photo_path(a.frames, H, W))]
    if Path(a.pusht).exists(): srcs.insert(0, ("pusht", lambda H, W: pusht_frames(a.pusht, a.frames, H, W)))
    for sname, make in ([] if a.loader_only else srcs):
        for H, W in sizes:
            if sname == "pusht" and (H, W) != (96, 96): continue     # PushT renders at 96x96
            f = make(H, W)
            raw = f[0].nbytes
            for cname, (kind, c) in codecs().items():
                b, r = image_codec_row(f, kind, c)
                rows.append(dict(source=sname, size=f"{H}x{W}", way=cname, bytes_per_frame=b, ratio_raw=raw / b,
                                 decode_fps=r, random_fps=r))
            for vname, vc in (("AV1 (libsvtav1, crf 30, g 2)", "libsvtav1"), ("H.264 (libx264, crf 30, g 2)", "libx264")):
                data = encode_video(f, vc)
                seq, rnd = video_rates(data, len(f))
                rows.append(dict(source=sname, size=f"{H}x{W}", way=vname, bytes_per_frame=len(data) / len(f),
                                 ratio_raw=raw / (len(data) / len(f)), decode_fps=seq, random_fps=rnd))
            dec = next(r for r in rows if r["source"] == sname and r["size"] == f"{H}x{W}" and r["way"].startswith("decoded"))
            av1 = next(r for r in rows if r["source"] == sname and r["size"] == f"{H}x{W}" and r["way"].startswith("AV1"))
            print(f"\n== {sname} {H}x{W}: raw {raw} bytes a frame ==")
            print(f"{'way':34s} {'bytes/frame':>11s} {'× raw':>7s} {'/ AV1':>6s} {'/ store':>7s} {'decode f/s':>10s} "
                  f"{'window f/s':>10s}")
            for r in rows:
                if r["source"] != sname or r["size"] != f"{H}x{W}": continue
                print(f"{r['way']:34s} {r['bytes_per_frame']:11.0f} {1 / r['ratio_raw']:7.3f} "
                      f"{r['bytes_per_frame'] / av1['bytes_per_frame']:6.2f} "
                      f"{r['bytes_per_frame'] / dec['bytes_per_frame']:7.3f} {r['decode_fps']:10.0f} "
                      f"{r['random_fps']:10.0f}")
    print("\n== the loader: windows/s from chunks storage (8 steps, 2 observed frames a window, batch 32) ==")
    with tempfile.TemporaryDirectory() as d:
        lr = loader_rates(photo_path(400, 240, 320), Path(d))
    for w in (0, 1, 2):
        d = lr[("dec.zarr", w)]
        print(f"workers {w}: decoded store {d:7.0f} windows/s, JPEG-XL frames {lr[('img.zarr', w)]:7.0f} "
              f"({lr[('img.zarr', w)] / d:.2f}x), LeRobot AV1 in place {lr[('lerobot', w)]:7.0f} "
              f"({lr[('lerobot', w)] / d:.2f}x)")
    if a.loader_only: return
    print("\n== projection: 3 cameras, 30 fps, 240x320, camera footage; robot_dp_14 at 1,384 samples/s on one H200 "
          "(2 observed frames x 3 cameras a sample) ==")
    need = 1384 * 2 * 3
    for hours in (10, 100, 1000):
        n = hours * 3600 * 30 * 3
        line = [f"{hours:5d} h:"]
        for r in rows:
            if r["source"] == "photos" and r["size"] == "240x320":
                line.append(f"{r['way'].split(' (')[0].split(' q')[0]} {n * r['bytes_per_frame'] / 1e12:.2f} TB")
        print("  ".join(line))
    print(f"CPU cores a GPU needs to decode its {need:,} frames/s (random windows):")
    for r in rows:
        if r["source"] == "photos" and r["size"] == "240x320":
            print(f"  {r['way']:34s} {need / r['random_fps']:6.1f} cores")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(rows=rows, loader={f"{k[0]}:{k[1]}": v for k, v in lr.items()}),
                                           indent=1))


if __name__ == "__main__":
    main()
