"""The ``sweeps`` command line.

Heavy imports (torch, the training loop) happen inside the commands that need them, so
``sweeps --help`` and the data commands start fast. Every user mistake is a ``SweepsError``:
``main`` prints its one line and exits 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import cli_memory, cli_report, cli_study
from sweeps.config_options import read_toml, with_config_options
from sweeps.console import console, err_console, human_bytes, print_summary, progress_bar

app = typer.Typer(
    name="sweeps",
    help="Hyperparameter sweeps and ablations for small GPT-style language models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(cli_report.app)
app.add_typer(cli_memory.app)
app.add_typer(cli_study.app)

_state = {"debug": False}


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _state["debug"] = debug


# --- data -------------------------------------------------------------------------------------


@app.command()
def prepare(
    sources: Annotated[
        list[str] | None,
        typer.Argument(help="A Stack Exchange Posts.xml, or text files/globs with --format text."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="The corpus directory to write.")] = ...,  # type: ignore[assignment]
    format: Annotated[
        str, typer.Option("--format", help="posts (a Posts.xml) or text (plain text files).")
    ] = "posts",
    synthetic: Annotated[
        bool, typer.Option("--synthetic", help="Generate the built-in synthetic Q&A corpus.")
    ] = False,
    size: Annotated[str, typer.Option(help="Synthetic corpus size, e.g. 5MB.")] = "5MB",
    seed: Annotated[int, typer.Option(help="Synthetic corpus seed.")] = 0,
    val_fraction: Annotated[float, typer.Option(help="Share of questions held out.")] = 0.05,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
) -> None:
    """Turn a Posts.xml dump, text files or the synthetic corpus into a corpus directory."""
    from lm import corpus

    if not 0.0 < val_fraction < 1.0:
        raise SweepsError(f"--val-fraction must be between 0 and 1, got {val_fraction}")
    if out.exists() and not force:
        raise SweepsError(f"--out {out} already exists; choose another path or pass --force")
    started = time.perf_counter()
    with progress_bar("preparing") as progress:
        if synthetic:
            if sources:
                raise SweepsError("give either --synthetic or source files, not both")
            manifest = corpus.prepare_synthetic(
                out, size_bytes=corpus.parse_size(size), seed=seed,
                val_fraction=val_fraction, progress=progress, replace=force)
        elif not sources:
            raise SweepsError("no source given; pass a Posts.xml path, text files, or --synthetic")
        elif format == "posts":
            if len(sources) != 1:
                raise SweepsError(
                    f"--format posts takes one Posts.xml, got {len(sources)} paths; "
                    "use --format text for several text files")
            manifest = corpus.prepare_posts(
                Path(sources[0]), out, val_fraction=val_fraction, progress=progress, replace=force)
        elif format == "text":
            manifest = corpus.prepare_text(
                sources, out, val_fraction=val_fraction, progress=progress, replace=force)
        else:
            raise SweepsError(f"unknown --format {format!r}; use posts or text")
    elapsed = time.perf_counter() - started
    print_summary(f"corpus {out}", [
        ("source", manifest["source"]),
        ("format", manifest["format"]),
        ("questions", manifest["questions"]),
        ("answered questions", manifest["questions_answered"]),
        ("answers", manifest["answers"]),
        ("pairs", manifest["pairs"]),
        ("characters", manifest["chars"]),
        ("bytes", f"{manifest['bytes']:,} ({human_bytes(manifest['bytes'])})"),
        ("train / val bytes", f"{manifest['train_bytes']:,} / {manifest['val_bytes']:,}"),
        ("time", f"{elapsed:.2f} s"),
    ])


@app.command()
def tokenize(
    corpus_dir: Annotated[Path, typer.Argument(help="A directory written by `sweeps prepare`.")],
    tokenizer: Annotated[str, typer.Option(help="word, bpe or byte.")] = "bpe",
    vocab_size: Annotated[
        int | None,
        typer.Option(help="Ids the model sees, specials included [default: 4096; byte: 260]."),
    ] = None,
    lowercase: Annotated[bool, typer.Option(help="Lowercase words (word tokenizer).")] = False,
) -> None:
    """Train the tokenizer if needed and encode the corpus once into the token cache."""
    from lm.tokens import load_tokens

    if vocab_size is None:
        vocab_size = _default_vocab_size(tokenizer)
    started = time.perf_counter()
    with progress_bar("tokenizing") as progress:
        cache = load_tokens(corpus_dir, tokenizer, vocab_size, lowercase=lowercase,
                            progress=progress)
    elapsed = time.perf_counter() - started
    meta = cache.meta
    print_summary(f"tokens {cache.path}", [
        ("tokenizer", f"{meta['kind']} ({meta['vocab_size']:,} ids)"),
        ("train / val tokens", f"{meta['train_tokens']:,} / {meta['val_tokens']:,}"),
        ("bytes per token", meta["bytes_per_token"]),
        ("<unk> rate (val)", f"{meta['unk_rate']:.2%}"),
        ("cache", "hit" if cache.hit else f"built (encode {meta['encode_seconds']:.2f} s)"),
        ("time", f"{elapsed:.2f} s"),
    ])


# --- one training run -----------------------------------------------------------------------


def _default_vocab_size(tokenizer: str) -> int:
    """The byte tokenizer has exactly one size; the others default to 4096."""
    from lm.tokenizers import min_vocab_size

    return min_vocab_size("byte") if tokenizer == "byte" else 4096


def _train_config(config_file: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    values: dict[str, Any] = read_toml(config_file, what="--config") if config_file else {}
    values.update(overrides)
    if "vocab_size" not in values:
        values["vocab_size"] = _default_vocab_size(values.get("tokenizer", "bpe"))
    if "corpus" not in values:
        raise SweepsError("no corpus given; pass --corpus DIR (from `sweeps prepare`)")
    return TrainConfig.from_dict(values)


@app.command()
@with_config_options(TrainConfig, panel="Model and training")
def train(
    overrides: dict[str, Any],
    config: Annotated[
        Path | None, typer.Option("--config", help="A TOML file of TrainConfig fields.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="The run directory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Train one model and report bits per byte, the unigram gap and collapse statistics."""
    cfg = _train_config(config, overrides)
    run_dir = out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SweepsError(f"--out {run_dir} is not empty; choose a new run directory")
    result = _train_with_progress(cfg, run_dir, quiet=as_json)
    summary = result.to_dict()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print_run_summary(summary, run_dir)
    raise typer.Exit(summary["exit_code"])


def _train_with_progress(cfg: TrainConfig, run_dir: Path, *, quiet: bool) -> Any:
    from lm.train import run

    def on_eval(metrics: dict[str, Any]) -> None:
        if not quiet:
            err_console.print(
                f"eval @ {metrics['tokens']:>11,} tokens  val_loss {metrics['val_loss']:.4f}  "
                f"val_bpb {metrics['val_bpb']:.4f}  unigram_gap {metrics['unigram_gap']:+.4f}  "
                f"{metrics['tokens_per_s']:,.0f} tok/s")

    with progress_bar("training", unit="tokens") as progress:
        return run(cfg, run_dir, progress=progress, on_eval=on_eval)


_SUMMARY_METRICS = (
    ("val_loss", "val loss (nats/token)"),
    ("val_bpb", "val bits per byte"),
    ("unigram_entropy", "unigram baseline (nats/token)"),
    ("unigram_gap", "unigram gap"),
    ("kl_mean_to_unigram", "KL(mean || unigram)"),
    ("mean_kl_to_mean", "mean KL to mean prediction"),
    ("top20_overlap", "top-20 overlap with corpus"),
    ("unk_rate_targets", "<unk> rate (targets)"),
)


def _print_run_summary(summary: dict[str, Any], run_dir: Path) -> None:
    final = summary.get("final_metrics") or {}
    params = summary.get("params") or {}
    reason = f" ({summary['reason']})" if summary.get("reason") else ""
    rows: list[tuple[str, object]] = [("outcome", summary["outcome"] + reason)]
    for key, label in _SUMMARY_METRICS:
        if key in final:
            rows.append((label, final[key]))
    if summary.get("best_val_bpb") is not None:
        rows.append(("best val bits per byte", summary["best_val_bpb"]))
    if params:
        rows.append(("parameters", ", ".join(f"{k} {v:,}" for k, v in params.items())))
    rows += [
        ("tokens seen", summary.get("tokens_seen", 0)),
        ("tokens/s", summary.get("tokens_per_s", 0.0)),
        ("peak memory", human_bytes(summary.get("peak_mem_bytes") or 0)),
        ("wall time", f"{summary.get('wall_s', 0.0):.1f} s"),
        ("run dir", str(run_dir)),
    ]
    samples = final.get("samples") or []
    if samples:
        rows.append(("sample", f"{samples[0]['prompt']} -> {samples[0]['text']!r}"))
    print_summary("run", rows)


@app.command()
def generate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory from `sweeps train`.")],
    prompt: Annotated[
        str, typer.Option(help="Text to continue; <Q>, <A>, <D> are markers.")
    ] = "<Q>",
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate.")] = 100,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 0.8,
    top_k: Annotated[int | None, typer.Option(help="Sample among the k likeliest.")] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
) -> None:
    """Continue a prompt with a trained run's best checkpoint."""
    from lm.generate import generate as generate_text

    if temperature < 0:
        raise SweepsError(f"--temperature must be >= 0, got {temperature}")
    text = generate_text(run_dir, prompt, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, seed=seed)
    console.print(text, markup=False, highlight=False)


# --- the main job ---------------------------------------------------------------------------


QUICKSTART = Path(__file__).resolve().parent.parent / "studies" / "quickstart.toml"


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where the demo writes its database, runs and report.")
                   ] = Path("demo-out"),
) -> None:
    """The main job: the quickstart study on a synthetic corpus, end to end, then its report."""
    if not QUICKSTART.exists():
        raise SweepsError(f"{QUICKSTART} is missing; run the demo from a checkout of the project")
    out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{out / 'sweeps.db'}"
    cli_study.run(spec_path=QUICKSTART, storage=storage, runs_dir=out / "runs")
    report_path = out / "quickstart.html"
    cli_report.report(study="quickstart", out=report_path, storage=storage)
    console.print(f"report: {report_path.resolve()}  (open it in a browser)", highlight=False)
    console.print(f"more: sweeps trials quickstart --storage {storage}", highlight=False)


def main() -> None:
    """Console-script entry: one line and exit 2 for a user mistake, never a traceback."""
    try:
        app()
    except SweepsError as exc:
        if _state["debug"]:
            raise
        # Plain write: one line whatever the terminal width (rich would wrap it).
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
