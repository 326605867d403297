"""Does a prompt template around each instruction fix MiniLM's misreading of an unseen phrasing, and could one be chosen
without looking at the unseen phrasings? (issue 80, fourteenth session)

For each template ("{}" is the instruction as stored), the two same-scene tasks' seen phrasings (`aloha.PHRASINGS`, five a
task) are embedded with the template by the encoder, and a linear readout trained on them with the policies' language
noise (as `language.instruction_reading`: σ 0.05 on the unit-length embeddings, five fits averaged) gives each phrasing
the probability of its own task (`language.linear_readout`, what `instruction_reading` uses):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoder", required=True)
    a = ap.parse_args()
    import torch
    from dptoolkit.language import linear_readout, load_encoder
    from dptoolkit.aloha import PHRASINGS
    torch.set_num_threads(1)
    enc = load_encoder(a.encoder)
    seen = [(p, i) for i, t in enumerate(TASKS) for p in PHRASINGS[t][0]]
    unseen = [(p, i) for i, t in enumerate(TASKS) for p in PHRASINGS[t][1]]
    y, yu = torch.tensor([i for _, i in seen]), [i for _, i in unseen]
    readout = lambda X, y: linear_readout(X, y, len(TASKS))
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
