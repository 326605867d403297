"""Launch latency: seconds from the launch call to rank 0's first completed all-reduce, 2 CPU processes (gloo).

dptoolkit's `launch` (forkserver that pre-imports torch; the first call starts the server) against accelerate's
`notebook_launcher` (fork + torchelastic), measured in the same script, several launches each. The rank body writes the
time of its first finished all-reduce to a file, so both are timed the same way (notebook_launcher returns nothing).
accelerate is only needed for this benchmark: `pip install accelerate`.
Usage: python bench/launch.py [--launches 4]
"""
import argparse, os, statistics, tempfile, time
from pathlib import Path


def first_allreduce(stamp_file):
    import torch, torch.distributed as dist
    if not dist.is_initialized():   # accelerate's notebook_launcher sets the env but leaves the group to the function
        dist.init_process_group("gloo")
    t = torch.ones(1); dist.all_reduce(t)
    if dist.get_rank() == 0: Path(stamp_file).write_text(repr(time.time()))
    return t.item()


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--launches", type=int, default=4); a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    import torch  # both paths start from a process that already imported torch, as a notebook kernel would
    from dptoolkit.launch import launch
    results = {}
    stamp = tmp / "stamp"
    ours = []
    for i in range(a.launches):
        t0 = time.time(); launch(first_allreduce, str(stamp), nprocs=2, progress_bar=False)
        ours.append(float(stamp.read_text()) - t0)
    results["dptoolkit launch (forkserver + preload)"] = ours
    try:
        from accelerate import notebook_launcher
        acc = []
        for i in range(a.launches):
            os.environ.pop("MASTER_PORT", None)
            t0 = time.time(); notebook_launcher(first_allreduce, (str(stamp),), num_processes=2, use_port=str(29500 + i))
            acc.append(float(stamp.read_text()) - t0)
        results["accelerate notebook_launcher (fork)"] = acc
    except ImportError:
        print("accelerate not installed: pip install accelerate to compare")
    print(f"\n{'launcher':42s} {'first':>7s} {'later (median)':>15s}   all (s)")
    for k, v in results.items():
        print(f"{k:42s} {v[0]:7.2f} {statistics.median(v[1:]) if len(v) > 1 else float('nan'):15.2f}   {', '.join(f'{x:.2f}' for x in v)}")


if __name__ == "__main__":
    main()
