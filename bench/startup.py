"""What a process costs before and after its work (issue 81: CI minutes, and every user's launch): the CPU of a 2-step
training run launched in process (1 and 2 ranks) with the forkserver preloading diffusers' schedule modules and
without (as before: each rank imported them, torch._dynamo with them), and the end of a `dpt` command with
`gc.freeze()` (cli.console) and without (cli.main, the interpreter's last collections over torch's objects).
CPU is the machine's busy time (/proc/stat) over the measured span, so processes reaped by others count too; each
figure is the median of --repeats, both arms interleaved. Run on a quiet machine.

    python bench/startup.py [--repeats 5]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

RUN = r'''
import json, shutil, sys, time
import dptoolkit.launch as L
if sys.argv[1] == "lazy": L.DIFFUSERS_PRELOAD[:] = []            # as before: ranks import diffusers themselves
from dptoolkit.train import train
from dptoolkit.config import for_store
def busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / 100
if __name__ == "__main__":
    store, out, nprocs = sys.argv[2], sys.argv[3], int(sys.argv[4])
    cfg = for_store(store, name="test", overrides=["training.max_steps=2"])
    train(cfg, nprocs=nprocs, run_dir=out + "/warm", progress=False)      # the forkserver started: not measured
    t, b = time.time(), busy()
    train(cfg, nprocs=nprocs, run_dir=out + "/run", progress=False)
    print(json.dumps(dict(wall=time.time() - t, cpu=busy() - b)))
'''


def busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / 100


def run_once(arm, store, nprocs, script):
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([sys.executable, script, arm, store, out, str(nprocs)], capture_output=True, text=True)
        if r.returncode: raise SystemExit(r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])


def command_end(entry, store):
    "CPU and wall of `dpt inspect STORE` after importing the training loop, ended through `entry` (console or main)."
    code = ("import sys, dptoolkit.train, diffusers.schedulers.scheduling_ddpm, diffusers.optimization\n"
            f"from dptoolkit.cli import {entry}\nsys.exit({entry}(['inspect', sys.argv[1]]))")
    t, b = time.time(), busy()
    subprocess.run([sys.executable, "-c", code, store], capture_output=True, check=True)
    return dict(wall=time.time() - t, cpu=busy() - b)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from dptoolkit.store import sample_data
    tmp = Path(tempfile.mkdtemp())
    store = str(sample_data(tmp, tasks=1, episodes=6, seed=3)[0])
    script = tmp / "run.py"
    script.write_text(RUN)
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    print("| measured | before | after | after / before |\n|---|---|---|---|")
    for nprocs in (1, 2):
        got = {"lazy": [], "preload": []}
        for _ in range(a.repeats):
            for arm in got: got[arm].append(run_once(arm, store, nprocs, str(script)))
        for k in ("cpu", "wall"):
            x, y = med(got["lazy"], k), med(got["preload"], k)
            print(f"| 2-step run, {nprocs} rank(s), {k} (s) | {x:.2f} | {y:.2f} | {y / x:.2f} |")
    got = {"main": [], "console": []}
    for _ in range(a.repeats):
        for entry in got: got[entry].append(command_end(entry, store))
    for k in ("cpu", "wall"):
        x, y = med(got["main"], k), med(got["console"], k)
        print(f"| `dpt inspect` with the training loop imported, {k} (s) | {x:.2f} | {y:.2f} | {y / x:.2f} |")
