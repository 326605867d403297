"""Shared fixtures: sample stores, a `dpt` runner, and process-tree helpers (psutil)."""
import atexit, json, os, selectors, shutil, socket, subprocess, sys, sysconfig, tempfile, threading, time
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


@pytest.fixture(autouse=True)
def _never_real_time():
    """SVT-AV1 run as root (CI) moves the thread that encodes to SCHED_FIFO 99, and every process it starts after
    inherits it: rank processes spinning at real-time priority starved the threads they waited for and CI hung
    (processes chapter). A test that leaves this process real-time fails here, and the policy is put back."""
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    yield
    after = os.sched_getscheduler(0), os.sched_getparam(0)
    if after != before:
        os.sched_setscheduler(0, *before)
        pytest.fail(f"this test left the pytest process's scheduling at {after} (was {before}): encode inside "
                    "processes.keep_scheduling()")


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    sample_data(d, tasks=3, episodes=6, seed=11)
    return d


@pytest.fixture(scope="session")
def merged(tasks_dir, tmp_path_factory):
    return Path(merge(sorted(tasks_dir.glob("*.zarr")), tmp_path_factory.mktemp("m") / "merged.zarr", progress=False).path)


def sigint_default(cmd: list) -> list:
    """`cmd` (a Python command line: the interpreter first) with SIGINT at its default, as a terminal's Ctrl-C meets it
    (a shell's background job, as CI runs the tests, inherits it ignored): set by a fresh interpreter that then execs
    `cmd`, never by a `preexec_fn` (Python code in a fork of this multi-threaded test process, which can deadlock
    before its exec: a test that hung CI for 90 minutes)."""
    shim = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", shim, *[str(c) for c in cmd]]


def dpt(*args, timeout=300, check=None, env=None, cwd=None):
    """Run the installed `dpt` console script; returns CompletedProcess (text). Forked from this worker's preloader
    (tests/_dpt_preload.py: the command line as it is, without an interpreter's start-up each time) unless the call
    changes what an interpreter reads only as it starts (_READ_AT_START), or DPT_TEST_FORK=0: then a real
    subprocess, found on PATH as a user's shell finds it."""
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    args = [str(a) for a in args]
    r = _forked(args, timeout, e, cwd)
    if r is None:
        r = subprocess.run(["dpt", *args], capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


# what an interpreter, its allocator and its thread pools read only as they start or as the preloader imported them:
# a call that changes one of these runs as a real subprocess (every other variable a fork takes as the call has it:
# pytest's PYTEST_CURRENT_TEST, a module's setdefault at import, the test's own DPT_*)
# (not LD_LIBRARY_PATH: opencv's import appends its own folder to it in the test process, which no user's shell does)
_READ_AT_START = ("PYTHON", "LD_PRELOAD", "OMP_", "MKL_", "GOMP_", "KMP_", "OPENBLAS_", "TORCH_", "LANG", "LC_",
                  "TMPDIR", "TEMP", "TMP", "MALLOC_")
_preloader = {}   # this worker's: its Popen, its socket, the environment it started with
_preloader_lock = threading.Lock()
DPT_SCRIPT = Path(sysconfig.get_path("scripts")) / "dpt"


def _preloaded():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if os.environ.get("DPT_TEST_FORK") == "0" or not DPT_SCRIPT.exists() or not hasattr(socket, "send_fds"): return None
    p = _preloader.get("proc")
    if p is None or p.poll() is not None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_dpt_preload.py")), str(DPT_SCRIPT),
                              str(b.fileno())], pass_fds=[b.fileno()], stdin=subprocess.DEVNULL, env=env)
        b.close()
        a.settimeout(300)
        try: ready = a.recv(64) == b'{"ready": true}'
        except OSError: ready = False
        if not ready: p.kill(); p.wait(); return None
        a.settimeout(None)
        _preloader.update(proc=p, sock=a, env=env)
    return _preloader


def _forked(args, timeout, env, cwd):
    """`dpt *args` forked from the preloader, as `subprocess.run(capture_output=True, text=True)` would return it
    (output read to the end of the pipes, newlines translated, TimeoutExpired after killing the child); None where
    it must be a real subprocess."""
    if not _preloader_lock.acquire(blocking=False): return None       # another thread's call holds the preloader
    z, rc = None, None
    try:
        ready = _preloaded()
        if ready is None: return None
        if any(env.get(k) != ready["env"].get(k) for k in set(env) | set(ready["env"]) if k.startswith(_READ_AT_START)):
            return None
        z = ready                                                          # from here on, a call in flight
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        req = json.dumps(dict(argv=args, env=env, cwd=str(cwd or os.getcwd()))).encode()
        socket.send_fds(z["sock"], [req], [out_w, err_w])
        os.close(out_w); os.close(err_w)
        reply = z["sock"].recv(256)
        if not reply: raise RuntimeError("the dpt preloader (tests/_dpt_preload.py) ended; DPT_TEST_FORK=0 runs dpt as it is")
        pid = json.loads(reply)["pid"]
        bufs, deadline = {out_r: [], err_r: []}, time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        for fd in (out_r, err_r): sel.register(fd, selectors.EVENT_READ)
        sel.register(z["sock"], selectors.EVENT_READ)
        killed = False
        while len(sel.get_map()) > 0:
            left = deadline - time.monotonic()
            if left <= 0 and not killed:                                  # as subprocess.run: kill, then read to the end
                try: os.kill(pid, 9)
                except ProcessLookupError: pass
                killed, deadline = True, time.monotonic() + 120
                continue
            for key, _ in sel.select(max(0.0, left)):
                if key.fileobj is z["sock"]:
                    rc = json.loads(z["sock"].recv(256))["rc"]; sel.unregister(z["sock"])
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk: bufs[key.fd].append(chunk)
                else: sel.unregister(key.fd); os.close(key.fd)
            if killed and time.monotonic() > deadline: break
        for key in list(sel.get_map().values()):
            if key.fileobj is not z["sock"]: os.close(key.fd)
        text = lambda fd: b"".join(bufs[fd]).decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        out, err = text(out_r), text(err_r)
        if killed: raise subprocess.TimeoutExpired(["dpt", *args], timeout, out, err)
        return subprocess.CompletedProcess(["dpt", *args], rc, out, err)
    finally:
        if z is not None and rc is None and _preloader.get("proc") is not None:   # a call cut short (a timeout that
            _preloader["proc"].kill(); _preloader["proc"].wait()                # never ended, an interrupt): its
            _preloader.clear()                                                  # reply would answer the next call
        _preloader_lock.release()


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
