"""lm: one small GPT training run, end to end (corpus, tokenizers, token cache, model, training).

Knows nothing of Optuna; the sweeps package drives it.
"""
