"""Does a prompt template around each instruction fix MiniLM's misreading of an unseen phrasing, and could one be chosen
without looking at the unseen phrasings? (issue 80, fourteenth session)

For each template ("{}" is the instruction as stored), the two same-scene tasks' seen phrasings (`sim.PHRASINGS`, five a
task) are embedded with the template by the encoder, and a linear readout trained on them with the policies' language
noise (as `language.instruction_reading`: σ 0.05 on the unit-length embeddings, five fits averaged) gives each phrasing
the probability of its own task:
- LOO: each seen phrasing read by a readout of the other nine (what a template could be chosen by, fairly);
- unseen: the three held-out phrasings a task read by the readout of all ten (what the policy meets).
Printed: the minimum and the mean of each. A template is only worth using if the LOO column would have chosen it.
Usage: python bench/language_templates.py --encoder FOLDER (all-MiniLM-L6-v2 unpacked: bench/language.py's `minilm`)
"""
import argparse

import numpy as np

TEMPLATES = ["{}", "{}.", "query: {}", "passage: {}", "Task: {}", "Instruction: {}.", "robot task: {}",
             "The robot should {}.", "a robot arm will {}", "instruction for a two-armed robot: {}"]
TASKS = ["transfer_cube", "lift_cube"]


def readout(X, y, noise=0.05, fits=5, steps=300):
    "The readout of `instruction_reading`, on (N, D) embeddings and labels → a function giving P(task) per row."
    import torch
    import torch.nn.functional as F
    X, y, k = X.repeat(20, 1), y.repeat(20), int(y.max()) + 1
    g = torch.Generator().manual_seed(0)
    W = (torch.randn(fits, X.shape[1], k, generator=g) * 0.01).requires_grad_()
    b = torch.zeros(fits, 1, k, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=1e-2)
    for _ in range(steps):
        x = F.normalize(X + noise * torch.randn((fits, *X.shape), generator=g), dim=-1)
        loss = F.cross_entropy((x @ W + b).reshape(-1, k), y.repeat(fits))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return lambda U: torch.softmax(U @ W + b, -1).mean(0).detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoder", required=True)
    a = ap.parse_args()
    import torch
    from dptoolkit.language import load_encoder
    from dptoolkit.sim import PHRASINGS
    torch.set_num_threads(1)
    enc = load_encoder(a.encoder)
    seen = [(p, i) for i, t in enumerate(TASKS) for p in PHRASINGS[t][0]]
    unseen = [(p, i) for i, t in enumerate(TASKS) for p in PHRASINGS[t][1]]
    y, yu = torch.tensor([i for _, i in seen]), [i for _, i in unseen]
    print(f"{'template':42s} {'LOO min':>8s} {'LOO mean':>9s} {'unseen min':>11s} {'unseen mean':>12s}  unseen, each")
    for tmpl in TEMPLATES:
        X = torch.as_tensor(enc.encode([tmpl.format(p) for p, _ in seen])[0])
        U = torch.as_tensor(enc.encode([tmpl.format(p) for p, _ in unseen])[0])
        loo = [float(readout(X[torch.arange(len(X)) != k], y[torch.arange(len(X)) != k])(X[k:k + 1])[0, y[k]])
               for k in range(len(X))]
        P = readout(X, y)(U)
        un = [float(P[k, i]) for k, i in enumerate(yu)]
        print(f"{tmpl!r:42s} {min(loo):8.2f} {np.mean(loo):9.3f} {min(un):11.2f} {np.mean(un):12.3f}  "
              + " ".join(f"{x:.2f}" for x in un), flush=True)
    print("unseen, in order:", [p for p, _ in unseen])


if __name__ == "__main__":
    main()
