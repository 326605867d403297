"""Shared fixtures: sample stores, a `dpt` runner, and process-tree helpers (psutil)."""
import atexit, os, shutil, subprocess, sys, sysconfig, tempfile
from pathlib import Path

import psutil
import pytest

from dptoolkit.store import sample_data
from dptoolkit.merge import merge

ROOT = Path(__file__).resolve().parent.parent
# `dpt` in the tests' subprocesses is this interpreter's, whatever else a shell's PATH would find first (issue 64: the
# set-up's own check, tests/test_setup.py and .ci/run, is what proves the name resolves in a user's shell)
for _d in (sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")):
    if (Path(_d) / "dpt").exists():
        os.environ["PATH"] = _d + os.pathsep + os.environ.get("PATH", "")
        break
# the decoded cache of every store a test opens with storage mmap: a folder of this test session, not ~/.cache;
# the process that made it (pytest, or xdist's controller whose workers inherit it) removes it at exit
if "DPT_CACHE_DIR" not in os.environ:
    os.environ["DPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="dpt-test-cache-")
    atexit.register(shutil.rmtree, os.environ["DPT_CACHE_DIR"], ignore_errors=True)
# test files run two at a time: runs compared bit for bit keep their thread count whatever the other file trains
# (the bad-input row L4 turns the sharing of cores on for its two runs)
os.environ.setdefault("DPT_SHARE_CORES", "0")


def pytest_configure(config):
    config.addinivalue_line("markers", "solo: runs alone, after the parallel test files (timing-sensitive)")


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    sample_data(d, tasks=3, episodes=6, seed=11)
    return d


@pytest.fixture(scope="session")
def merged(tasks_dir, tmp_path_factory):
    return Path(merge(sorted(tasks_dir.glob("*.zarr")), tmp_path_factory.mktemp("m") / "merged.zarr", progress=False).path)


def dpt(*args, timeout=300, check=None, env=None, cwd=None):
    "Run the installed `dpt` console script; returns CompletedProcess (text)."
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    r = subprocess.run(["dpt", *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def descendants(pid=None):
    try: return psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess: return []


def alive(procs):
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE: out.append(p)
        except psutil.NoSuchProcess: pass
    return out


def rank_processes(pid=None):
    """Launched ranks below `pid`: the children of the forkserver process (which shares their command line): a new
    interpreter's (`multiprocessing.forkserver` in its command line) or a fork of the launching command (`dpt train`'s:
    the command line of its own parent)."""
    out = []
    for p in descendants(pid):
        try:
            server = p.parent()
            parent_cmd, above = server.cmdline(), server.parent().cmdline()
        except (psutil.Error, AttributeError): continue
        if "forkserver" in " ".join(parent_cmd) or (parent_cmd == above and p.cmdline() == parent_cmd): out.append(p)
    return out


def shell_reply(kc, msg_id, timeout=120):
    "The kernel's reply to request `msg_id`, skipping other shell replies (a late kernel_info reply arrives under load)."
    import time as _t
    end = _t.time() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(0.1, end - _t.time()))
        if msg["parent_header"].get("msg_id") == msg_id: return msg["content"]
