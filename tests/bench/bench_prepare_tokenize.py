"""Benchmark: prepare + tokenize a 60 MB synthetic Posts.xml.

Prints parse MB/s, encode MB/s per tokenizer, the peak resident memory of `prepare` against the
file size (it must stay bounded: streaming), and the time of a cache hit as a fraction of the
first encode. Each phase runs in its own process so its peak memory is its own.

    .venv/bin/python tests/bench/bench_prepare_tokenize.py [--size 60MB] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

PHASE = r"""
import json, resource, sys, time
from pathlib import Path
from lm.corpus import prepare_posts, write_synthetic_posts
from lm.tokens import load_tokens
phase, args = sys.argv[1], json.loads(sys.argv[2])
t0 = time.perf_counter()  # after the imports: the phases' own work only
if phase == "write":
    write_synthetic_posts(Path(args["xml"]), size_bytes=args["size"], seed=0)
elif phase == "prepare":
    prepare_posts(Path(args["xml"]), Path(args["out"]))
elif phase == "tokenize":
    cache = load_tokens(Path(args["corpus"]), args["kind"], args["vocab"])
    args["hit"] = cache.hit
    args["encode_seconds"] = cache.meta.get("encode_seconds")
    args["bytes_per_token"] = cache.meta["bytes_per_token"]
args["seconds"] = time.perf_counter() - t0
args["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(args))
"""


def phase(name: str, **args: object) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PHASE, name, json.dumps(args)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="60MB")
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep the files")
    args = parser.parse_args()
    from lm.corpus import parse_size

    size = parse_size(args.size)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    work.mkdir(parents=True, exist_ok=True)
    xml, corpus = work / "Posts.xml", work / "corpus"

    written = phase("write", xml=str(xml), size=size)
    xml_mb = xml.stat().st_size / 1e6
    print(f"synthetic Posts.xml: {xml_mb:.1f} MB written in {written['seconds']:.1f} s")

    prep = phase("prepare", xml=str(xml), out=str(corpus))
    manifest = json.loads((corpus / "manifest.json").read_text())
    print(
        f"prepare: {xml_mb / prep['seconds']:.1f} MB/s of XML ({prep['seconds']:.1f} s), "
        f"{manifest['pairs']:,} pairs, {manifest['bytes'] / 1e6:.1f} MB of text"
    )
    print(
        f"prepare peak RSS: {prep['peak_rss'] / 1e6:.0f} MB = "
        f"{prep['peak_rss'] / xml.stat().st_size:.2f} x the file size "
        "(the interpreter and its imports included)"
    )

    text_mb = manifest["bytes"] / 1e6
    for kind, vocab in (("byte", 260), ("word", 8192), ("bpe", 4096)):
        first = phase("tokenize", corpus=str(corpus), kind=kind, vocab=vocab)
        second = phase("tokenize", corpus=str(corpus), kind=kind, vocab=vocab)
        encode_s = first["encode_seconds"] or first["seconds"]
        print(
            f"tokenize {kind:>4}-{vocab:<5}: encode {text_mb / encode_s:6.1f} MB/s "
            f"({encode_s:.1f} s encode, {first['seconds']:.1f} s with training), "
            f"{first['bytes_per_token']:.2f} bytes/token, "
            f"peak RSS {first['peak_rss'] / 1e6:.0f} MB; "
            f"cache hit {second['seconds']:.3f} s = {second['seconds'] / first['seconds']:.4f} "
            f"of the first (hit={second['hit']})"
        )
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"largest child peak RSS: {children / 1e6:.0f} MB")
    if args.keep is None:
        import shutil

        shutil.rmtree(work)


if __name__ == "__main__":
    main()
