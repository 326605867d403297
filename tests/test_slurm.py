"""Scheduler signals and a real Slurm: `kill -TERM` of `dpt train` checkpoints and resumes exactly; on a one-node Slurm
started here (munged, slurmctld, slurmd on this machine), `srun -n 2 dpt train` is one world-size-2 run, the `dpt slurm`
script runs under sbatch with 2 ranks, and a signalled `--requeue` job checkpoints, requeues itself and resumes."""
import json, os, shutil, signal, socket, subprocess, sys, time
from pathlib import Path

import pytest

from dptoolkit.report import read_log
from conftest import dpt

OV = ["training.log_every=5", "training.checkpoint_every=0", "training.deterministic=true"]


def _wait_for(pred, timeout, what):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v: return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _log_lines(run):
    f = Path(run) / "logs.jsonl"
    return len(f.read_text().splitlines()) if f.exists() else 0


def test_sigterm_checkpoints_exits_0_and_resume_continues_exactly(merged, tmp_path):
    ov = ["training.max_steps=80", *OV]
    full, cut = tmp_path / "full", tmp_path / "cut"
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", full, "--no-progress", *ov, check=0)
    p = subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(merged), "--nprocs", "2", "--out", str(cut),
                          "--no-progress", *ov], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _log_lines(cut) >= 3, 120, "three log lines")
    t0 = time.time(); p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and time.time() - t0 < 30, (p.returncode, err[-2000:])
    res = json.loads(out.strip().splitlines()[-1])
    stopped = res["steps"]
    assert res["stopped_by"] == "SIGTERM" and not res["completed"] and 0 < stopped < 80
    assert (cut / "checkpoints" / "latest").read_text() == f"step_{stopped:06d}"   # the checkpoint is at the stop step
    assert "leaked semaphore" not in err and "Traceback" not in err
    dpt("train", "--config", "test", "--data", merged, "--nprocs", 2, "--out", cut, "--no-progress", *ov, "training.resume=auto", check=0)
    a, b = read_log(full).set_index("step"), read_log(cut).set_index("step")
    assert list(a.index) == list(b.index) == list(range(5, 81, 5))
    later = [s for s in a.index if s > stopped]
    assert a.loc[later, "loss"].tolist() == b.loc[later, "loss"].tolist() and a.loc[later, "lr"].tolist() == b.loc[later, "lr"].tolist()


# ---------------------------------------------------------------- a real one-node Slurm on this machine
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def slurm_conf(d, cluster, controller, nodes, per_node=False) -> str:
    "A private slurm.conf in folder `d` (root daemons, munge auth, free ports); `nodes`: the NodeName / PartitionName lines."
    n = "-%n" if per_node else ""
    return f"""ClusterName={cluster}
SlurmctldHost={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool{n}
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd{n}.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd{n}.log
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
{nodes}"""


def start_munged(d):
    "munged as the munge user, with a fresh key and its socket, pid and logs in `d`."
    subprocess.run(["runuser", "-u", "munge", "--", "munged", f"--key-file={d}/munge.key", f"--socket={d}/munge.socket",
                    f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed", "--force"],
                   check=True, timeout=30)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    "Start munged, slurmctld and slurmd with a private config (SLURM_CONF); yield the environment; stop them."
    if os.geteuid() != 0: pytest.skip("starting slurmctld/slurmd/munged needs root")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol") if not shutil.which(b)]
    if missing: pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing; .ci/run installs slurm-wlm and munge)")
    d = Path("/tmp") / f"dpt-slurm-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True); (d / "state").mkdir(parents=True); (d / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    (d / "munge.key").write_bytes(os.urandom(1024))
    subprocess.run(["chown", "munge", str(d), str(d / "munge.key")], check=True); os.chmod(d / "munge.key", 0o400); os.chmod(d, 0o755)
    conf = d / "slurm.conf"
    conf.write_text(slurm_conf(d, "dpttest", host, f"""NodeName={host} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        start_munged(d)
        subprocess.run(["slurmctld"], env=env, check=True, timeout=30); subprocess.run(["slurmd"], env=env, check=True, timeout=30)
        _wait_for(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout,
                  60, "the Slurm node to be idle")
    except (subprocess.SubprocessError, OSError, AssertionError) as e:
        logs = "".join(p.read_text()[-800:] for p in d.glob("*.log") if p.is_file())
        _stop_slurm(d); pytest.skip(f"a local Slurm could not be started here ({e}); logs: {logs}")
    yield env
    _stop_slurm(d)


def _stop_slurm(d):
    for name in ("slurmd", "slurmctld", "munged"):
        pid = d / f"{name}.pid"
        if pid.exists():
            try: os.kill(int(pid.read_text().split()[0]), signal.SIGTERM)
            except (ValueError, ProcessLookupError): pass
    time.sleep(1)
    shutil.rmtree(d, ignore_errors=True)


def _job_state(env, jid):
    r = subprocess.run(["scontrol", "show", "job", str(jid)], env=env, capture_output=True, text=True)
    return next((w.split("=")[1] for w in r.stdout.split() if w.startswith("JobState=")), "GONE")


def _end_hung_step(env, run) -> str:
    """A step that did not finish: what its ranks were doing (process state, CPU, kernel wait channel, log lines), then
    the job cancelled and its ranks killed (killing srun leaves the step running: its ranks would starve the tests
    after this one, and the pipes they hold would keep `communicate` waiting for them)."""
    import psutil
    ranks = [p for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])
             and "srun" not in (p.info["cmdline"] or [""])[0]]
    said = []
    for p in ranks:
        try:
            wchan = Path(f"/proc/{p.pid}/wchan").read_text()
            said.append(f"pid {p.pid}: {p.status()}, {p.cpu_percent(0.5):.0f} % CPU, {p.num_threads()} threads, "
                        f"wchan {wchan}, SLURM_PROCID={p.environ().get('SLURM_PROCID')}")
        except (psutil.Error, OSError): pass
    subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
    for p in ranks:
        try: p.kill()
        except psutil.Error: pass
    return f"ranks: {'; '.join(said) or 'none left'}; log lines: {_log_lines(run)}"


def test_srun_tasks_are_one_world(slurm, merged, tmp_path):
    run = tmp_path / "run"
    # --kill-on-bad-exit: a rank that fails ends the step (its peers would wait ddp.timeout_s for it otherwise)
    p = subprocess.Popen(["srun", "--kill-on-bad-exit=1", "-n", "2", sys.executable, "-m", "dptoolkit.cli", "train",
                          "--config", "test", "--data", str(merged), "--out", str(run), "--no-progress",
                          "training.max_steps=10"], env=slurm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try: out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        said = _end_hung_step(slurm, run)
        p.kill()
        out, err = p.communicate(timeout=60)
        raise AssertionError(f"srun -n 2 did not finish in 300 s: {said}; stderr: {err[-3000:]}") from None
    assert p.returncode == 0, err[-3000:]
    assert [l["world_size"] for l in map(json.loads, (run / "logs.jsonl").read_text().splitlines())] == [2, 2]
    assert out.count("dptoolkit train | world 2") == 1 and "already holds a run" not in err
    assert "leaked semaphore" not in err and "error" not in err.lower()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_dpt_slurm_script_runs_under_sbatch(slurm, merged, tmp_path):
    run, script = tmp_path / "run", tmp_path / "job.sbatch"
    dpt("slurm", "--nodes", 1, "--gpus-per-node", 2, "--cpu", "-o", script, "--", "--config", "test", "--data", merged,
        "--out", run, "--no-progress", "training.max_steps=10", check=0, env={"SLURM_CONF": slurm["SLURM_CONF"]})
    r = subprocess.run(["sbatch", "--wait", str(script)], env=slurm, capture_output=True, text=True, timeout=300)
    out = "".join(p.read_text() for p in run.glob("slurm-*.out"))
    assert r.returncode == 0, out[-3000:]
    assert read_log(run).world_size.tolist() == [2, 2] and "dptoolkit train | world 2" in out


def test_requeued_job_resumes_where_it_stopped(slurm, merged, tmp_path):
    run, script = tmp_path / "run", tmp_path / "job.sbatch"
    # a relative --data, written in the store's folder and submitted from another one: the script makes it absolute
    dpt("slurm", "--gpus-per-node", 2, "--cpu", "--requeue", "-o", script, "--", "--config", "test", "--data", merged.name,
        "--out", run, "--no-progress", "training.max_steps=300", *OV, check=0, env={"SLURM_CONF": slurm["SLURM_CONF"]},
        cwd=merged.parent)
    jid = subprocess.run(["sbatch", "--parsable", str(script)], env=slurm, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.strip()
    _wait_for(lambda: _log_lines(run) >= 3, 180, "the job's first log lines")
    subprocess.run(["scancel", "--signal=USR1", "--batch", jid], env=slurm, check=True)
    _wait_for(lambda: _job_state(slurm, jid) == "PENDING", 120, "the job to requeue itself")
    # a requeued job waits (BeginTime) before it may start again; once its first run has fully left the node (under load
    # that takes a while: releasing it earlier failed its launch once), release it, as an admin can
    _wait_for(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], env=slurm, capture_output=True, text=True).stdout.strip() == "idle",
              120, "the node to be idle again")
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"], env=slurm, check=True)
    _wait_for(lambda: _job_state(slurm, jid) in ("COMPLETED", "FAILED", "CANCELLED", "GONE"), 300, "the job to finish")
    out = "".join(p.read_text() for p in run.glob("slurm-*.out"))
    show = subprocess.run(["scontrol", "show", "job", jid], env=slurm, capture_output=True, text=True).stdout
    logs = "".join(f"--- {p.name}\n" + p.read_text()[-1500:] for p in Path(slurm["SLURM_CONF"]).parent.glob("slurm*.log"))
    assert _job_state(slurm, jid) == "COMPLETED", show + out[-2000:] + logs
    stopped = int(out.split("stopped by Slurm's USR1 (the run folder's STOP file) at step ")[1].split("/")[0])
    assert "requeueing job" in out and "(restart 1)" in out and 0 < stopped < 300
    # the preemption is one record (no torchrun traceback, no 'exited with status 1'), and the trap is not retried
    assert "Traceback" not in out and "exited with status 1" not in out and f"stopped on request at" in out, out[-3000:]
    assert f"checkpoint step_{stopped:06d}" in out
    assert f"resumed_from: {stopped}" in (run / "config.yaml").read_text()     # from the checkpoint written on the signal
    log = read_log(run)
    assert log.step.tolist() == list(range(5, 301, 5))                        # every step once, after de-duplication
    assert json.loads((run / "result.json").read_text())["steps"] == 300


def test_study_job_array_is_what_sbatch_accepts(slurm, merged, tmp_path):
    out = tmp_path / "study"
    r = dpt("study", "--config", "test", "--data", merged, "--grid", "policy.objective=ddpm,flow", "--seeds", "0,1",
            "--out", out, "--slurm", "--cpu", "--parallel", 2, "training.max_steps=10", check=0,
            env={"SLURM_CONF": slurm["SLURM_CONF"]})
    script = (out / "study.sbatch").read_text()
    assert "#SBATCH --array=0-3%2" in script and "#SBATCH --requeue" in script and "dptoolkit.study_runner:array_task" in script
    t = subprocess.run(["sbatch", "--test-only", str(out / "study.sbatch")], env=slurm, capture_output=True, text=True,
                       timeout=60)
    assert t.returncode == 0 and "to start at" in t.stderr, t.stderr
    assert not (out / "runs").exists()        # written, not run
