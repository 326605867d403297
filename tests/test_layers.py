"""Issue 65: the house's shape, read from the code. Every `import` of ours in dptoolkit/ (lazy ones inside functions
too: the checkpoint ↔ fsdp circle was made of those) forms a graph that must have no cycle, whose ground floor imports
nothing of ours above it, whose data rooms never reach the model side; and run folders written before the strategy
object keep resuming."""
import ast, shutil
from pathlib import Path

import pytest

from conftest import ROOT, dpt

PKG = ROOT / "dptoolkit"
GROUND = {"codecs", "lerobot", "store", "processes", "stall", "report", "stats", "commands"}   # import nothing of ours
ON_GROUND = {"launch": {"processes", "stall"}}   # the launcher (issue 91: cut in three) stands on its two lower rooms
DATA = {"merge", "convert", "config", "cache", "normalize", "dataset"}
MODEL = {"protocol", "policy", "objective", "flow", "ddpm", "transformer", "fsdp", "strategy", "train", "evaluate", "sim",
         "aloha", "success", "interop", "rl"}
BELOW_ALL = {"checkpoint": {"store"}}                    # the run-folder format: files, lock, atomic writes, keep-K


def imports():
    "{room: {rooms it imports}}, lazy imports included; `from . import x` and `import dptoolkit.x` alike."
    g = {}
    for p in sorted(PKG.glob("*.py")):
        if p.stem in ("_modidx", "__init__"): continue
        deps = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom):
                mod = n.module or ""
                if n.level == 0 and not mod.startswith("dptoolkit"): continue
                mod = mod.removeprefix("dptoolkit").lstrip(".")
                deps |= {mod.split(".")[0]} if mod else {a.name for a in n.names}
            elif isinstance(n, ast.Import):
                deps |= {a.name.split(".")[1] for a in n.names if a.name.startswith("dptoolkit.")}
        g[p.stem] = {d for d in deps if d and d != p.stem and (PKG / f"{d}.py").exists()}
    return g


def cycles(g):
    "Every cycle's rooms (Tarjan's strongly connected components of more than one room)."
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in sorted(g):
        if v not in index: visit(v)
    return out


def test_the_graph_is_read():
    g = imports()
    assert "train" in g and {"config", "dataset"} <= g["train"], g.get("train")   # the reader sees what is there
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]          # and the cycle finder finds one


def test_no_circle():
    assert cycles(imports()) == []


def test_ground_floor_imports_nothing_above_it():
    g = imports()
    bad = {r: sorted(g[r] - GROUND) for r in GROUND if r in g and g[r] - GROUND}
    assert not bad, f"ground-floor rooms importing rooms above them: {bad}"


def test_the_launcher_stands_on_the_ground_floor_only():
    g = imports()
    assert g["launch"] == ON_GROUND["launch"], g["launch"]           # nothing of training, data or the CLI
    assert not g["processes"] and not g["stall"], (g["processes"], g["stall"])


def test_checkpoint_keeps_the_format_only():
    g = imports()
    bad = {r: sorted(g[r] - ok) for r, ok in BELOW_ALL.items() if g[r] - ok - GROUND}
    assert not bad, bad


def test_the_contract_is_the_bottom_of_the_model_side():
    "protocol.py (the policy contract, PolicyError) imports no implementation; the packaged policy stands on it."
    g = imports()
    assert not g["protocol"] & MODEL, sorted(g["protocol"] & MODEL)
    assert "protocol" in g["policy"] and "objective" in g["policy"]
    assert not g["objective"] & (MODEL - {"flow"}), sorted(g["objective"])


def test_no_data_room_reaches_the_model():
    g = imports()
    def reach(r, seen):
        for d in g.get(r, ()):
            if d not in seen: seen.add(d); reach(d, seen)
        return seen
    bad = {r: sorted(reach(r, set()) & MODEL) for r in DATA if reach(r, set()) & MODEL}
    assert not bad, f"data rooms that reach the model side: {bad}"


def _reach(g, r, seen=None):
    seen = set() if seen is None else seen
    for d in g.get(r, ()):
        if d not in seen: seen.add(d); _reach(g, d, seen)
    return seen


ROLLOUT = {"sim", "aloha", "success", "envs", "episodes", "meta_world", "iterate", "rl", "evaluate"}


def test_the_environments_room_is_below_every_rollout_and_the_loop_below_every_simulator():
    """Issues 89 and 91: the environments' specs import no training, policy or rollout code; the training loop (and
    the watcher it starts by path) reaches no simulator, so `train` no longer stands on the rollout stack."""
    g = imports()
    assert not _reach(g, "environments") & (MODEL | ROLLOUT | DATA), sorted(_reach(g, "environments"))
    for r in ("train", "watcher", "metrics"):
        assert not _reach(g, r) & ROLLOUT, (r, sorted(_reach(g, r) & ROLLOUT))
    assert "environments" in g["watcher"] and "environments" in g["sim"]


def test_one_episode_loop_below_every_rollout():
    """Issue 89: one lockstep loop. `lockstep` stands on the environments room alone (no simulator, no rollout room);
    every room that plays episodes (ALOHA's rollouts, gymnasium's, RL, expert iteration) plays them through it, and no
    other room keeps an episode loop of its own (a `while` over running episodes that calls an environment's step)."""
    g = imports()
    assert not _reach(g, "lockstep") & ROLLOUT, sorted(_reach(g, "lockstep") & ROLLOUT)
    assert "environments" in g["lockstep"]
    for r in ("sim", "envs", "rl", "iterate"):
        assert "lockstep" in g[r], (r, sorted(g[r]))
    own = []
    for p in sorted(PKG.glob("*.py")):
        if p.stem == "lockstep": continue
        for f in ast.walk(ast.parse(p.read_text())):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)): continue
            loops = [n for n in ast.walk(f) if isinstance(n, ast.While)]
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "step"
                   and "predict" in ast.unparse(f) for w in loops for c in ast.walk(w)):
                own.append(f"{p.stem}.{f.name}")
    assert not own, f"episode loops outside the lockstep room: {own}"


def test_the_environments_room_alone_tells_the_worlds_apart():
    """Issue 89: which world a name belongs to (ALOHA's simulator or gymnasium) is asked of the environments room's
    specs (`env_spec(task).gym`, `.scripted`, `.first_seed`, `.flag`), never by `is_env` outside it; and every function
    that plays episodes through the loop gets its environments from `make_env`, constructing none itself."""
    where, makers = [], []
    for p in sorted(PKG.glob("*.py")):
        if p.stem in ("_modidx", "environments"): continue
        tree = ast.parse(p.read_text())
        where += [f"{p.stem}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "is_env"
                  or isinstance(n, ast.alias) and n.name == "is_env"]
        for f in ast.walk(tree):
            if not isinstance(f, ast.FunctionDef) or "play_episodes(" not in ast.unparse(f): continue
            made = {c.func.id for c in ast.walk(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            makers += [f"{p.stem}.{f.name}: {m}" for m in made & {"AlohaSim", "GymStep", "GymEnv"}]
    assert not where, f"is_env outside the environments room: {where}"
    assert not makers, f"episodes played in environments made outside make_env: {makers}"


@pytest.mark.parametrize("strategy,nprocs", [("ddp", 1), ("fsdp", 1)])
def test_a_run_written_before_the_strategy_object_resumes(tmp_path, strategy, nprocs):
    "tests/data/runs_0.1.0 (its make.sh): written at 76abf79; resumed here, an fsdp one also at another world size."
    src = "ddp" if strategy == "ddp" else "fsdp"
    run = tmp_path / src
    shutil.copytree(ROOT / "tests" / "data" / "runs_0.1.0" / src, run)
    r = dpt("train", "--config", "test", "--data", ROOT / "data" / "tasks" / "beat_block_hammer.zarr", "--out", run,
            "--resume", "--nprocs", nprocs, "--no-progress", "training.max_steps=6", f"training.strategy={strategy}",
            "policy.down_dims=[16,32]", "policy.diffusion_step_embed_dim=16", "training.keep_checkpoints=1",
            timeout=300, check=0)
    assert "steps 4→6" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
    assert (run / "checkpoints" / "step_000006" / "model.safetensors").exists()


def test_no_library_room_starts_the_cli():
    """Issue 91: the CLI is a face. No room below it names `dptoolkit.cli` (a detached process starts its own room's
    entry point); only the CLI itself and `cluster` (its sbatch script runs a user's `-m dptoolkit.cli` command) may."""
    named = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("_modidx", "cli", "cluster")
                   and "dptoolkit.cli" in p.read_text())
    assert named == [], named
    assert {"import argparse"} >= {l.strip() for l in (PKG / "commands.py").read_text().splitlines()
                                   if l.startswith(("import ", "from ")) and "__future__" not in l}
