"""``sweeps estimate``: a run's predicted peak memory term by term, or which points of a study fit.

    sweeps estimate --vocab-size 300 --tokenizer word --d-model 200 --n-layers 1 --d-ff 800 \\
        --seq-len 254 --batch-size 1000 --precision fp32 [--device cpu|cuda] [--budget 16GiB]
    sweeps estimate studies/attention_memory.toml --budget 16GiB

No corpus is needed (the estimate is arithmetic); when ``--corpus`` names a prepared corpus
whose token cache exists, its token counts refine the small data term. The memory model is
documented in ``lm/memory.py``; budgets, fitting and calibration in ``sweeps/preflight.py``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any

import typer

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps.config_options import read_toml, with_config_options
from sweeps.console import console, human_bytes

app = typer.Typer()

#: A grid with more points than this is sampled instead (``--samples`` points, seeded).
MAX_TABLE_POINTS = 500
#: Placeholder corpus for a config that names none (the estimate does not read data).
NO_CORPUS = "(no corpus)"


def _device_kind(device: str) -> str:
    """``cpu``/``cuda`` for a config's device; ``auto`` checks for an NVIDIA driver cheaply
    (no torch import, so the command stays fast)."""
    if device == "auto":
        nvidia = Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()
        return "cuda" if nvidia else "cpu"
    return device.split(":")[0]


def _config(config_file: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    values: dict[str, Any] = read_toml(config_file, what="--config") if config_file else {}
    values.update(overrides)
    if "vocab_size" not in values:
        from lm.tokenizers import min_vocab_size

        tokenizer = values.get("tokenizer", "bpe")
        values["vocab_size"] = min_vocab_size("byte") if tokenizer == "byte" else 4096
    values.setdefault("corpus", NO_CORPUS)
    return TrainConfig.from_dict(values)


def _budget(text: str | None, limits: Any, device: str, workers: int) -> int | None:
    from sweeps import preflight
    from sweeps.spec import Limits, parse_bytes

    if text is not None:
        if text.lower() == "none":
            return None
        if text.lower() == "auto":
            return preflight.resolve_budget(Limits(memory_budget="auto"), device=device,
                                            workers=workers)
        return parse_bytes(text, key="--budget")
    return preflight.resolve_budget(limits or Limits(), device=device, workers=workers)


@app.command()
@with_config_options(TrainConfig, panel="Model and training")
def estimate(
    overrides: dict[str, Any],
    spec_path: Annotated[
        Path | None,
        typer.Argument(metavar="[SPEC]", help="A study spec: a feasibility table of its space."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="A TOML file of TrainConfig fields.")
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option("--budget", help="Memory budget: a size (16GiB), auto or none "
                     "(default: the spec's limits.memory_budget, else auto)."),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Workers sharing an auto budget.")] = 1,
    launcher: Annotated[
        str, typer.Option("--launcher", help="How CPU children start: subprocess or fork.")
    ] = "subprocess",
    samples: Annotated[
        int, typer.Option("--samples", help="Points sampled when the space has no small grid.")
    ] = 50,
    sample_seed: Annotated[int, typer.Option("--sample-seed", help="Seed of that sample.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Predict peak training memory, every term with its formula, against a budget."""
    if workers < 1:
        raise SweepsError(f"--workers must be >= 1, got {workers}")
    if samples < 1:
        raise SweepsError(f"--samples must be >= 1, got {samples}")
    if launcher not in ("subprocess", "fork"):
        raise SweepsError(f"--launcher must be subprocess or fork, got {launcher!r}")
    if spec_path is not None:
        if config is not None:
            raise SweepsError("give either a study spec or --config, not both")
        _feasibility(spec_path, overrides, budget, workers, launcher, samples, sample_seed,
                     as_json)
        return
    from lm.memory import estimate as estimate_memory
    from lm.tokens import corpus_counts

    cfg = _config(config, overrides)
    device = _device_kind(cfg.device)
    counts = corpus_counts(cfg.corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)
    est = estimate_memory(cfg, device, launcher=launcher, counts=counts)
    budget_bytes = _budget(budget, None, device, workers)
    fits = budget_bytes is None or est.total <= budget_bytes
    if as_json:
        out = est.to_dict()
        out.update(budget_bytes=budget_bytes, fits=fits)
        typer.echo(json.dumps(out, indent=2))
        return
    _print_estimate(est, cfg, budget_bytes, fits)


def _print_estimate(est: Any, cfg: TrainConfig, budget_bytes: int | None, fits: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    p = est.params
    console.print(
        f"[bold]{cfg.tokenizer} V={est.vocab_size:,}[/] d_model={cfg.d_model} "
        f"n_layers={cfg.n_layers} n_heads={cfg.n_heads} d_ff={cfg.d_ff} seq_len={cfg.seq_len} "
        f"batch_size={cfg.batch_size} grad_accum={cfg.grad_accum} {cfg.precision} "
        f"{cfg.attention}{' checkpointing' if cfg.checkpointing else ''} on {est.device}",
        highlight=False,
    )
    console.print(
        f"parameters {p['total']:,} (embedding {p['embedding']:,}, attention/layer "
        f"{p['attention_per_layer']:,}, ffn/layer {p['ffn_per_layer']:,}"
        + (", untied head" if cfg.tie_weights is False else ", tied head") + ")",
        highlight=False,
    )
    table = Table(box=None, padding=(0, 1), title_justify="left")
    table.add_column("term", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("at peak", justify="right", no_wrap=True)
    table.add_column("formula [inputs]", overflow="fold")
    for t in est.terms:
        inputs = " ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}"
                          for k, v in t.inputs.items() if v is not None)
        cell = Text(t.formula)
        cell.append(f"  [{inputs}]", style="dim")
        table.add_row(t.name, human_bytes(t.bytes), human_bytes(t.at_peak), cell)
    table.add_row("activations", human_bytes(est.activations), "",
                  "embeddings + residual + norms + attention + attention_scores + ffn")
    console.print(table)
    console.print(f"peak at: {est.peak_moment}; tensors at the peak (allocated): "
                  f"{human_bytes(est.allocated)}", highlight=False)
    verdict = ""
    if budget_bytes is not None:
        verdict = (f" {'<=' if fits else '>'} budget {human_bytes(budget_bytes)}: "
                   f"{'fits' if fits else 'does NOT fit'}")
    console.print(f"[bold]total {human_bytes(est.total)}[/] ({est.total:,} bytes){verdict}",
                  highlight=False)


# --- a study's feasibility table ----------------------------------------------------------------


def _points(spec: Any, samples: int, seed: int) -> tuple[list[dict[str, Any]], str]:
    """The space's grid when it is small and finite, else a seeded sample of it."""
    from sweeps.space import grid_points

    try:
        return grid_points(spec, limit=MAX_TABLE_POINTS), "grid"
    except SweepsError:
        pass
    rng = random.Random(seed)
    seen: list[dict[str, Any]] = []
    base = spec.base_values()
    for _ in range(samples * 20):
        if len(seen) >= samples:
            break
        env, point = dict(base), {}
        for p in spec.space:
            if p.when is not None and not p.when.holds(env):
                continue
            env[p.name] = point[p.name] = _draw(p, rng)
        if point not in seen:
            seen.append(point)
    return seen, f"sample of {len(seen)} (seed {seed})"


def _draw(p: Any, rng: random.Random) -> Any:
    import math

    if p.type == "categorical":
        return rng.choice(list(p.choices))
    if p.finite and p.type == "int" and not p.log:
        return rng.choice(p.values())
    low, high = float(p.low), float(p.high)
    x = math.exp(rng.uniform(math.log(low), math.log(high))) if p.log else rng.uniform(low, high)
    if p.type == "int":
        step = int(p.step or 1)
        return min(int(p.high), int(p.low) + step * round((x - int(p.low)) / step))
    if p.step is not None:
        return round(low + p.step * round((x - low) / p.step), 12)
    return x


def _feasibility(spec_path: Path, overrides: dict[str, Any], budget: str | None, workers: int,
                 launcher: str, samples: int, seed: int, as_json: bool) -> None:
    from sweeps import preflight
    from sweeps.space import trial_config
    from sweeps.spec import load_spec

    spec = load_spec(spec_path, check_paths=False)
    points, how = _points(spec, samples, seed)
    rows: list[dict[str, Any]] = []
    budget_bytes: int | None = None
    for params in points:
        row: dict[str, Any] = {"params": params}
        try:
            cfg = trial_config(spec, params)
            if overrides:
                cfg = TrainConfig.from_dict({**cfg.to_dict(), **overrides})
        except SweepsError as exc:
            row.update(valid=False, reason=str(exc))
            rows.append(row)
            continue
        device = _device_kind(cfg.device)
        if budget_bytes is None:
            budget_bytes = _budget(budget, spec.limits, device, workers)
        plan = preflight.plan_trial(cfg, spec.limits, device=device, budget_bytes=budget_bytes,
                                    launcher=launcher)
        row.update(valid=True, device=device, predicted_bytes=plan.predicted_bytes,
                   fits=plan.fits, fitted=plan.fitted, reason=plan.reason)
        rows.append(row)
    n_fit = sum(1 for r in rows if r.get("fits"))
    if as_json:
        typer.echo(json.dumps({"study": spec.name, "points": how, "budget_bytes": budget_bytes,
                               "oom_policy": spec.limits.oom_policy, "fit": n_fit,
                               "rows": rows}, indent=2))
        return
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), title_justify="left",
                  title=f"study {spec.name}: {how} of its space; budget "
                        f"{human_bytes(budget_bytes) if budget_bytes else 'none'}, "
                        f"oom_policy {spec.limits.oom_policy}")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("point", overflow="fold")
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("fits", overflow="fold")
    for i, r in enumerate(rows):
        point = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in r["params"].items())
        if not r["valid"]:
            table.add_row(str(i), point, "", f"invalid: {r['reason']}")
            continue
        fits = "yes" if r["fits"] else "no"
        if r["fitted"]:
            fits = (f"yes, fitted to batch_size {r['fitted']['batch_size']} x grad_accum "
                    f"{r['fitted']['grad_accum']}")
        table.add_row(str(i), point, human_bytes(r["predicted_bytes"]), fits)
    console.print(table)
    console.print(f"{n_fit} of {len(rows)} points fit", highlight=False)
