"""Slurm across two real nodes on this machine (issue 29): two slurmd, each in a network namespace of its own with its
own address, host name and /etc/hosts (a node resolves its own name only, as on a cluster whose names do not resolve
everywhere), joined by a bridge; slurmctld and munged in the host's namespace. `dpt slurm --nodes 2 --cpu` trains one
world-2 run with a rank on each node, a preempted `--requeue` job resumes on both nodes with every step logged once,
and a rank killed on node 2 ends the job at once with the checkpoint intact.

slurmd is started with `nsenter --net=…` plus `unshare --uts --mount` (`ip netns exec` remounts /sys, and slurmd then
refuses to start). Skipped, with the reason, where namespaces or Slurm cannot be set up (not root, no iproute2, …)."""
import contextlib, json, os, shutil, signal, socket, subprocess, time
from pathlib import Path

import pytest
import yaml

from dptoolkit.report import read_log
from dptoolkit.checkpoint import latest_checkpoint, load_checkpoint
from conftest import dpt
from test_slurm import OV, _job_state, _log_lines, _wait_for, slurm_conf, start_munged

NODES = {"n1": "10.77.0.11", "n2": "10.77.0.12"}
BRIDGE, HOST_ADDR = "dptbr0", "10.77.0.1"


def _sh(*cmd, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=60)


def _net_down():
    for n in NODES:
        _sh("ip", "netns", "del", f"dpt{n}", check=False); _sh("ip", "link", "del", f"dptv{n}", check=False)
    _sh("ip", "link", "del", BRIDGE, check=False)


def _net_up():
    _net_down()
    _sh("ip", "link", "add", BRIDGE, "type", "bridge"); _sh("ip", "addr", "add", f"{HOST_ADDR}/24", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    for n, addr in NODES.items():
        _sh("ip", "netns", "add", f"dpt{n}")
        _sh("ip", "link", "add", f"dptv{n}", "type", "veth", "peer", "name", "eth0", "netns", f"dpt{n}")
        _sh("ip", "link", "set", f"dptv{n}", "master", BRIDGE, "up")
        _sh("ip", "-n", f"dpt{n}", "addr", "add", f"{addr}/24", "dev", "eth0")
        _sh("ip", "-n", f"dpt{n}", "link", "set", "eth0", "up"); _sh("ip", "-n", f"dpt{n}", "link", "set", "lo", "up")


def _stop(d):
    for f in sorted(d.glob("*.pid")):
        try: os.kill(int(f.read_text().split()[0]), signal.SIGTERM)
        except (ValueError, ProcessLookupError, OSError): pass
    time.sleep(1)


class Unavailable(RuntimeError):
    "A two-node Slurm cannot be brought up here (not root, a tool missing, namespaces refused); the message says why."


@contextlib.contextmanager
def two_node_cluster():
    """Bring up the two-node cluster (munged and slurmctld here, a slurmd in each node's namespace); yield the
    environment (SLURM_CONF); cancel every job and take it all down on leaving. Raises `Unavailable` with the reason.
    The tests' fixture and `bench/study_slurm.py` use it."""
    if os.geteuid() != 0: raise Unavailable("network namespaces and slurmd need root")
    missing = [b for b in ("ip", "nsenter", "unshare", "munged", "slurmctld", "slurmd", "sbatch") if not shutil.which(b)]
    if missing: raise Unavailable(f"missing {', '.join(missing)} (.ci/run installs iproute2, slurm-wlm and munge)")
    d = Path("/tmp") / f"dpt-slurm2-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True); (d / "state").mkdir(parents=True)
    try: _net_up()
    except subprocess.CalledProcessError as e:
        _net_down(); raise Unavailable(f"cannot create network namespaces here: {' '.join(e.cmd)}: {e.stderr.strip()}")
    host = socket.gethostname().split(".")[0]
    (d / "munge.key").write_bytes(os.urandom(1024))
    _sh("chown", "munge", str(d), str(d / "munge.key")); os.chmod(d / "munge.key", 0o400); os.chmod(d, 0o755)
    conf = d / "slurm.conf"
    nodes = "".join(f"NodeName={n} NodeAddr={a} NodeHostname={n} CPUs=1 State=UNKNOWN\n" for n, a in NODES.items())
    conf.write_text(slurm_conf(d, "dpt2node", f"{host}({HOST_ADDR})", nodes + f"PartitionName=debug Nodes={','.join(NODES)} "
                                                                           "Default=YES MaxTime=INFINITE State=UP\n", per_node=True))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        start_munged(d)
        subprocess.run(["slurmctld"], env=env, check=True, timeout=30)
        for n, addr in NODES.items():
            (d / f"spool-{n}").mkdir()
            (d / f"hosts-{n}").write_text(f"127.0.0.1 localhost\n{addr} {n}\n")   # a node knows its own name only
            subprocess.run(["nsenter", f"--net=/run/netns/dpt{n}", "unshare", "--uts", "--mount", "--", "sh", "-c",
                            f"mount --bind {d}/hosts-{n} /etc/hosts && hostname {n} && exec slurmd -N {n}"],
                           env=env, check=True, timeout=30)
        _wait_for(lambda: subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True).stdout.split()
                  == ["idle", "idle"], 60, "both Slurm nodes to be idle")
    except (subprocess.SubprocessError, OSError, AssertionError) as e:
        logs = "".join(p.read_text()[-600:] for p in d.glob("*.log") if p.is_file())
        _stop(d); _net_down(); shutil.rmtree(d, ignore_errors=True)
        raise Unavailable(f"a two-node Slurm could not be started here ({e}); logs: {logs}") from None
    try: yield env
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        _stop(d); _net_down(); shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    with contextlib.ExitStack() as stack:
        try: env = stack.enter_context(two_node_cluster())
        except Unavailable as e: pytest.skip(str(e))
        yield env


def _script(cluster, tmp_path, store, *train, requeue=False):
    run, script = tmp_path / "run", tmp_path / "job.sbatch"
    dpt("slurm", "--nodes", 2, "--cpu", *(["--requeue"] if requeue else []), "-o", script, "--", "--config", "test",
        "--data", store, "--out", run, "--no-progress", *OV, *train, check=0, env={"SLURM_CONF": cluster["SLURM_CONF"]})
    jid = subprocess.run(["sbatch", "--parsable", str(script)], env=cluster, capture_output=True, text=True, check=True).stdout.strip()
    return run, jid


def _out(run):
    return "".join(p.read_text() for p in Path(run).glob("slurm-*.out"))


def _ranks(run):
    return yaml.safe_load((Path(run) / "config.yaml").read_text().split("# run\n")[1])["run"]["ranks"]


def _done(cluster, jid):
    return _job_state(cluster, jid) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "GONE")


def test_one_world_across_two_nodes(cluster, merged, tmp_path):
    run, jid = _script(cluster, tmp_path, merged, "training.max_steps=40")
    _wait_for(lambda: _done(cluster, jid), 240, "the job to finish")
    out = _out(run)
    assert _job_state(cluster, jid) == "COMPLETED", out[-3000:]
    assert sorted(r["host"] for r in _ranks(run)) == ["n1", "n2"]            # one rank on each node
    assert read_log(run).world_size.tolist() == [2] * 8 and "dptoolkit train | world 2" in out
    assert "rendezvous 10.77.0.11:" in out                                    # the first node's NodeAddr, not its name
    assert json.loads((run / "result.json").read_text())["completed"]


def test_a_preempted_job_resumes_on_both_nodes(cluster, merged, tmp_path):
    run, jid = _script(cluster, tmp_path, merged, "training.max_steps=400", requeue=True)
    _wait_for(lambda: _log_lines(run) >= 3, 240, "the job's first log lines")
    subprocess.run(["scancel", "--signal=USR1", "--batch", jid], env=cluster, check=True)
    _wait_for(lambda: _job_state(cluster, jid) == "PENDING", 120, "the job to requeue itself")
    _wait_for(lambda: subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=cluster, capture_output=True, text=True).stdout.split()
              == ["idle", "idle"], 120, "both nodes to be idle again")
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"], env=cluster, check=True)
    _wait_for(lambda: _done(cluster, jid), 300, "the requeued job to finish")
    out = _out(run)
    assert _job_state(cluster, jid) == "COMPLETED", out[-3000:]
    stopped = int(out.split("stopped by Slurm's USR1 (the run folder's STOP file) at step ")[1].split("/")[0])
    assert 0 < stopped < 400 and "(restart 1)" in out and "stopped on request at" in out and "Traceback" not in out
    assert f"resumed_from: {stopped}" in (run / "config.yaml").read_text()
    assert sorted(r["host"] for r in _ranks(run)) == ["n1", "n2"]
    assert read_log(run).step.tolist() == list(range(5, 401, 5))            # every step once, across the restart


def test_a_killed_rank_on_node_2_ends_the_job(cluster, merged, tmp_path):
    run, jid = _script(cluster, tmp_path, merged, "training.max_steps=100000", "training.checkpoint_every=20")
    _wait_for(lambda: (run / "checkpoints" / "latest").exists(), 240, "a first checkpoint")
    latest = (run / "checkpoints" / "latest").read_text()
    victim = next(r for r in _ranks(run) if r["host"] == "n2")
    os.kill(victim["pid"], signal.SIGKILL); t0 = time.time()
    _wait_for(lambda: _done(cluster, jid), 120, "the job to end")
    took = time.time() - t0
    out = _out(run)
    assert _job_state(cluster, jid) == "FAILED" and took < 60, (took, out[-3000:])
    ends = [l for l in out.splitlines() if l.startswith("dpt-slurm: training exited with status")]
    assert len(ends) == 1 and "status 0" not in ends[0], out[-3000:]
    ck = load_checkpoint(latest_checkpoint(run))                              # the last checkpoint, intact
    assert int(ck["state"]["step"]) >= int(latest.removeprefix("step_"))
