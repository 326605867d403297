"""`dpt demo` runs end to end, learns and ends with the evaluation; `dpt eval` and `dpt report` on its runs; log parsing."""
import csv, json
from pathlib import Path

from dptoolkit.config import for_store
from dptoolkit.report import read_log, summarize
from dptoolkit.train import train
from conftest import dpt


def test_demo_learns_and_ends_with_the_evaluation(tmp_path):
    "The default demo (issues 17, 46): the loss falls by half, the evaluation table ends it, the policy beats both baselines."
    out = tmp_path / "demo"
    r = dpt("demo", "--out", out, "--no-progress", check=0, timeout=600)
    for name in ("throughput", "speedup", "loss", "eval"):
        p = out / f"{name}.png"
        assert str(p) in r.stdout and p.read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert sorted(int(x["world_size"]) for x in rows) == [1, 2]
    assert all(float(x["samples_per_s"]) > 0 for x in rows)
    assert (out / "merged.zarr" / ".zgroup").exists() and "robot_dp_14.yaml" in r.stdout
    loss = read_log(out / "run_2proc")["loss"]
    assert loss.iloc[-1] <= 0.5 * loss.iloc[0], loss.tolist()             # learns visibly
    ev = json.loads((out / "eval.json").read_text())
    o = {p: {m: ev[p][m] for m in ("mse", "mae")} for p in ("policy", "hold", "mean")}    # DESIGN.md's layout
    assert o["policy"]["mse"] < o["mean"]["mse"], o                         # beats the mean-action baseline
    assert o["policy"]["mse"] < o["hold"]["mse"], o                         # ... and holding the joint state still
    assert ev["info"]["split"] == "val" and ev["info"]["windows"] > 0
    tail = r.stdout[r.stdout.index("evaluate the 2-process run"):]
    assert "mse / hold" in tail and "× that of predicting the mean action" in tail and "it beats both." in tail
    assert "e+0" not in r.stdout                                           # plain figures, not 1.45e+03
    assert "next steps" in r.stdout and "dpt slurm" in r.stdout and "09_walkthrough" in r.stdout
    # dpt eval on the same run: the same numbers (deterministic), strict JSON, per-dimension metrics, a figure
    e = dpt("eval", out / "run_2proc", "--json", "-o", tmp_path / "ev.png", check=0)
    again = json.loads(e.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert {p: {m: again[p][m] for m in ("mse", "mae")} for p in o} == o
    assert all(set(again[p]["per_dim"]) == {"mse", "mae"} for p in o)
    assert all(len(v) == 14 for p in o for v in again[p]["per_dim"].values())
    assert (tmp_path / "ev.png").read_bytes()[:4] == b"\x89PNG"
    again = dpt("demo", "--out", out, "--steps", 5, "--no-progress")
    assert again.returncode == 1 and "already exists" in again.stderr
    # dpt report on the demo's two runs: a PNG and JSON rows, plain text table
    runs = [out / "speedup" / "world1-1", out / "run_2proc"]
    # a folder of runs: the demo's learning run and its four interleaved timing runs, pooled per world size
    folder = json.loads(dpt("report", out, "--json", "--combine", check=0).stdout)
    assert [(x["world_size"], x["repeats"]) for x in folder] == [(1, 2), (2, 3)]
    assert all(x["samples_per_s_low"] <= x["samples_per_s"] <= x["samples_per_s_high"] for x in folder)
    r = dpt("report", *runs, "-o", tmp_path / "fig.png", "--json", check=0)
    rows = json.loads(r.stdout)
    assert sorted(x["world_size"] for x in rows) == [1, 2] and rows[0]["speedup"] == 1.0
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = dpt("report", *runs, check=0).stdout
    assert "speedup" in text and "efficiency" in text and "e+0" not in text
    # a run still being written: the torn last line is skipped
    last = read_log(runs[0])["step"].max()
    with open(runs[0] / "logs.jsonl", "a") as f: f.write('{"step": 99999, "lo')
    assert read_log(runs[0])["step"].max() == last
    r = dpt("report", tmp_path / "nothing")
    assert r.returncode == 1 and "no logs.jsonl" in r.stderr


def test_log_parsing_edge_cases(tmp_path):
    import pytest
    from dptoolkit.report import ReportError
    d = tmp_path / "r"; d.mkdir()
    (d / "logs.jsonl").write_text('{"step": 5, "loss": 1.0}\n{"step": 10, "loss": 0.5}\n')     # no throughput fields
    df = read_log(d)
    assert df["step"].tolist() == [5, 10] and "samples_per_s" not in df
    with pytest.raises(ReportError, match="no samples_per_s"):
        summarize([d])
    (d / "logs.jsonl").write_text('{"step": 5}\nnot json\n{"step": 10}\n')                  # a broken middle line
    with pytest.raises(ReportError, match="line 2 is not JSON"):
        read_log(d)
    (d / "logs.jsonl").write_text('{"loss": 1}\n')
    with pytest.raises(ReportError, match="no 'step' field"):
        read_log(d)
