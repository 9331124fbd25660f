"""The starter spec ``sweeps init`` writes: a complete, commented study that runs as it is on a
laptop CPU (the README's first screen shows the same text; ``tests/sweeps/test_starter.py``
checks both, and that it passes ``sweeps run --dry-run``)."""

from __future__ import annotations

#: Six trials on a synthetic corpus in a couple of minutes on 2 cores. 8 x 64 = 512 tokens per
#: optimizer step, so 120,000 tokens are 235 steps: past the collapse rule's 200-step minimum,
#: and the smallest lr, 0.005, sums to 0.64 over them, past its min_lr_sum of 0.5 (0.003 would
#: not: 0.39), so every trial is judged (a shorter budget or a smaller lr runs unjudged, marked
#: under_trained).
STARTER_SPEC = """\
# A study: 6 trials on a synthetic corpus, on the CPU, in a few minutes.
[study]
name = "starter"                 # its name in the database (sweeps.db here)
objectives = ["val_bpb"]         # validation bits per byte, comparable across vocabularies
sampler = "tpe"                  # the default; gp, random, qmc, grid, nsga2 also work
pruner = "median"                # the default: stop a trial trailing the others' median
n_trials = 6

[corpus]                         # or dir = "data/mine", from `sweeps prepare`
synthetic = { size = "1MB", seed = 0 }
out = "data/starter"             # prepared once, relative to this file

[fixed]                          # the same for every trial
device = "cpu"
tokenizer = "bpe"
d_model = 32
n_layers = 2
n_heads = 2
seq_len = 64
batch_size = 8
max_tokens = 120_000             # 235 optimizer steps of 8 x 64 tokens
warmup_tokens = 6_000            # below max_tokens, or the whole run is warm-up
eval_every_tokens = 30_000       # 4 evaluations: a learning curve the pruner reads
eval_tokens = 8_192

[space]                          # what the sampler picks for each trial
vocab_size = [512, 1024, 2048]
d_ff = [32, 128]
lr = [0.005, 0.01, 0.03]

[limits]
memory_budget = "1GiB"           # a trial predicted above it is never launched
max_wall_s = 300                 # per trial
"""
