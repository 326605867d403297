"""Background runs from a real Jupyter kernel (issue 17): `train(..., wait=False)` returns at once, the kernel stays
usable, interrupting the kernel does not touch the run, `.stop()` checkpoints and `resume` continues, and a kernel that
exits takes its background run with it (no orphans)."""
import json, shutil, time

import psutil
import pytest

from conftest import alive, shell_reply


def _lines(run):
    f = run / "logs.jsonl"
    return len(f.read_text().splitlines()) if f.exists() else 0


def _wait(cond, timeout, what):
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.2)


def _procs_with(text):
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if text in " ".join(p.info["cmdline"] or []): out.append(p)
        except psutil.Error: pass
    return out


def test_background_run_in_a_kernel(merged, tmp_path):
    from jupyter_client.manager import start_new_kernel
    run, run2 = tmp_path / "bg", tmp_path / "bg2"
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        def ex(code, timeout=120, **expr):
            reply = shell_reply(kc, kc.execute(code, user_expressions=expr), timeout)
            assert reply["status"] == "ok", reply
            return {k: v["data"]["text/plain"] for k, v in reply["user_expressions"].items()}
        ex(f"""import time
from dptoolkit.config import for_store
from dptoolkit.train import train
cfg = for_store({str(merged)!r}, name="test", overrides=["training.max_steps=5000", "training.log_every=5", "training.checkpoint_every=0"])
t0 = time.time(); h = train(cfg, nprocs=2, run_dir={str(run)!r}, wait=False); dt = time.time() - t0""")
        assert float(ex("", dt="dt")["dt"]) < 10                               # returned at once
        assert ex("x = 6 * 7", x="x")["x"] == "42"                             # the kernel is free
        _wait(lambda: _lines(run) >= 2, 120, "the run's first log lines")
        # interrupting the kernel (a cell busy in time.sleep) does not reach the run
        mid = kc.execute("time.sleep(60)"); time.sleep(1.0); km.interrupt_kernel()
        reply = shell_reply(kc, mid, 30)
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
        n = _lines(run)
        _wait(lambda: _lines(run) > n + 1, 60, "the run to go on after the interrupt")
        assert ex("", done="h.done")["done"] == "False"
        # stop: a checkpoint at the stop step, exit 0; resume continues from it
        got = ex("r = h.stop(); m = r.metrics", m="m")["m"]
        m = eval(got, {"null": None, "false": False, "true": True})
        assert m["stopped_by"] == "SIGTERM" and not m["completed"] and 0 < m["steps"] < 5000, m
        assert (run / "checkpoints" / "latest").read_text() == f"step_{m['steps']:06d}"
        target = m["steps"] + 10
        r2 = ex(f"r2 = train(cfg, nprocs=2, run_dir={str(run)!r}, resume=True, progress=False, overrides=['training.max_steps={target}'])",
                steps="r2.metrics['steps']")
        assert int(r2["steps"]) == target
        # a failing background run (a chunk file of the store is missing: the ranks find out): result() raises one line
        bad_store = tmp_path / "bad.zarr"; shutil.copytree(merged, bad_store); (bad_store / "data" / "action" / "3.0").unlink()
        err = ex(f"""bad = train(for_store({str(bad_store)!r}, name="test"), nprocs=1, run_dir={str(tmp_path / 'bad')!r}, wait=False)
try: bad.result(120); msg = None
except Exception as e: msg = f"{{type(e).__name__}}: {{e}}"
""", msg="msg")["msg"]
        assert "LaunchError: background run" in err and "data/action chunk 3" in err and "is missing" in err, err
        # the kernel exits: its background run stops too (with a checkpoint), no process is left
        pid = int(ex(f"h2 = train(cfg, nprocs=2, run_dir={str(run2)!r}, wait=False)", pid="h2.proc.pid")["pid"])
        _wait(lambda: _lines(run2) >= 1, 120, "the second run's first log line")
    finally:
        kc.stop_channels(); km.shutdown_kernel(now=True)
    def gone():   # a process that is exiting reads an empty cmdline before it is a zombie: wait for the pid itself too
        try: ended = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess: ended = True
        return ended and not _procs_with(str(run2))
    _wait(gone, 60, "the background run to end after its kernel")
    assert (run2 / "checkpoints" / "latest").exists()                         # it stopped the graceful way
