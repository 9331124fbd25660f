"""``sweeps prepare`` and ``sweeps tokenize``: a corpus directory from a dump, text files or the
synthetic corpus, and its token cache, each a call into ``lm.corpus`` / ``lm.tokens``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lm.errors import SweepsError
from sweeps.cli.options import vocab_size_default_text
from sweeps.console import human_bytes, print_summary, progress_bar

app = typer.Typer()


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
        manifest = corpus.prepare(
            out,
            sources=sources or (),
            format=format,
            synthetic_size=corpus.parse_size(size) if synthetic else None,
            seed=seed,
            val_fraction=val_fraction,
            progress=progress,
            replace=force,
        )
    elapsed = time.perf_counter() - started
    print_summary(
        f"corpus {out}",
        [
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
        ],
    )


@app.command()
def tokenize(
    corpus_dir: Annotated[Path, typer.Argument(help="A directory written by `sweeps prepare`.")],
    tokenizer: Annotated[str, typer.Option(help="word, bpe or byte.")] = "bpe",
    vocab_size: Annotated[
        int | None,
        typer.Option(
            help=f"Ids the model sees, specials included [default: {vocab_size_default_text()}]."
        ),
    ] = None,
    lowercase: Annotated[bool, typer.Option(help="Lowercase words (word tokenizer).")] = False,
) -> None:
    """Train the tokenizer if needed and encode the corpus once into the token cache."""
    from lm.config import default_vocab_size
    from lm.tokenizers import validate_tokenizer_args
    from lm.tokens import load_tokens

    if vocab_size is None:
        vocab_size = default_vocab_size(tokenizer)
    validate_tokenizer_args(tokenizer, vocab_size, lowercase, key="--vocab-size")
    started = time.perf_counter()
    with progress_bar("tokenizing") as progress:
        cache = load_tokens(
            corpus_dir, tokenizer, vocab_size, lowercase=lowercase, progress=progress
        )
    elapsed = time.perf_counter() - started
    meta = cache.meta
    print_summary(
        f"tokens {cache.path}",
        [
            ("tokenizer", f"{meta['kind']} ({meta['vocab_size']:,} ids)"),
            ("train / val tokens", f"{meta['train_tokens']:,} / {meta['val_tokens']:,}"),
            ("bytes per token", meta["bytes_per_token"]),
            ("<unk> rate (val)", f"{meta['unk_rate']:.2%}"),
            ("cache", "hit" if cache.hit else f"built (encode {meta['encode_seconds']:.2f} s)"),
            ("time", f"{elapsed:.2f} s"),
        ],
    )
