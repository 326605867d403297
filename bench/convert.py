"""Converting the data users have (issue 37): RoboTwin's raw episodes → a store, against their own `process_data.py`
on the same episodes (time, throughput, peak memory of the whole process tree, at E and 3E episodes), and a LeRobot
v3.0 dataset → a store (frames/s; PyAV against torchcodec where a lerobot virtualenv is given).

    python bench/convert.py --robotwin ROBOTWIN --python SIDE_PYTHON [--episodes 10] [--steps 200] \\
        [--workers 2] [--repeats 3] [--lerobot-python LEROBOT_PYTHON] [--work DIR] [--json F]

ROBOTWIN / SIDE_PYTHON as in bench/robotwin.py (their `policy/DP` and writer are copied, unchanged, into the work
folder). Raw episodes: four 240×320 cameras (D435), written by their `create_hdf5_from_dict` (bench/robotwin_raw.py).
Peak memory: the largest sum of resident memory over the process and its children, sampled every 20 ms.
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path

import psutil

TASK, CONFIG = "beat_block_hammer", "demo_clean"


def measured(cmd, cwd=None, env=None) -> dict:
    "Run `cmd`; wall seconds and peak resident memory (MB) of its process tree."
    t0 = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    proc, peak = psutil.Process(p.pid), 0
    while p.poll() is None:
        try:
            rss = sum(q.memory_info().rss for q in [proc, *proc.children(recursive=True)])
            peak = max(peak, rss)
        except psutil.Error: pass
        time.sleep(0.02)
    out = p.stdout.read()
    if p.returncode: sys.exit(f"failed: {' '.join(map(str, cmd))}\n{out[-3000:]}")
    return dict(seconds=time.perf_counter() - t0, peak_mb=peak / 1e6, out=out)


def raw_bytes(folder: Path, n: int) -> int:
    return sum((folder / f"episode{i}.hdf5").stat().st_size for i in range(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robotwin", required=True), ap.add_argument("--python", required=True)
    ap.add_argument("--episodes", type=int, default=10), ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2), ap.add_argument("--lerobot-python")
    ap.add_argument("--work", default="bench/out/convert"), ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=3, help="their script and ours, alternating, this many times")
    a = ap.parse_args()
    work = Path(a.work).absolute()
    shutil.rmtree(work, ignore_errors=True)
    rt = work / "RoboTwin"
    for part in ("policy/DP", "envs/utils/pkl2hdf5.py", "envs/utils/images_to_video.py"):
        src, dst = Path(a.robotwin) / part, rt / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    E, res = a.episodes, {}
    t = measured([a.python, Path(__file__).with_name("robotwin_raw.py"), rt, TASK, CONFIG, 3 * E, a.steps])
    print(f"raw episodes: {3 * E} × {a.steps} steps × 4 cameras written by their writer in {t['seconds']:.0f} s",
          flush=True)
    raw = rt / "data" / TASK / CONFIG / "data"
    for n in (E, 3 * E):                  # the first n episodes, as process_data.py's expert_data_num takes them
        sub = work / f"raw{n}" / TASK / CONFIG / "data"
        sub.mkdir(parents=True)
        for i in range(n): os.symlink(raw / f"episode{i}.hdf5", sub / f"episode{i}.hdf5")
        mb = raw_bytes(raw, n) / 1e6
        pairs = []                        # alternating, `--repeats` times: the machine's drift hits both alike
        for r in range(a.repeats):
            for z in (rt / f"policy/DP/data/{TASK}-{CONFIG}-{n}.zarr", work / f"ours{n}.zarr"):
                shutil.rmtree(z, ignore_errors=True)
            pairs.append((measured([a.python, "process_data.py", TASK, CONFIG, n], cwd=rt / "policy/DP"),
                          measured(["dpt", "convert", work / f"raw{n}", "-o", work / f"ours{n}.zarr", "--cameras",
                                    "head_camera", "--workers", a.workers, "--no-progress"])))
        ratios = sorted(t["seconds"] / o["seconds"] for t, o in pairs)
        theirs, ours_head = (min((p[i] for p in pairs), key=lambda m: m["seconds"]) for i in (0, 1))
        ours_all = measured(["dpt", "convert", work / f"raw{n}", "-o", work / f"all{n}.zarr", "--workers", a.workers,
                             "--no-progress"])
        ours_one = measured(["dpt", "convert", work / f"raw{n}", "-o", work / f"one{n}.zarr", "--cameras",
                             "head_camera", "--workers", 1, "--no-progress"])
        res[n] = dict(raw_mb=mb, theirs=theirs, ours_head=ours_head, ours_all=ours_all, ours_one_worker=ours_one,
                      ratios=ratios, theirs_s=[t["seconds"] for t, _ in pairs], ours_s=[o["seconds"] for _, o in pairs])
        for k in ("theirs", "ours_head", "ours_all", "ours_one_worker"): res[n][k].pop("out")
        for z in (work / f"all{n}.zarr", work / f"one{n}.zarr"): shutil.rmtree(z)   # disk: 4 cameras of 3E episodes
        print(f"{n} episodes ({mb:.0f} MB of raw HDF5): their process_data.py {theirs['seconds']:.1f} s, peak "
              f"{theirs['peak_mb']:.0f} MB | dpt convert head camera, {a.workers} workers: {ours_head['seconds']:.1f} s, "
              f"peak {ours_head['peak_mb']:.0f} MB (fastest of {a.repeats} each; {ratios[len(ratios) // 2]:.2f}× faster, "
              f"median of the alternating pairs, range {ratios[0]:.2f}–{ratios[-1]:.2f}), 1 worker "
              f"{ours_one['seconds']:.1f} s | all 4 cameras: {ours_all['seconds']:.1f} s, peak "
              f"{ours_all['peak_mb']:.0f} MB", flush=True)
    import numpy as np, zarr
    mine, ref = (zarr.open_group(str(p), mode="r") for p in (work / f"ours{E}.zarr",
                                                           rt / f"policy/DP/data/{TASK}-{CONFIG}-{E}.zarr"))
    res["equal_to_theirs"] = {k: bool(np.array_equal(mine[f"data/{k}"][:], ref[f"data/{k}"][:]))
                              for k in ("state", "action", "head_camera")}
    print("arrays equal to their process_data.py:", res["equal_to_theirs"], flush=True)
    # LeRobot: our store out as a LeRobot dataset, then read back
    lr = work / "lerobot"
    measured(["dpt", "convert", work / f"ours{E}.zarr", "-o", lr, "--to", "lerobot", "--no-progress"])
    back = measured(["dpt", "convert", lr, "-o", work / "from_lerobot.zarr", "--workers", a.workers, "--no-progress"])
    frames = int(zarr.open_group(str(work / "from_lerobot.zarr"), mode="r")["meta/episode_ends"][-1])
    res["lerobot_to_store"] = dict(frames=frames, seconds=back["seconds"], frames_per_s=frames / back["seconds"],
                                   workers=a.workers)
    print(f"LeRobot → store (PyAV, {a.workers} workers): {frames} frames of 240×320 in {back['seconds']:.1f} s = "
          f"{frames / back['seconds']:.0f} frames/s", flush=True)
    if a.lerobot_python:
        mp4 = next(lr.glob("videos/*/chunk-000/file-000.mp4"))
        code = ("import sys, time, av\nfrom torchcodec.decoders import VideoDecoder\n"
                "t = time.perf_counter(); c = av.open(sys.argv[1]); n = sum(1 for f in c.decode(video=0) "
                "if f.to_ndarray(format='rgb24') is not None); pa = time.perf_counter() - t\n"
                "t = time.perf_counter(); d = VideoDecoder(sys.argv[1]); b = d.get_frames_in_range(0, len(d)).data; "
                "tc = time.perf_counter() - t\nprint(n, pa, len(b), tc)")
        r = subprocess.run([a.lerobot_python, "-c", code, str(mp4)], capture_output=True, text=True, check=True)
        n, pa, m, tc = r.stdout.split()
        res["decode"] = dict(frames=int(n), pyav_frames_per_s=int(n) / float(pa), torchcodec_frames_per_s=int(m) / float(tc))
        print(f"one AV1 file, {n} frames of 240×320, one thread of Python: PyAV {int(n) / float(pa):.0f} frames/s, "
              f"torchcodec {int(m) / float(tc):.0f} frames/s", flush=True)
    if a.json: a.json.write_text(json.dumps({str(k): v for k, v in res.items()}, indent=1))


if __name__ == "__main__":
    main()
