"""torchcodec against PyAV on the reads training makes (issue 88): random 2-frame windows from the same AV1 / H.264 mp4
(lerobot's settings: yuv420p, crf 30, a keyframe every 2 frames) of the camera path over scikit-image's photographs
(bench/frames.py's source), one thread each, frames/s; and whether torchcodec's frames equal lerobot's own decoded
frames of the committed fixture (tests/data/lerobot/read_by_lerobot.npz, written by lerobot 0.4.4's pyav backend).
torchcodec needs FFmpeg's shared libraries (Debian: `apt-get install ffmpeg`); it is not a dependency of ours, so run
this in a side environment: python -m venv --system-site-packages V && V/bin/pip install --no-deps torchcodec==0.17 &&
V/bin/python bench/torchcodec_windows.py [--frames 150] [--windows 100]

`--reader`: the toolkit's own LeRobot reader (`SequenceDataset(storage="chunks")` over a dataset `to_lerobot` wrote,
read in place) with each decoder (`DPT_VIDEO_BACKEND`), random 8-step windows of 2 observed frames at 240x320, for
lerobot's AV1 and for HEVC 4:4:4 crf 22; the two decoders alternate, `--repeats` times, medians; and whether every
window is the same under both. Needs torchcodec loading here (`dptoolkit[convert]` and `apt-get install ffmpeg`).
"""
import argparse, glob, io, json, sys, tempfile, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from frames import encode_video, photo_path, video_rates   # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def torchcodec_rates(path, n, fps=30, windows=100, seed=0):
    "(sequential frames/s, random 2-frame windows' frames/s) with torchcodec's VideoDecoder on one thread."
    from torchcodec.decoders import VideoDecoder
    d = VideoDecoder(path, dimension_order="NHWC", num_ffmpeg_threads=1, seek_mode="exact")
    t = time.perf_counter()
    k = d.get_frames_in_range(0, n).data.shape[0]
    seq = k / (time.perf_counter() - t)
    rng = np.random.default_rng(seed)
    t, got = time.perf_counter(), 0
    for i in rng.integers(0, n - 2, windows):
        got += d.get_frames_played_at([i / fps, (i + 1) / fps]).data.shape[0]
    return seq, got / (time.perf_counter() - t)


def fixture_check():
    from torchcodec.decoders import VideoDecoder
    lr = ROOT / "tests/data/lerobot/written_by_lerobot"
    ref = np.load(ROOT / "tests/data/lerobot/read_by_lerobot.npz")["observation.images.top"]
    f = sorted(glob.glob(f"{lr}/videos/*/*/*.mp4"))[0]
    got = VideoDecoder(f, dimension_order="NCHW", seek_mode="exact").get_frames_played_at(
        [i / 50 for i in range(len(ref))]).data.numpy()
    return np.array_equal(got, ref), int(np.abs(got.astype(int) - ref).max())


def reader_rates(a):
    "Windows/s of the toolkit's reader with each decoder, on the same datasets, in one run."
    import os, subprocess
    from dptoolkit.convert import to_lerobot
    from dptoolkit.store import write_store
    frames = photo_path(a.frames, 240, 320)
    tmp = Path(tempfile.mkdtemp())
    ends = np.arange(50, len(frames) + 1, 50)
    state = np.random.default_rng(0).normal(size=(len(frames), 14)).astype(np.float32)
    write_store(tmp / "dec.zarr", {"state": state, "action": state,
                                   "head_camera": np.ascontiguousarray(frames.transpose(0, 3, 1, 2))}, ends)
    sets = {"AV1 yuv420p crf 30 (lerobot's)": {}, "HEVC yuv444p crf 22": dict(codec="hevc", chroma="444", crf=22)}
    code = ("import sys, time, json, numpy as np\nfrom dptoolkit.dataset import SequenceDataset\n"
            "ds = SequenceDataset(sys.argv[1], 8, 2, 1, 5, keys=['head_camera', 'state'], storage='chunks')\n"
            "idx = np.random.default_rng(0).integers(0, len(ds), int(sys.argv[2]))\n"
            "ds.__getitems__(idx[:4].tolist()); t = time.perf_counter()\n"
            "b = ds.__getitems__(idx.tolist())\n"
            "print(json.dumps([len(idx) / (time.perf_counter() - t), int(b['obs']['head_camera'].sum())]))")
    print("| frames | PyAV windows/s | torchcodec windows/s | ratio | same windows |")
    print("|---|---:|---:|---:|---|")
    for label, kw in sets.items():
        lr = tmp / label.split()[0]
        to_lerobot(tmp / "dec.zarr", lr, fps=30, progress=False, **kw)
        got = {"pyav": [], "torchcodec": []}
        for _ in range(a.repeats):
            for b in got:
                r = subprocess.run([sys.executable, "-c", code, str(lr), str(a.windows)], capture_output=True,
                                   text=True, check=True, env={**os.environ, "DPT_VIDEO_BACKEND": b,
                                                               "OMP_NUM_THREADS": "1"})
                got[b].append(json.loads(r.stdout.strip().splitlines()[-1]))
        med = {b: float(np.median([x[0] for x in v])) for b, v in got.items()}
        same = len({x[1] for v in got.values() for x in v}) == 1
        print(f"| {label} | {med['pyav']:,.0f} | {med['torchcodec']:,.0f} | {med['torchcodec'] / med['pyav']:.2f} "
              f"| {same} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=150); ap.add_argument("--windows", type=int, default=100)
    ap.add_argument("--reader", action="store_true"); ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.reader: return reader_rates(a)
    import os
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import av, torch, torchcodec
    torch.set_num_threads(1)
    eq, diff = fixture_check()
    print(f"torchcodec {torchcodec.__version__}, PyAV {av.__version__}, torch {torch.__version__}; "
          f"lerobot's fixture frames equal: {eq} (max |diff| {diff})")
    print("| size | codec | PyAV seq f/s | PyAV window f/s | torchcodec seq f/s | torchcodec window f/s | window ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for H, W in ((96, 96), (240, 320), (480, 640)):
        frames = photo_path(a.frames, H, W)
        for codec in ("libsvtav1", "libx264"):
            data = encode_video(frames, codec)
            f = Path(tempfile.mkdtemp()) / "v.mp4"
            f.write_bytes(data)
            ps, pw = video_rates(data, a.frames, windows=a.windows)
            ts, tw = torchcodec_rates(str(f), a.frames, windows=a.windows)
            print(f"| {H}×{W} | {'AV1' if 'av1' in codec else 'H.264'} | {ps:,.0f} | {pw:,.0f} | {ts:,.0f} | {tw:,.0f} "
                  f"| {tw / pw:.2f} |", flush=True)


if __name__ == "__main__":
    main()
