"""Study specs: a valid spec's meaning, and one-line errors naming the key for malformed ones."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps.spec import (
    ParamSpec,
    StudySpec,
    iter_grid,
    load_spec,
    parse_bytes,
    parse_condition,
    read_spec,
    walk_one,
    walk_space,
)

REPO = Path(__file__).resolve().parents[2]
STUDIES = REPO / "studies"
SHARED = REPO.parent / "shared/data/stackexchange"


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    path.mkdir()
    return path


def base(corpus_dir: Path) -> dict[str, Any]:
    """A small valid spec as TOML would parse it."""
    return {
        "study": {"name": "t", "n_trials": 5, "seed": 0},
        "corpus": {"dir": str(corpus_dir)},
        "fixed": {"d_model": 64, "n_heads": 4, "max_tokens": 10_000},
        "space": {
            "tokenizer": {"type": "categorical", "choices": ["word", "bpe"]},
            "lowercase": {"choices": [False, True], "when": "tokenizer == 'word'"},
            "vocab_size": {"type": "int", "low": 512, "high": 4096, "log": True},
            "d_ff": {"type": "int", "low": 64, "high": 256, "step": 64},
            "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
        },
        "limits": {"memory_budget": "2GiB"},
    }


def parse(data: dict[str, Any], **kwargs: Any) -> StudySpec:
    return read_spec(data, source="spec.toml", **kwargs)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- a valid spec --------------------------------------------------------------------------------


def test_valid_spec_defaults_and_order(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    # The condition's input listed after the parameter it guards: the order must be fixed.
    data["space"] = {"lowercase": data["space"].pop("lowercase"), **data["space"]}
    spec = parse(data)
    names = [p.name for p in spec.space]
    assert names.index("tokenizer") < names.index("lowercase")
    assert spec.study.objectives[0].metric == "val_bpb"
    assert spec.study.directions == ["minimize"]
    assert spec.study.sampler.name == "tpe"
    assert spec.study.pruner.name == "median"
    assert spec.limits.memory_budget == 2 * 2**30
    assert spec.limits.oom_policy == "prune"
    assert spec.limits.collapse.enabled and spec.limits.collapse.min_steps == 200
    assert spec.corpus.dir == corpus_dir and not spec.corpus.needs_prepare
    assert spec.param("vocab_size").log
    base_values = spec.base_values()
    assert base_values["corpus"] == str(corpus_dir) and base_values["d_model"] == 64


def test_multi_objective_defaults(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["study"]["objectives"] = ["val_bpb", {"metric": "peak_mem"}, {"metric": "tokens_per_s"}]
    spec = parse(data)
    assert spec.study.metrics == ["val_bpb", "peak_mem", "tokens_per_s"]
    assert spec.study.directions == ["minimize", "minimize", "maximize"]
    assert spec.study.multi_objective
    assert spec.study.sampler.name == "nsga2"
    assert spec.study.pruner.name == "none"


def test_objective_direction_override_and_tables(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["study"]["objectives"] = [{"metric": "params", "direction": "maximize"}]
    data["study"]["sampler"] = {"name": "tpe", "n_startup_trials": 3, "multivariate": False}
    data["study"]["pruner"] = {"name": "hyperband", "min_tokens": 4000, "reduction_factor": 4}
    data["fixed"]["eval_every_tokens"] = 2000
    spec = parse(data)
    assert spec.study.directions == ["maximize"]
    assert spec.study.sampler.n_startup_trials == 3 and not spec.study.sampler.multivariate
    assert spec.study.pruner.name == "hyperband" and spec.study.pruner.min_tokens == 4000


def test_load_spec_resolves_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "studies").mkdir()
    (tmp_path / "data" / "Posts.xml").write_text("<posts/>")
    spec_path = write(
        tmp_path / "studies" / "s.toml",
        """
[study]
name = "s"
n_trials = 2
[corpus]
source = "../data/Posts.xml"
out = "../data/corpus"
[space.d_ff]
choices = [64, 128]
[limits]
memory_budget = "auto"
""",
    )
    spec = load_spec(spec_path)
    assert spec.corpus.dir == tmp_path / "data" / "corpus"
    assert spec.corpus.source == (str(tmp_path / "data" / "Posts.xml"),)
    assert spec.corpus.needs_prepare and spec.corpus.format == "posts"
    assert spec.limits.memory_budget == "auto"
    assert spec.source == spec_path


def test_synthetic_corpus(corpus_dir: Path, tmp_path: Path) -> None:
    data = base(corpus_dir)
    data["corpus"] = {"synthetic": {"size": "512KiB", "seed": 3}, "out": str(tmp_path / "syn")}
    spec = parse(data)
    assert spec.corpus.synthetic_size == 512 * 1024 and spec.corpus.synthetic_seed == 3
    assert spec.corpus.dir == tmp_path / "syn" and spec.corpus.needs_prepare


def test_to_dict_round_trips(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["study"]["storage"] = "postgresql://u:secret@db/sweeps"
    spec = parse(data)
    assert spec.study.storage == "postgresql://u:secret@db/sweeps"
    stored = spec.to_dict()
    assert "secret" not in repr(stored)  # the copy kept in the database holds no password
    again = read_spec(stored, check_paths=False)
    assert again.study == dataclasses.replace(spec.study, storage=None)
    assert again.space == spec.space
    assert again.fixed == spec.fixed
    assert again.corpus == spec.corpus


def test_space_shorthand_list_is_categorical(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["space"] = {"d_ff": [64, 128, 256]}
    spec = parse(data)
    assert spec.space[0].type == "categorical" and spec.space[0].choices == (64, 128, 256)


def test_shipped_studies_parse() -> None:
    paths = sorted(STUDIES.glob("*.toml"))
    assert any(p.name == "vocab.toml" for p in paths)
    for path in paths:
        spec = load_spec(path, check_paths=False)
        assert spec.study.n_trials >= 1
        for params in spec.initial_trials()[:3]:
            TrainConfig.from_dict(spec.trial_values(params))


def test_vocab_study_searches_tokenizer_vocab_and_batch_shape() -> None:
    spec = load_spec(STUDIES / "vocab.toml", check_paths=False)
    names = {p.name for p in spec.space}
    assert {"tokenizer", "vocab_size", "d_ff", "seq_len", "batch_size", "grad_accum"} <= names
    assert set(spec.param("tokenizer").choices) == {"word", "bpe"}
    assert spec.fixed["device"] == "cpu"
    assert spec.study.n_trials >= 10


def test_vocab_study_points_at_the_real_dump() -> None:
    if not (SHARED / "history.Posts.xml").exists():
        pytest.skip(f"real Stack Exchange dumps not found at {SHARED}")
    spec = load_spec(STUDIES / "vocab.toml")
    assert Path(spec.corpus.source[0]).resolve() == (SHARED / "history.Posts.xml").resolve()


# --- ablation, enqueue, grid ---------------------------------------------------------------------


def ablation_spec(corpus_dir: Path, **ablation: Any) -> StudySpec:
    data = base(corpus_dir)
    del data["space"]
    data["study"].pop("n_trials")
    data["ablation"] = {
        "baseline": {"d_ff": 256, "tokenizer": "bpe", "vocab_size": 1024},
        "vary": {"d_ff": [1, 64, 256, 1024], "tokenizer": ["word"]},
        **ablation,
    }
    return parse(data)


def test_ablation_expands_one_factor_at_a_time_per_seed(corpus_dir: Path) -> None:
    spec = ablation_spec(corpus_dir, seeds=[0, 1, 2])
    trials = spec.initial_trials()
    # baseline + 3 d_ff values (256 is the baseline's) + 1 tokenizer, each for 3 seeds
    assert len(trials) == 5 * 3 == spec.study.n_trials
    assert trials[0] == {"d_ff": 256, "tokenizer": "bpe", "seed": 0}
    assert [t["seed"] for t in trials] == [0] * 5 + [1] * 5 + [2] * 5
    for t in trials:
        changed = [k for k in ("d_ff", "tokenizer") if t[k] != {"d_ff": 256, "tokenizer": "bpe"}[k]]
        assert len(changed) <= 1
    assert {t["d_ff"] for t in trials} == {1, 64, 256, 1024}
    assert spec.ablation.choices("d_ff") == (256, 1, 64, 1024)
    assert spec.study.sampler.name == "random"
    assert spec.param_names == ["d_ff", "tokenizer", "seed"]
    cfg = TrainConfig.from_dict({**spec.base_values(), **trials[1]})
    assert cfg.d_ff == 1 and cfg.vocab_size == 1024 and cfg.d_model == 64


def test_ablation_without_seeds(corpus_dir: Path) -> None:
    spec = ablation_spec(corpus_dir)
    assert len(spec.initial_trials()) == 5
    assert "seed" not in spec.initial_trials()[0]


def test_enqueue_configs(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["enqueue"] = [
        {"tokenizer": "bpe", "vocab_size": 1024, "d_ff": 128},
        {"tokenizer": "word", "lowercase": True},
    ]
    spec = parse(data)
    assert spec.initial_trials() == data["enqueue"]


def test_enqueue_values_must_be_in_the_space(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    del data["space"]
    data["study"].pop("n_trials")
    data["space"] = {"d_ff": {"choices": [64, 128]}}
    data["enqueue"] = [{"d_ff": 64}, {"d_ff": 128}]
    data["study"]["n_trials"] = 2
    assert parse(data).study.n_trials == 2


def test_an_enqueued_value_needs_its_condition_to_hold(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["enqueue"] = [
        {"tokenizer": "word", "lowercase": True},
        {"tokenizer": "bpe", "lowercase": True},
    ]
    with pytest.raises(
        SweepsError,
        match=r"^spec.toml: enqueue\[1\].lowercase: set, but its "
        r"condition \"tokenizer == 'word'\" does not hold; remove it$",
    ):
        parse(data)


def test_grid_n_trials_defaults_to_the_conditional_grid_size(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["study"].pop("n_trials")
    data["study"]["sampler"] = "bruteforce"
    data["space"] = {
        "tokenizer": {"choices": ["word", "bpe"]},
        "lowercase": {"choices": [False, True], "when": "tokenizer == 'word'"},
        "d_ff": {"type": "int", "low": 64, "high": 256, "step": 64},
    }
    spec = parse(data)
    # word x 2 lowercase x 4 d_ff + bpe x 4 d_ff
    assert spec.study.n_trials == 12
    points = list(iter_grid(spec.space, spec.base_values()))
    assert len(points) == 12
    assert len({tuple(sorted(p.items())) for p in points}) == 12
    assert all(("lowercase" in p) == (p["tokenizer"] == "word") for p in points)


def test_one_walk_asks_only_for_the_parameters_whose_conditions_hold(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["space"] = {
        "tokenizer": {"choices": ["word", "bpe"]},
        "lowercase": {"choices": [False, True], "when": "tokenizer == 'word'"},
    }
    spec = parse(data)
    asked: list[str] = []

    def pick(tokenizer: str) -> Callable[[ParamSpec], Any]:
        def value(p: ParamSpec) -> Any:
            asked.append(p.name)
            return tokenizer if p.name == "tokenizer" else True

        return value

    assert walk_one(spec.space, spec.base_values(), pick("bpe")) == {"tokenizer": "bpe"}
    assert asked == ["tokenizer"]
    point = walk_one(spec.space, spec.base_values(), pick("word"))
    assert point == {"tokenizer": "word", "lowercase": True}
    # A walk that stops on a parameter (no values) yields no point.
    assert list(walk_space(spec.space, spec.base_values(), lambda p: ())) == []


# --- conditions ----------------------------------------------------------------------------------


def test_condition_language() -> None:
    cond = parse_condition("tokenizer == 'word' and (vocab_size > 1000 or lowercase)")
    assert cond.fields == {"tokenizer", "vocab_size", "lowercase"}
    assert cond.holds({"tokenizer": "word", "vocab_size": 2000, "lowercase": False})
    assert cond.holds({"tokenizer": "word", "vocab_size": 500, "lowercase": True})
    assert not cond.holds({"tokenizer": "bpe", "vocab_size": 2000, "lowercase": True})
    assert parse_condition("seq_len in [128, 256]").holds({"seq_len": 256})
    assert parse_condition("seq_len not in (128, 256)").holds({"seq_len": 64})
    assert parse_condition("64 <= d_ff < 512").holds({"d_ff": 64})
    assert not parse_condition("not checkpointing").holds({"checkpointing": True})
    assert parse_condition("tie_weights == true").holds({"tie_weights": True})
    assert parse_condition("max_wall_s == none").holds({"max_wall_s": None})
    assert parse_condition("dropout > -1").holds({"dropout": 0.0})


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch /tmp/pwned')",
        "tokenizer.upper() == 'WORD'",
        "[x for x in (1, 2)]",
        "lambda: 1",
        "tokenizer if d_ff else seq_len",
        "d_ff + 1 > 2",
        "tokenizer[0] == 'w'",
        "tokenizer is 'word'",
    ],
)
def test_conditions_never_run_code(text: str) -> None:
    with pytest.raises(SweepsError) as err:
        parse_condition(text)
    assert "\n" not in str(err.value)


def test_condition_type_mismatch_is_an_error() -> None:
    with pytest.raises(SweepsError, match="cannot be evaluated"):
        parse_condition("max_wall_s > 3").holds({"max_wall_s": None})


def test_parse_bytes() -> None:
    assert parse_bytes("8GiB") == 8 * 2**30
    assert parse_bytes("512MB") == 512 * 10**6
    assert parse_bytes("1.5 GiB") == int(1.5 * 2**30)
    assert parse_bytes("100") == 100
    assert parse_bytes(4096) == 4096
    assert parse_bytes("2k") == 2000
    for bad in ("", "8 gigs", "-1", 0, True, 1.5, "GiB"):
        with pytest.raises(SweepsError, match="memory_budget"):
            parse_bytes(bad)


# --- malformed specs: one line, naming the key ---------------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = d
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return mutate


def _del(path: str) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = d
        for p in parents:
            node = node[p]
        del node[last]

    return mutate


def _all(*mutations: Mutation) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        for m in mutations:
            m(d)

    return mutate


MALFORMED: list[tuple[str, Mutation, list[str]]] = [
    ("unknown top-level table", _set("stduy", {"name": "x"}), ["stduy", "top level"]),
    ("unknown study key", _set("study.n_trial", 5), ["study.n_trial", "n_trials"]),
    ("unknown param key", _set("space.d_ff.lwo", 1), ["space.d_ff.lwo"]),
    ("unknown limits key", _set("limits.max_wal_s", 3), ["limits.max_wal_s"]),
    (
        "unknown collapse key",
        _set("limits.collapse", {"min_gap": 0.1}),
        ["limits.collapse.min_gap"],
    ),
    ("wrong type n_trials", _set("study.n_trials", "ten"), ["study.n_trials", "'ten'"]),
    ("wrong type log", _set("space.vocab_size.log", "yes"), ["space.vocab_size.log"]),
    ("int type with float low", _set("space.d_ff.low", 64.5), ["space.d_ff.low"]),
    ("choices not a list", _set("space.tokenizer.choices", "word"), ["space.tokenizer.choices"]),
    ("empty space", _del("space"), ["space", "nothing to search"]),
    (
        "low > high",
        _all(_set("space.d_ff.low", 512), _set("space.d_ff.high", 64), _del("space.d_ff.step")),
        ["space.d_ff.low", "512", "64"],
    ),
    ("log with low <= 0", _set("space.lr.low", 0.0), ["space.lr.low", "log"]),
    ("step not dividing", _set("space.d_ff.high", 250), ["space.d_ff.step", "divide"]),
    ("log with step", _set("space.vocab_size.step", 2), ["space.vocab_size.step", "log"]),
    ("categorical empty", _set("space.tokenizer.choices", []), ["space.tokenizer.choices"]),
    (
        "categorical duplicates",
        _set("space.tokenizer.choices", ["bpe", "bpe"]),
        ["space.tokenizer.choices", "twice"],
    ),
    (
        "bad condition syntax",
        _set("space.lowercase.when", "tokenizer = 'word'"),
        ["space.lowercase.when", "syntax"],
    ),
    (
        "unknown field in condition",
        _set("space.lowercase.when", "tokenzier == 'word'"),
        ["space.lowercase.when", "tokenzier", "tokenizer"],
    ),
    (
        "code in condition",
        _set("space.lowercase.when", "__import__('os').getcwd() == 'x'"),
        ["space.lowercase.when"],
    ),
    (
        "condition value typo",
        _set("space.lowercase.when", "tokenizer == 'wrod'"),
        ["space.lowercase.when", "'wrod'"],
    ),
    (
        "condition on itself",
        _set("space.lowercase.when", "lowercase"),
        ["space.lowercase.when", "itself"],
    ),
    (
        "condition cycle",
        _all(_set("space.tokenizer.when", "lowercase == false")),
        ["when", "cycle"],
    ),
    (
        "space field not in TrainConfig",
        _set("space.dff", {"choices": [1, 2]}),
        ["space.dff", "d_ff"],
    ),
    ("corpus in space", _set("space.corpus", {"choices": ["a", "b"]}), ["space.corpus"]),
    ("space field also fixed", _set("fixed.d_ff", 128), ["space.d_ff", "[fixed]"]),
    ("unknown fixed field", _set("fixed.d_fff", 128), ["fixed.d_fff", "d_ff"]),
    (
        "fixed values rejected",
        _all(_set("fixed.d_model", 100), _set("fixed.n_heads", 3)),
        ["fixed", "d_model", "n_heads"],
    ),
    ("fixed wrong type", _set("fixed.n_layers", "two"), ["fixed", "n_layers"]),
    (
        "space bound rejected",
        _all(_set("space.d_ff.low", 0), _set("space.d_ff.step", 64)),
        ["space.d_ff", "d_ff=0"],
    ),
    (
        "vocab too small for bpe",
        _all(
            _set("space.vocab_size.low", 100),
            _set("space.tokenizer.choices", ["bpe"]),
            _del("space.lowercase"),
        ),
        ["space.vocab_size", "vocab_size=100"],
    ),
    ("unknown sampler", _set("study.sampler", "tpes"), ["study.sampler", "'tpes'", "tpe"]),
    (
        "unknown sampler option",
        _set("study.sampler", {"name": "tpe", "seed": 1}),
        ["study.sampler.seed"],
    ),
    ("unknown pruner", _set("study.pruner", "medain"), ["study.pruner", "median"]),
    (
        "median pruner with two objectives",
        _all(_set("study.objectives", ["val_bpb", "peak_mem"]), _set("study.pruner", "median")),
        ["study.pruner", "single objective"],
    ),
    (
        "unknown objective",
        _set("study.objectives", ["accuracy"]),
        ["study.objectives[0]", "accuracy"],
    ),
    (
        "bad direction",
        _set("study.objectives", [{"metric": "val_bpb", "direction": "down"}]),
        ["study.objectives[0].direction"],
    ),
    (
        "duplicate objective",
        _set("study.objectives", ["val_bpb", "val_bpb"]),
        ["study.objectives[1]", "twice"],
    ),
    ("n_trials < 1", _set("study.n_trials", 0), ["study.n_trials", ">= 1"]),
    ("n_trials missing", _del("study.n_trials"), ["study.n_trials", "missing"]),
    ("study name missing", _del("study.name"), ["study.name"]),
    ("study name with a slash", _set("study.name", "a/b"), ["study.name"]),
    ("negative timeout", _set("study.timeout", -5), ["study.timeout"]),
    ("bad memory budget", _set("limits.memory_budget", "8 gigs"), ["limits.memory_budget"]),
    ("bad oom policy", _set("limits.oom_policy", "shrink"), ["limits.oom_policy", "fit"]),
    ("negative retries", _set("limits.max_retries", -1), ["limits.max_retries"]),
    (
        "a warm-up in evaluations (now min_steps)",
        _set("limits.collapse", {"warmup_evals": 1}),
        ["limits.collapse.warmup_evals"],
    ),
    ("min_steps of zero", _set("limits.collapse", {"min_steps": 0}), ["limits.collapse.min_steps"]),
    (
        "max_wall_s twice",
        _all(_set("limits.max_wall_s", 60), _set("fixed.max_wall_s", 60)),
        ["max_wall_s"],
    ),
    ("grid over a float range", _set("study.sampler", "grid"), ["space.lr", "step"]),
    (
        "grid with a condition",
        _all(_set("study.sampler", "grid"), _del("space.lr")),
        ["space.lowercase.when", "bruteforce"],
    ),
    ("enqueue unknown param", _set("enqueue", [{"d_model": 64}]), ["enqueue[0].d_model"]),
    ("enqueue outside the space", _set("enqueue", [{"d_ff": 100}]), ["enqueue[0].d_ff", "100"]),
    (
        "enqueue inactive conditional",
        _set("enqueue", [{"tokenizer": "bpe", "lowercase": True}]),
        ["enqueue[0].lowercase", "condition"],
    ),
    ("missing corpus table", _del("corpus"), ["corpus"]),
    ("missing corpus dir", _set("corpus.dir", "/nonexistent/corpus"), ["corpus.dir"]),
    ("corpus dir and source", _set("corpus.source", "x.xml"), ["corpus", "exactly one"]),
    (
        "corpus source without out",
        _all(_del("corpus.dir"), _set("corpus.source", "x.xml")),
        ["corpus.out"],
    ),
    (
        "synthetic bad size",
        _all(
            _del("corpus.dir"),
            _set("corpus.out", "/tmp/x"),
            _set("corpus.synthetic", {"size": "lots"}),
        ),
        ["corpus.synthetic.size"],
    ),
    ("fixed corpus", _set("fixed.corpus", "/tmp"), ["fixed.corpus", "[corpus]"]),
    ("storage not a URL", _set("study.storage", "sweeps.db"), ["study.storage", "sqlite:///"]),
]


def test_the_samplers_a_spec_names_are_the_samplers_that_are_built() -> None:
    # The spec's vocabulary sits below Optuna and cannot import the builders
    # (sweeps.space.SAMPLERS): a sampler added to one and not the other fails here.
    from sweeps import space
    from sweeps.spec.schema import spec_schema
    from sweeps.spec.values import SAMPLERS

    enum = spec_schema()["properties"]["study"]["properties"]["sampler"]["anyOf"][0]["enum"]
    assert tuple(space.SAMPLERS) == SAMPLERS == tuple(enum)


def test_a_sampler_without_a_builder_is_an_error_naming_the_ones_there_are(
    corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sweeps import space

    data = base(corpus_dir)
    data["study"]["sampler"] = "random"
    spec = parse(data)
    monkeypatch.delitem(space.SAMPLERS, "random")
    with pytest.raises(SweepsError, match="unknown sampler 'random'; use one of: tpe, gp, nsga2"):
        space.make_sampler(spec)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [(m, e) for _, m, e in MALFORMED],
    ids=[name for name, _, _ in MALFORMED],
)
def test_malformed_spec(corpus_dir: Path, mutate: Mutation, expected: list[str]) -> None:
    data = copy.deepcopy(base(corpus_dir))
    mutate(data)
    with pytest.raises(SweepsError) as err:
        parse(data)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("spec.toml: ")
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"


MALFORMED_ABLATION: list[tuple[str, dict[str, Any], list[str]]] = [
    ("vary unknown field", {"vary": {"dff": [1, 2]}}, ["ablation.vary.dff"]),
    ("vary not a list", {"vary": {"d_ff": 64}}, ["ablation.vary.d_ff"]),
    ("vary empty", {"vary": {}}, ["ablation.vary"]),
    ("vary missing", {"baseline": {"d_ff": 64}}, ["ablation.vary"]),
    (
        "invalid expanded config",
        {"baseline": {"tokenizer": "bpe"}, "vary": {"vocab_size": [100]}},
        ["ablation.vary.vocab_size", "vocab_size=100"],
    ),
    ("varied field also fixed", {"vary": {"n_heads": [3]}}, ["ablation.vary.n_heads", "[fixed]"]),
    (
        "invalid baseline",
        {"baseline": {"d_ff": 0}, "vary": {"lr": [0.01]}},
        ["ablation.baseline", "d_ff"],
    ),
    (
        "baseline also fixed",
        {"baseline": {"d_model": 64}, "vary": {"d_ff": [1]}},
        ["ablation.baseline.d_model"],
    ),
    (
        "seeds with fixed seed",
        {"vary": {"d_ff": [1]}, "seeds": [0, 1], "baseline": {"seed": 3}},
        ["seed"],
    ),
    ("duplicate seeds", {"vary": {"d_ff": [1]}, "seeds": [0, 0]}, ["ablation.seeds"]),
    ("unknown ablation key", {"vary": {"d_ff": [1]}, "repeats": 2}, ["ablation.repeats"]),
]


@pytest.mark.parametrize(
    ("ablation", "expected"),
    [(a, e) for _, a, e in MALFORMED_ABLATION],
    ids=[name for name, _, _ in MALFORMED_ABLATION],
)
def test_malformed_ablation(
    corpus_dir: Path, ablation: dict[str, Any], expected: list[str]
) -> None:
    data = base(corpus_dir)
    del data["space"]
    data["ablation"] = ablation
    with pytest.raises(SweepsError) as err:
        parse(data)
    message = str(err.value)
    assert "\n" not in message
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"


def test_ablation_with_space_is_an_error(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    data["ablation"] = {"vary": {"d_ff": [1]}}
    with pytest.raises(SweepsError, match=r"ablation.*\[space\]"):
        parse(data)


def test_ablation_with_a_sampler_is_an_error(corpus_dir: Path) -> None:
    data = base(corpus_dir)
    del data["space"]
    data["study"]["sampler"] = "tpe"
    data["ablation"] = {"vary": {"d_ff": [1]}}
    with pytest.raises(SweepsError, match=r"study\.sampler"):
        parse(data)


def test_fixed_values_checked_with_the_space(corpus_dir: Path) -> None:
    """n_heads = 3 with the default d_model = 128 is invalid, but fine when d_model is searched
    over multiples of 3: the check must look for a valid combination, not at defaults alone."""
    data = base(corpus_dir)
    data["fixed"] = {"n_heads": 3}
    data["space"] = {"d_model": {"choices": [96, 192]}}
    assert parse(data).space[0].name == "d_model"
    data["space"] = {"d_model": {"choices": [96, 128]}}
    with pytest.raises(SweepsError, match=r"space\.d_model.*d_model=128"):
        parse(data)


def test_load_spec_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(SweepsError, match="directory"):
        load_spec(tmp_path)
    bad = write(tmp_path / "bad.toml", "[study\nname = 'x'\n")
    with pytest.raises(SweepsError) as err:
        load_spec(bad)
    assert "bad.toml" in str(err.value) and "not valid TOML" in str(err.value)
    assert "\n" not in str(err.value)
    typo = write(
        tmp_path / "typo.toml",
        "[study]\nname = 'x'\nn_trails = 3\n[corpus]\ndir = '.'\n[space.d_ff]\nchoices = [1]\n",
    )
    with pytest.raises(SweepsError) as err:
        load_spec(typo)
    assert str(err.value).startswith(f"{typo}: study.n_trails: ")
    assert "did you mean 'n_trials'" in str(err.value)
