"""Three kinds of study, fabricated (no training), and the report sections that apply to each: the
starter study (`sweeps init`: BPE only, one seq_len and one batch), a quickstart-like search
(seq_len and batch searched, one point too big to launch) and a one-factor ``[ablation]`` with
three seeds (``tests.sweeps.ablation``). Read by the report's section test and its browser test.
"""

from __future__ import annotations

from tests.sweeps import fake_study
from tests.sweeps.ablation import FFN_WIDTH, store_ablation

#: The sections of each kind's report, in order: what applies to its data.
SECTIONS = {
    # one seq_len and batch: no memory map; one tokenizer, BPE: no <unk> panel (vocab_panels)
    "starter": [
        "pareto",
        "compute",
        "vocab",
        "memory_pred",
        "curves",
        "parallel",
        "importance",
        "samples",
        "timeline",
    ],
    "quickstart": [
        "pareto",
        "compute",
        "vocab",
        "memory_map",
        "memory_pred",
        "curves",
        "parallel",
        "importance",
        "samples",
        "timeline",
    ],
    # trials that recorded val_bpb only; one factor: nothing for importances to rank
    "ablation": ["effects", "forest", "parallel", "timeline"],
}
#: The study name of each kind.
NAMES = {"starter": "starter", "quickstart": "quickstart", "ablation": "ffn"}


def store(url: str, kind: str) -> str:
    """Write the study of ``kind`` to ``url``; its name."""
    if kind == "starter":  # sweeps.starter's [space] and [fixed]; the median pruner stops one
        fake_study.fabricate(
            url,
            "starter",
            6,
            seed=11,
            outcomes=("complete", "complete", "pruned", "complete", "complete", "complete"),
            space={"vocab_size": [512, 1024, 2048], "d_ff": [32, 128], "lr": [0.005, 0.01, 0.03]},
            fixed={"tokenizer": "bpe", "seq_len": 64, "batch_size": 8},
        )
    elif kind == "quickstart":  # studies/quickstart.toml's space; a batch of 512 never launches
        fake_study.fabricate(
            url,
            "quickstart",
            8,
            seed=12,
            outcomes=(
                "complete",
                "complete",
                "predicted_oom",
                "complete",
                "complete",
                "complete",
                "complete",
                "complete",
            ),
            space={
                "vocab_size": [512, 2048, 8192],
                "d_ff": [64, 256],
                "seq_len": [64, 128, 256],
                "batch_size": [4, 8, 512],
                "lr": [0.003, 0.01, 0.3],
            },
            fixed={"tokenizer": "bpe"},
        )
    else:
        store_ablation(url, "ffn", FFN_WIDTH)
    return NAMES[kind]
