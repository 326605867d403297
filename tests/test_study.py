"""`dpt study` end to end: a run that fails is recorded with its one-line cause and the study goes on; `--status` reads
it back; `--resume` runs only that run again; bad input is one line before any run starts, with nothing written. (The
2 × 2 study with its table, comparison and figure runs in the study chapter; the job-array script meets a real sbatch in
test_slurm.py.)"""
import json, os
from pathlib import Path

from conftest import dpt, sigint_default

OV = ["training.max_steps=10", "training.checkpoint_every=0", "training.log_every=5"]


def _records(out):
    return {p.parent.name: json.loads(p.read_text()) for p in Path(out).glob("runs/*/study_result.json")}


def test_a_failed_run_is_recorded_and_resume_reruns_only_it(merged, tmp_path):
    out = tmp_path / "s"
    r = dpt("study", "--config", "test", "--data", merged, "--grid", "task.dataset.tasks=null,[nope]", "--seeds", "0",
            "--out", out, "--windows", 16, "--no-progress", *OV, check=1)
    assert r.stderr.strip().splitlines()[-1].startswith("dpt: error: 1 of 2 runs did not finish"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    m = json.loads((out / "study.json").read_text())
    assert [x["name"] for x in m["runs"]] == ["task.dataset.tasks=null-seed0", "task.dataset.tasks=[nope]-seed0"]
    rec = _records(out)
    ok, bad = rec["task.dataset.tasks=null-seed0"], rec["task.dataset.tasks=[nope]-seed0"]
    assert ok["status"] == "done" and ok["steps"] == 10 and len(ok["window_mse"]) > 0 and ok["mse"] > 0
    assert bad["status"] == "failed" and "unknown task(s) ['nope']" in bad["error"] and "\n" not in bad["error"]
    assert "task.dataset.tasks=null" in r.stdout and "1/1" in r.stdout and "0/1" in r.stdout   # the table
    st = dpt("study", out, "--status", check=0).stdout
    assert "done" in st and "failed" in st and "unknown task(s)" in st
    done_file = out / "runs" / "task.dataset.tasks=null-seed0" / "study_result.json"
    bad_file = out / "runs" / "task.dataset.tasks=[nope]-seed0" / "study_result.json"
    t_ok, t_bad = done_file.stat().st_mtime_ns, bad_file.stat().st_mtime_ns
    r = dpt("study", out, "--resume", "--no-progress", check=1)
    assert done_file.stat().st_mtime_ns == t_ok                   # the finished run: not run again
    assert bad_file.stat().st_mtime_ns > t_ok and bad_file.stat().st_mtime_ns != t_bad   # the failed one: run again
    assert len((out / "runs" / "task.dataset.tasks=[nope]-seed0" / "study.log").read_text().split("rank 0 failed")) == 3


def test_bad_studies_are_refused_before_any_run(merged, tmp_path):
    base = ["study", "--config", "test", "--data", merged, "--no-progress"]
    cases = [
        (["--grid", "policy.objectiv=ddpm,flow", "--out", tmp_path / "a"], "did you mean policy.objective"),
        (["--grid", "optimizer.lr=1e-3,", "--out", tmp_path / "b"], "an empty value"),
        (["--grid", "policy.objective=ddpm", "--seeds", "0,1,0", "--out", tmp_path / "c"], "0 is repeated"),
        (["--grid", "policy.objective=ddpm,dpm", "--out", tmp_path / "d"], "expected one of ddpm, flow"),
        # issue 69: a value every key accepts whose model cannot exist (3 heads do not divide n_emb 32): before any run
        (["policy.denoiser=transformer", "--grid", "policy.transformer.n_head=2,3", "--out", tmp_path / "e"],
         "policy.transformer.n_head=3-seed0: its model cannot be built"),
    ]
    for args, msg in cases:
        r = dpt(*base, *args, check=1)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpt: error:") and msg in lines[0], (args, r.stderr[-1500:])
        assert not Path(args[-1]).exists(), f"{args}: wrote {args[-1]}"
    # a folder that holds another study: refused, and the study there untouched
    other = tmp_path / "other"
    dpt(*base, "--grid", "policy.objective=ddpm", "--seeds", "0", "--out", other, "--slurm", "--cpu", check=0)
    before = (other / "study.json").read_text()
    r = dpt(*base, "--grid", "policy.objective=flow", "--seeds", "0", "--out", other, check=1)
    assert "holds another study (its grid differs)" in r.stderr and (other / "study.json").read_text() == before
    assert not (other / "runs").exists()


def test_ctrl_c_while_runs_start_records_them_stopped_not_failed(merged, tmp_path):
    "Issue 69: the user's Ctrl-C stops the study's runs wherever they are (starting ranks too): `stopped`, resumable."
    import signal, subprocess, sys, time
    out = tmp_path / "s"
    # SIGINT as a terminal's Ctrl-C delivers it (a background job, as CI runs the tests, inherits it ignored)
    p = subprocess.Popen(sigint_default([sys.executable, "-m", "dptoolkit.cli", "study", "--config", "test", "--data",
                                         merged, "--grid", "optimizer.lr=1e-3,2e-3", "--seeds", "0", "--out", out,
                                         "--parallel", "1", "--no-progress", "training.max_steps=100000",
                                         "training.log_every=5"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = out / "runs" / "optimizer.lr=0.001-seed0" / ".study-pid"
    try:
        t0 = time.time()
        while not pid.exists() and time.time() - t0 < 60: time.sleep(0.1)
        time.sleep(1.0)                                     # its ranks are starting
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=180)
    finally:                                                # never leave a study training on
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=180)
    rec = _records(out)["optimizer.lr=0.001-seed0"]
    assert rec["status"] == "stopped", (rec, err[-2000:])
    # the signal that came while the rank started was heard, not lost: before 2026-12-07 each rank of a launcher run as
    # `python -m dptoolkit.processes` re-imported that module and took itself for the fork server (ignoring SIGTERM),
    # so the run trained on until the launcher's 120 s grace ran out
    log = (out / "runs" / "optimizer.lr=0.001-seed0" / "study.log").read_text()
    assert "did not stop within" not in log and "stopped by SIGTERM" in log, log[-2000:]
    assert "failed" not in dpt("study", out, "--status", check=0).stdout
