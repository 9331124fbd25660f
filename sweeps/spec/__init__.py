"""Study specs: one TOML file -> a validated, frozen ``StudySpec``.

A spec says what to search (``[space]``, ``[ablation]``, ``[scaling]``, ``[transfer]``,
``[[enqueue]]``), what is
held constant (``[fixed]``), on which data (``[corpus]``), how to judge and stop trials
(``[study]``, ``[limits]``). Everything a user can get wrong is caught here, before a database row
or a run directory exists, with a one-line ``SweepsError`` that names the file, the key and the
value:

    studies/vocab.toml: space.d_ff.low: must be <= high, got low=512, high=64; swap them

Field names are ``lm.config.TrainConfig``'s, so a spec, a CLI flag and a ``config.json`` agree.
The package is split by concern:

- ``values``: the vocabulary (metric, sampler and pruner names, ...) and value helpers;
- ``types``: the frozen dataclasses (``StudySpec``, ``Limits``, ``ParamSpec``, ...), each checking
  its own rules in ``__post_init__``, so every way of building one is safe;
- ``rules``: the rules between sections, which ``StudySpec`` checks on itself, and ``halving``:
  the rungs of successive halving and Hyperband (``sweeps.fidelity`` ranks trials at them);
- ``reader``: the TOML layout (``load_spec``, ``read_spec``), driven by the types' fields; the
  only builder of a ``StudySpec`` from data;
- ``walk``: the suggestion order of a conditional space and the one walk over it that honours
  ``when`` conditions (a trial's draw, the grid, a warm start, an enqueued config);
- ``checks``: the cross-checks that build real ``TrainConfig`` objects (fixed values alone, then
  each bound of each searched field, each enqueued config, each ablation point), so a spec that
  could only produce invalid configs fails now, not after an hour of trials.

``[scaling]`` is an IsoFLOP grid (``Scaling``): ``budgets`` (training FLOPs, finite, > 0, each
once) x ``sizes`` (tables of ``SIZE_FIELDS``, every size the same keys, each a valid config with
``[fixed]``) x optional ``seeds``. Each cell is one enqueued trial, like an ablation's point
(``StudySpec.design`` serves both): its parameters are ``flops_budget``, the size fields,
``max_tokens = budget_tokens(cfg, budget)`` (whole optimizer steps nearest to the budget, by
``lm.flops``) and ``seed``. ``flops_budget`` is no config field (``StudySpec.trial_values`` drops
it); the runner records it as the trial's ``flops_budget`` attribute, which the IsoFLOP fit
(``sweeps.scaling``) groups by. A grid excludes ``[space]``, ``[ablation]``, ``[[enqueue]]``, a
sampler (its trials are enqueued), a pruner (a stopped cell has no loss at its budget), more
``n_trials`` than cells, and ``[fixed]`` values of what it sets (``max_tokens``, the size
fields, ``seed`` with ``seeds``). Example::

    [scaling]
    budgets = [4e11, 1.2e12, 3.6e12]
    sizes = [{d_model = 32, n_layers = 1, n_heads = 2, d_ff = 128},
             {d_model = 64, n_layers = 2, n_heads = 4, d_ff = 256}]
    seeds = [0, 1]

``[transfer]`` is a learning-rate transfer study (``Transfer``): ``widths`` (``d_model``,
increasing) x ``parametrizations`` (``sp``, ``mup``) x ``lrs`` (three or more, increasing) x
optional ``seeds``, each one enqueued trial with parameters ``parametrization``, ``d_model``,
``n_heads = width / d_head``, ``d_ff`` (the reference ``d_ff / d_model`` kept), ``base_width``
(given, else the narrowest width) and ``lr``. ``d_head`` is the table's, else ``[fixed]``'s
``d_model / n_heads``. It excludes what a grid excludes, and ``[fixed]`` values of ``lr``,
``parametrization``, ``base_width`` (and ``seed`` with ``seeds``); ``sweeps.transfer`` fits the
optimum per width and its drift. Example::

    [transfer]
    widths = [32, 64, 128]
    lrs = [0.001, 0.002, 0.004, 0.008]
    seeds = [0, 1]

Conditions (``when = "tokenizer == 'word'"``) are ``sweeps.conditions``: parsed with ``ast`` into
a tiny expression language and evaluated by walking the tree, never ``eval``.

Example::

    [study]
    name = "vocab"
    objectives = ["val_bpb", {metric = "peak_mem", direction = "minimize"}]
    sampler = "nsga2"
    seed = 0
    n_trials = 12

    [corpus]
    source = "../../shared/data/stackexchange/history.Posts.xml"   # relative to this file
    out = "../corpora/history"

    [fixed]
    d_model = 64
    max_tokens = 200_000

    [space.tokenizer]
    choices = ["word", "bpe"]

    [space.vocab_size]
    type = "int"
    low = 512
    high = 8192
    log = true

    [limits]
    memory_budget = "4GiB"
    collapse = {min_unigram_gap = 0.0, min_steps = 200}
"""

from sweeps.conditions import Condition, parse_condition
from sweeps.spec.designs import Ablation, Scaling, Transfer, budget_tokens
from sweeps.spec.limits import CollapseLimits, DivergenceLimits, Limits
from sweeps.spec.reader import load_spec, read_spec
from sweeps.spec.types import (
    CorpusSpec,
    Objective,
    ParamSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
    StudySpec,
)
from sweeps.spec.values import (
    DEFAULT_OBJECTIVES,
    FIDELITY_PRUNERS,
    FLOPS_BUDGET,
    GRID_SAMPLERS,
    MAX_GRID_POINTS,
    METRICS,
    OOM_POLICIES,
    PARAM_TYPES,
    PRUNERS,
    SAMPLERS,
    SIZE_FIELDS,
    objective_names,
    parse_bytes,
    shown_values,
)
from sweeps.spec.walk import iter_grid, walk_one, walk_space

__all__ = [
    "DEFAULT_OBJECTIVES",
    "FIDELITY_PRUNERS",
    "FLOPS_BUDGET",
    "GRID_SAMPLERS",
    "MAX_GRID_POINTS",
    "METRICS",
    "OOM_POLICIES",
    "PARAM_TYPES",
    "PRUNERS",
    "SAMPLERS",
    "SIZE_FIELDS",
    "Ablation",
    "CollapseLimits",
    "Condition",
    "CorpusSpec",
    "DivergenceLimits",
    "Limits",
    "Objective",
    "ParamSpec",
    "PrunerSpec",
    "SamplerSpec",
    "Scaling",
    "StudySection",
    "StudySpec",
    "Transfer",
    "budget_tokens",
    "iter_grid",
    "load_spec",
    "objective_names",
    "parse_bytes",
    "parse_condition",
    "read_spec",
    "shown_values",
    "walk_one",
    "walk_space",
]
