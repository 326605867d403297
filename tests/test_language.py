"""Issue 80, the data half: instructions travel with the store (a LeRobot dataset's tasks in, merge keeps them, dpt
inspect lists them) and `dpt embed` encodes each distinct one once with a text encoder loaded by `transformers` (a tiny
random BERT built here stands for all-MiniLM-L6-v2: CI downloads no weights); bad input gets one line each."""
import json, re
from pathlib import Path

import numpy as np
import pytest
import zarr

pytest.importorskip("transformers", reason="text encoders load with transformers (pip install transformers)")

from conftest import dpt
from dptoolkit.language import (LanguageError, embed, embedded, episode_instructions, instruction_table, load_encoder,
                                held_out_instructions, set_held_out, set_instructions, tiny_encoder)
from dptoolkit.merge import merge
from dptoolkit.store import describe, sample_data

LEROBOT = Path(__file__).parent / "data" / "lerobot" / "written_by_lerobot"
WORDS = ["transfer the cube", "hand over the block", "pass the cube to the left arm"]


def test_a_lerobot_datasets_tasks_become_its_episodes_instructions(tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd
    from dptoolkit.convert import convert
    convert(LEROBOT, tmp_path / "lr.zarr", progress=False)
    tasks = pd.read_parquet(LEROBOT / "meta" / "tasks.parquet")          # what LeRobot's own code wrote
    by_index = {int(i): name for name, i in zip(tasks.index, tasks["task_index"])}
    eps = pd.read_parquet(sorted((LEROBOT / "data").rglob("*.parquet"))[0], columns=["episode_index", "task_index"])
    want = [[by_index[int(t)]] for t in eps.groupby("episode_index")["task_index"].first()]
    assert episode_instructions(tmp_path / "lr.zarr") == want and {w[0] for w in want} == set(by_index.values())


def test_instructions_go_out_to_lerobot_and_come_back(tmp_path):
    "`convert(to='lerobot')`: each episode's first instruction is its LeRobot task; converting back brings them in."
    pytest.importorskip("pyarrow")
    import pandas as pd
    st = sample_data(tmp_path / "d", tasks=1, episodes=3, seed=0)[0]
    set_instructions(st, [["transfer the cube", "pass it left"], "lift the cube", "transfer the cube"])
    from dptoolkit.convert import convert
    convert(st, tmp_path / "lr", to="lerobot", cameras=[], progress=False)     # the vectors: no video to encode
    tasks = pd.read_parquet(tmp_path / "lr" / "meta" / "tasks.parquet")
    assert list(tasks.index) == ["transfer the cube", "lift the cube"] and list(tasks.task_index) == [0, 1]
    convert(tmp_path / "lr", tmp_path / "back.zarr", progress=False)
    back = episode_instructions(tmp_path / "back.zarr")
    assert back == [["transfer the cube"], ["lift the cube"], ["transfer the cube"]]


def test_merge_keeps_instructions_and_dpt_embed_encodes_each_once(tmp_path):
    a, b = sample_data(tmp_path / "d", tasks=2, episodes=2, seed=0)
    set_instructions(a, [["transfer the cube", "pass the cube to the left arm"], "transfer the cube"])
    set_held_out(a, {"transfer_cube": ["let the left arm take it"]})
    set_held_out(b, {"transfer_cube": ["hand it off", "let the left arm take it"], "insertion": ["slot the peg in"]})
    m = merge([a, b], tmp_path / "m.zarr", progress=False).path                # b has none: empty lists
    assert episode_instructions(m) == [["transfer the cube", "pass the cube to the left arm"], ["transfer the cube"],
                                       [], []]
    assert held_out_instructions(m) == {"transfer_cube": ["let the left arm take it", "hand it off"],   # united
                                        "insertion": ["slot the peg in"]}
    enc = tiny_encoder(tmp_path / "enc", WORDS)
    r = dpt("embed", m, "--encoder", enc, check=0)
    assert "2 instruction(s) embedded with" in r.stdout, r.stdout
    r = dpt("embed", m, "--encoder", enc, check=0)
    assert "already embedded (nothing to do)" in r.stdout, r.stdout
    out = dpt("inspect", m, check=0).stdout
    assert "instructions: 2 distinct over 2 of 4 episodes; embedded with" in out and "2 × transfer the cube" in out
    E, per = instruction_table(m)
    assert E.shape == (2, 32) and per == [[0, 1], [0], [], []]
    np.testing.assert_allclose(E, load_encoder(enc).encode(["transfer the cube", "pass the cube to the left arm"])[0],
                               atol=1e-6)
    names = describe(m).task_names                 # both tasks told: dpt embed says how the held-out phrasings read
    set_instructions(m, [["transfer the cube", "pass the cube to the left arm"], ["transfer the cube"],
                         ["slot the peg in the socket"], ["insert the peg"]])
    set_held_out(m, {names[0]: ["pass the cube"], names[1]: ["insert the peg in the socket"]})
    out = dpt("embed", m, "--encoder", enc, check=0).stdout
    assert "4 instruction(s) embedded" in out, out
    lines = [ln for ln in out.splitlines() if "(held out for" in ln]
    assert len(lines) == 2 and re.search(rf"'pass the cube' \(held out for {names[0]}\): {names[0]} [01]\.\d\d",
                                         lines[0]), out


def test_bad_input_one_line_each(tmp_path):
    st = sample_data(tmp_path / "d", tasks=1, episodes=2, seed=0)[0]
    r = dpt("embed", st, "--encoder", tiny_encoder(tmp_path / "enc", WORDS), check=1)  # nothing to embed
    assert "no instructions to embed" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    set_instructions(st, ["transfer the cube", "hand over the block"])
    r = dpt("embed", st, "--encoder", tmp_path / "d", check=1)                         # a folder that is no encoder
    assert "not a text encoder folder (no config.json" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    with pytest.raises(LanguageError, match="run dpt embed .* --encoder NAME_OR_FOLDER first"):
        instruction_table(st)                                                         # instructions, no embeddings
    with pytest.raises(LanguageError, match="episode 1's instruction '' is not a non-empty string"):
        set_instructions(st, ["ok", ""])


def test_a_language_policy_trains_on_stored_embeddings_and_rolls_out_with_a_new_instruction(tmp_path):
    """policy.language=true: each window reads one of its episode's phrasings (their stored embeddings; no encoder in
    the loop), the run records its encoder, `dpt rollout --instruction` encodes a new one once with it (cached in the
    run folder); one line each for a store without embeddings, another encoder on resume, and an instruction given to
    a run that reads none."""
    pytest.importorskip("gym_pusht", reason="the rollout half plays PushT (pip install 'dptoolkit[sim]')")
    import shutil
    from omegaconf import OmegaConf
    from dptoolkit.config import for_store
    from dptoolkit.dataset import SequenceDataset
    from dptoolkit.policy import PolicyError
    from dptoolkit.train import train
    st = tmp_path / "p.zarr"
    shutil.copytree(Path(__file__).parent / "data" / "pusht" / "pusht_fixture.zarr", st)
    say = ["push the T onto the target", "slide the block into place"]
    set_instructions(st, [say, say[0], say[1]])
    tiny = ["policy.down_dims=[16,32]", "policy.diffusion_step_embed_dim=16", "policy.num_inference_steps=2",
            "dataloader.batch_size=16", "training.log_every=2", "policy.language=true"]
    with pytest.raises(PolicyError, match="instructions are not embedded: run dpt embed .* --encoder"):
        train(for_store(st, tiny + ["training.max_steps=2"]), nprocs=1, run_dir=tmp_path / "no", progress=False)
    assert not (tmp_path / "no").exists()
    enc = tiny_encoder(tmp_path / "enc", say + ["move the tee"])
    embed(st, enc, progress=False)
    ds = SequenceDataset(st, 16, 2, 1, 7, keys=["agent_pos"], views={"agent_pos": "state[0:2]"}, language=True)
    first = ds.window_instruction[np.searchsorted(ds.ends, ds.rows[:, 1], side="right") == 0]
    assert set(first.tolist()) == {0, 1}                        # episode 0's windows read both of its phrasings
    b = ds.__getitems__([0, 1])
    assert b["instruction"].shape == (2, 32)
    run = tmp_path / "run"
    train(for_store(st, tiny + ["training.max_steps=2"]), nprocs=1, run_dir=run, progress=False)
    p = OmegaConf.load(run / "config.yaml").policy
    assert p.language_dim == 32 and p.language_encoder.sha256 == load_encoder(enc).sha256
    r = dpt("rollout", run, "--instruction", "move the tee", "--episodes", 1, "--workers", 1, "--max-steps", 8,
            "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes_table"][0]["instruction"] == "move the tee"
    assert "move the tee" in json.loads((run / "instructions.json").read_text())[p.language_encoder.sha256]
    r = dpt("rollout", run, "--instruction", "   ", "--episodes", 1, check=1)          # issue 90: at the door
    assert "--instruction '   ' is empty" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = dpt("rollout", run, "--instruction", " ".join(["move the tee"] * 20), "--episodes", 1, "--workers", 1,
            "--max-steps", 8, "--json", check=0)
    assert "--instruction is 62 tokens;" in r.stderr and "reads its first 32, the rest is cut" in r.stderr, r.stderr
    embed(st, tiny_encoder(tmp_path / "enc16", say, dim=16), progress=False)           # another encoder, another width
    with pytest.raises(PolicyError, match="embedded by .*enc16 .16 values.; the run's policy learnt .*enc's .32 values"):
        train(for_store(st, tiny + ["training.max_steps=4"]), nprocs=1, run_dir=run, resume=True, progress=False)
    plain = tmp_path / "plain"
    train(for_store(st, tiny[:-1] + ["training.max_steps=2"]), nprocs=1, run_dir=plain, progress=False)
    r = dpt("rollout", plain, "--instruction", "move the tee", "--episodes", 1, check=1)
    assert "this policy reads no instruction (it was trained with policy.language=false)" in r.stderr, r.stderr


def test_a_rollout_in_a_task_is_told_that_tasks_instruction(tmp_path, capsys):
    """Without --instruction, a language policy of a multi-task store is told the most used instruction of the task it
    plays (the watcher's, a study's and `dpt rollout --task-name`'s rollouts), not the store's most used one; a new
    instruction that reads as another task than the one played is said, with a warning, before any episode."""
    from dptoolkit.config import for_store
    from dptoolkit.evaluate import load_policy
    from dptoolkit.sim import run_instruction
    from dptoolkit.train import train
    a, b = sample_data(tmp_path / "d", tasks=2, episodes=2, seed=0)
    set_instructions(a, ["transfer the cube", "transfer the cube"])
    set_instructions(b, ["hand over the block", "hand over the block"])
    m = merge([a, b], tmp_path / "m.zarr", progress=False)
    embed(m.path, tiny_encoder(tmp_path / "enc", WORDS), progress=False)
    run = train(for_store(m.path, name="test", overrides=["policy.language=true", "training.max_steps=2",
                                                          "policy.down_dims=[16,32]", "dataloader.batch_size=8"]),
                nprocs=1, run_dir=tmp_path / "run", progress=False).run_dir
    pol = load_policy(run)[0]
    said = {t: run_instruction(run, pol, None, "run", t)[0] for t in m.task_names}
    assert said == dict(zip(m.task_names, ["transfer the cube", "hand over the block"])), said
    assert run_instruction(run, pol, None, "run", "gym_pusht/PushT-v0")[0] in WORDS    # a task the store does not name
    said = run_instruction(run, pol, "pass the cube to the left arm", "run", m.task_names[0])   # issue 90: a new
    err = capsys.readouterr().err                                                    # one's reading, before it plays
    assert said[0] == "pass the cube to the left arm" and "--instruction 'pass the cube to the left arm' reads as" in err
    assert (run / "instructions.json").exists()                                      # encoded once, kept
    E, _ = instruction_table(m.path)               # one of the store's own: its stored embedding, as trained, no
    said, v = run_instruction(run, pol, "transfer the cube", "run", m.task_names[0])   # encoder loaded, no word
    assert np.array_equal(v, E[embedded(m.path)["instructions"].index("transfer the cube")])
    assert capsys.readouterr().err == ""
    said = run_instruction(run, pol, "hand over the block", "run", m.task_names[0])   # another task's, said here:
    err = capsys.readouterr().err                                                     # the warning, before it plays
    assert f"'hand over the block' is the store's instruction of {m.task_names[1]}; warning: this rollout plays " \
           f"{m.task_names[0]}, and the policy will likely act on it as {m.task_names[1]}" in err, err
    kept = json.loads((run / "instructions.json").read_text())                         # the run keeps only the new
    assert [sorted(v) for v in kept.values()] == [["pass the cube to the left arm"]], kept


def test_a_transformer_attends_to_the_instructions_tokens(tmp_path):
    """policy.language_tokens=true: the windows carry each instruction's packed token embeddings, the transformer
    denoiser attends to them, the run records how many, and `dpt rollout --instruction` encodes a new one as tokens
    (cached apart from pooled embeddings); a U-Net asked to attend is refused in one line before a folder is made."""
    pytest.importorskip("gym_pusht", reason="the rollout half plays PushT (pip install 'dptoolkit[sim]')")
    import shutil
    from omegaconf import OmegaConf
    from dptoolkit.config import for_store
    from dptoolkit.evaluate import load_policy
    from dptoolkit.policy import PolicyError
    from dptoolkit.sim import run_instruction
    from dptoolkit.train import train
    st = tmp_path / "p.zarr"
    shutil.copytree(Path(__file__).parent / "data" / "pusht" / "pusht_fixture.zarr", st)
    say = ["push the T onto the target", "slide the block into place"]
    set_instructions(st, [say, say[0], say[1]])
    enc = tiny_encoder(tmp_path / "enc", say + ["move the tee"], dim=16)
    embed(st, enc, progress=False)
    tiny = ["policy.num_inference_steps=2", "dataloader.batch_size=8", "training.max_steps=2", "policy.language=true",
            "policy.language_tokens=true"]
    with pytest.raises(PolicyError, match="the U-Net has no attention to read an instruction's tokens with"):
        train(for_store(st, tiny), nprocs=1, run_dir=tmp_path / "unet", progress=False)
    assert not (tmp_path / "unet").exists()
    run = tmp_path / "run"
    train(for_store(st, tiny + ["policy.denoiser=transformer", "policy.transformer.n_layer=1",
                                "policy.transformer.n_emb=32", "policy.transformer.n_head=2"]),
          nprocs=1, run_dir=run, progress=False)
    p = OmegaConf.load(run / "config.yaml").policy
    assert (p.language_dim, p.language_max_tokens) == (16, 32)
    pol = load_policy(run)[0]
    assert pol.model.lang.n_tokens == 32 and pol.language_proj is None
    said, packed = run_instruction(run, pol, None, "run")                     # the store's, from the stored tokens
    assert said in say and packed.shape == (32 * 17,)
    assert packed.reshape(32, 17)[:, -1].sum() == load_encoder(enc).encode([said])[2].sum()   # its real tokens
    r = dpt("rollout", run, "--instruction", "move the tee", "--episodes", 1, "--workers", 1, "--max-steps", 8,
            "--json", check=0)
    assert json.loads(r.stdout)[0]["episodes_table"][0]["instruction"] == "move the tee"
    cached = json.loads((run / "instructions.json").read_text())[f"{p.language_encoder.sha256}+tokens32"]
    assert len(cached["move the tee"]) == 32 * 17


def test_an_encoder_decoder_models_encoder_embeds_a_store(tmp_path):
    """Issue 90: RDT's family: a T5 folder (a one-layer random T5 made with save_pretrained; CI downloads no weights)
    loads through load_encoder as its encoder alone, and `dpt embed` writes its pooled and token embeddings."""
    import shutil
    st = tmp_path / "p.zarr"
    shutil.copytree(Path(__file__).parent / "data" / "pusht" / "pusht_fixture.zarr", st)
    say = ["push the T onto the target", "slide the block into place"]
    set_instructions(st, [say[0], say[1], say[0]])
    enc = tiny_encoder(tmp_path / "t5", say, dim=24, arch="t5")
    r = dpt("embed", st, "--encoder", enc, check=0)
    rec = embedded(st)
    assert rec["dim"] == 24 and rec["sha256"] == load_encoder(enc).sha256, (rec, r.stdout)
    E = np.asarray(zarr.open_group(str(st), mode="r")["meta/instruction_embedding"][:])
    assert E.shape == (2, 24) and np.isfinite(E).all() and not np.allclose(E[0], E[1])
