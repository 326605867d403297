"""A study as one Slurm job array on the two-node test cluster (issue 48): 2 recipes × 2 training seeds of the test
config on a sample store (offline measure: `evaluate` on the same held-out windows), `dpt study`'s own sbatch script
(`write_study_sbatch(cpu=True)`: one task per run, at most 2 at once, a task a node), and one task preempted
while it trains — `scancel --signal=USR1` to its batch script, as Slurm does before a time limit: the run checkpoints,
the task requeues itself and resumes from its checkpoint. Prints the nodes each task ran on, the tasks' restart
counts, the study's status and table, the comparison, the preempted run's logged steps (each once) and the wall time.
Needs root, iproute2, munge and slurm-wlm (what `tests/test_slurm_2node.py` needs; it brings the cluster up).
Usage: python bench/study_slurm.py [--steps 300] [--out DIR]
"""
import argparse, json, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out")
    a = ap.parse_args()
    from test_slurm import _job_state, _log_lines, _wait_for
    from test_slurm_2node import two_node_cluster
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log
    from dptoolkit.store import sample_data
    from dptoolkit.study import compare, make_study, study_status, study_table, write_study_sbatch
    out = Path(a.out or tempfile.mkdtemp(prefix="dpt-study-slurm-"))
    store = sample_data(out / "data", tasks=1, episodes=8, seed=3, overwrite=True)[0]
    ov = [f"training.max_steps={a.steps}", "training.log_every=10", "training.checkpoint_every=50",
          "training.device=cpu", "training.stall_timeout_s=null"]
    d = make_study(for_store(store, name="test"), {"policy.objective": ["ddpm", "flow"]}, [0, 1], out / "study",
                   rollout=dict(windows=64), overrides=ov)
    script = write_study_sbatch(d, cpu=True, max_parallel=2, grace=30)
    with two_node_cluster() as env:
        t0 = time.time()
        jid = subprocess.run(["sbatch", "--parsable", str(script)], env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        victim = d / "runs" / json.loads((d / "study.json").read_text())["runs"][0]["name"]
        _wait_for(lambda: _log_lines(victim) >= 5, 300, "task 0's first log lines")
        # scancel may say "Job can not be altered now" while the signal it sent is being handled: the requeue is what
        # tells it arrived
        subprocess.run(["scancel", "--signal=USR1", "--batch", f"{jid}_0"], env=env)
        print(f"{time.time() - t0:.0f} s: task 0 sent USR1 at step {_log_lines(victim) * 10}", flush=True)
        _wait_for(lambda: _job_state(env, f"{jid}_0") == "PENDING", 120, "task 0 to requeue itself")
        time.sleep(2)
        subprocess.run(["scontrol", "update", f"JobId={jid}_0", "StartTime=now"], env=env, check=True)
        left = lambda: subprocess.run(["squeue", "-h", "-j", jid], env=env, capture_output=True, text=True).stdout
        _wait_for(lambda: not left().strip(), 1800, "every task to finish")
        wall = time.time() - t0
        acct = {}
        for f in sorted(d.glob("slurm-*.out")):
            text = f.read_text()
            acct[f.name] = dict(restarts=text.count("dpt-study: task "), requeued="requeueing" in text,
                                hosts=sorted({r["host"] for r in _ranks(d, text)}))
    hosts = sorted({h for v in acct.values() for h in v["hosts"]})
    print(f"job array {jid}: {len(acct)} tasks on {len(hosts)} node(s) ({', '.join(hosts)}), wall {wall:.0f} s")
    for k, v in acct.items(): print(f"  {k}: {v}")
    with __import__("pandas").option_context("display.width", 160, "display.max_columns", 20):
        print(study_status(d).to_string(index=False))
        print(study_table(d).to_string(index=False))
    print(compare(d, "policy.objective=ddpm", "policy.objective=flow"))
    steps = read_log(victim).step.tolist()
    print(f"preempted run {victim.name}: {len(steps)} log records, steps {steps[0]}…{steps[-1]}, each once: "
          f"{steps == list(range(10, a.steps + 1, 10))}; resumed_from in its config.yaml: "
          f"{'resumed_from: ' in (victim / 'config.yaml').read_text()}")


def _ranks(d, text):
    "The hosts of the runs a task's output names (config.yaml of each run folder it trained)."
    import yaml
    for line in text.splitlines():
        if "| run " in line:
            rd = Path(line.split("| run ")[1].split(" |")[0].split(" ")[0])
            if (rd / "config.yaml").exists():
                return yaml.safe_load((rd / "config.yaml").read_text().split("# run\n")[1])["run"]["ranks"]
    return []


if __name__ == "__main__":
    main()
