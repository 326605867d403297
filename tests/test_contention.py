"""Speed-ups that survive a busy machine (issue 24): the demo's timing sweep on a quiet machine shows no flag; with two
busy-loop processes started by the test, each row is either within ±15 % of the quiet speed-up or flagged as contended,
and an efficiency above 1.1 is never shown unflagged. Runs alone (`-m solo`, after the parallel test files), since a
second test file on the other core would make the 'quiet' run a busy one."""
import subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest

from dptoolkit.demo import DEMO_MODEL
from dptoolkit.config import for_store
from dptoolkit.metrics import _cpu_stall_s
from dptoolkit.report import read_log, summarize
from dptoolkit.sweep import sweep

pytestmark = pytest.mark.solo


def _demo_sweep(store, out):
    "The demo's speed-up step: 1 and 2 processes, 60 steps each, two interleaved repeats, pooled."
    cfg = for_store(store, name="test", overrides=["dataloader.batch_size=16", "scaling.keep_effective_batch_size=false",
                                                   "task.dataset.val_ratio=0.15", *DEMO_MODEL])
    return sweep(cfg, world_sizes=(1, 2), steps=60, repeats=2, out_dir=out, progress=False)


def _cores_share(seconds: float = 4.0) -> float:
    """The smaller CPU share two busy single-thread processes get here side by side (1.0: both cores are ours): a
    probe of the machine that does not go through the code under test."""
    code = ("import time\nt0, c0 = time.time(), time.process_time()\nwhile time.time() - t0 < %s: pass\n"
            "print((time.process_time() - c0) / (time.time() - t0))" % seconds)
    ps = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return min(float(p.communicate()[0]) for p in ps)


def _cpu_times() -> list:
    "/proc/stat's cpu line: user, nice, system, idle, iowait, irq, softirq, steal (jiffies); [] where it is absent."
    try: return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError): return []


def test_quiet_and_busy_machine(merged, tmp_path):
    t0 = _cpu_times()
    quiet = _demo_sweep(merged, tmp_path / "quiet")
    t1 = _cpu_times()
    stolen = (t1[7] - t0[7]) / max(1, sum(t1) - sum(t0)) if t0 and t1 else 0.0   # the host's share of our cores
    assert list(quiet.world_size) == [1, 2] and list(quiet.repeats) == [2, 2]
    # quiet: nothing contended, nothing implausible; "not resolved" only where the range truly straddles 1 (60 steps on a
    # 2-core CI machine sometimes cannot resolve 2 ranks' gain: a CI run here got cpu_share 0.85 and a range over 1)
    shown = quiet[["world_size", "cpu_share", "speedup_low", "speedup_high", "flag"]].to_string()
    calm = not quiet.contended.any()
    if not calm:   # a slow day's host takes a share of the cores (a CI run here: a rank got 73 %): a flag that is true
        share = 1.0 if stolen > 0.03 else _cores_share()              # is no failure; one on two free cores is
        assert stolen > 0.03 or share < 0.9, (f"flagged contended, but the host took {stolen:.1%} of the cores and two "
                                               f"probes got {share:.0%} of a core each:\n{shown}")
        print(f"the machine was not quiet (steal {stolen:.1%}, probes {share:.0%}): the quiet half is not judged")
    if calm:
        assert not quiet.flag.str.contains("contended|implausible").any(), shown
        straddles = (quiet.world_size > 1) & (quiet.speedup_low <= 1) & (quiet.speedup_high >= 1)
        assert (quiet.flag.str.contains("not resolved") == straddles).all(), shown
    assert quiet.speedup_low.iloc[1] <= quiet.speedup.iloc[1] <= quiet.speedup_high.iloc[1]
    # the same sweep while two busy loops (bounded: 150 s) compete for the 2 cores
    hogs = [subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 150\nwhile time.time() < t: pass"])
            for _ in range(2)]
    try:
        time.sleep(1)
        busy = _demo_sweep(merged, tmp_path / "busy")
    finally:
        for h in hogs: h.kill(); h.wait()
    q, b = quiet.set_index("world_size"), busy.set_index("world_size")
    ok = abs(b.speedup[2] / q.speedup[2] - 1) <= 0.15
    assert ok or b.flag[2], f"busy speed-up {b.speedup[2]:.2f} vs quiet {q.speedup[2]:.2f}, unflagged"
    assert not (b.efficiency[2] > 1.1 and not b.flag[2])
    # the load was seen: 2 ranks + 2 busy loops on 2 cores get ~half a core each; a lone rank beside them ~2/3
    assert b.contended[2] and "thread(s)' time" in b.contended_reason[2], busy[["world_size", "cpu_share", "contended_reason"]].to_string()
    assert b.cpu_share[1] < 0.8 and b.cpu_share[2] < 0.6
    # each repeat's log says how many threads it had and the share of them it got: ~2/3 for the lone rank, more where
    # the scheduler favours it on waking from its short waits (a CI run here: windows 0.54-0.81, median 0.73), so the
    # bound is the summary's (above); the pressure figures below say how much it waited
    log = read_log(tmp_path / "busy" / "world1-1")
    assert {"threads", "cpu_share", "load", "train_s"} <= set(log.columns) and log.cpu_share.median() < 0.8
    # where Linux keeps CPU pressure, each window's own figure: a lone rank beside 2 busy loops on 2 cores waits about
    # half the time, 2 ranks beside them nearly all of it; a quiet lone rank hardly at all (whatever the past minute's
    # load average still remembers of the tests before it)
    if _cpu_stall_s() is None: return
    assert log.cpu_pressure.median() > 0.3 and read_log(tmp_path / "busy" / "world2-1").cpu_pressure.median() > 0.6
    if calm: assert read_log(tmp_path / "quiet" / "world1-1").cpu_pressure.median() < 0.1
