"""`uedp rewrite`: a data owner privatizes their own JSONL file with DP-BART, on their own machine.

    uedp rewrite --in my.jsonl --out rewritten.jsonl --epsilon 1000 [--delta 1e-5] [--variant clv|pr|pr+|adept]
                 [--noise gaussian|laplace] [--label-epsilon E] [--max-documents N] [--seed S] [--rewriter DIR]

Reads the file with the JSONL loader (its clear errors: file and line), cuts each text into sentences (the
documents), rewrites each once through the public rewriter (uedp.rewriting.model: weights trained on public
text only, never on this file) and the CLV mechanism, and writes one line per document: {"user", "text",
"split", "label"?}, users, splits and labels kept. Beside it, OUT.meta.json: the per-document and per-user
(composed) epsilon, the per-entity epsilon for an entity in f documents, the rewriter, and what is released
in the clear (user ids, splits, and labels unless --label-epsilon privatizes them by randomized response).
With --seed the noise is reproducible and the output is marked NOT private.

Every option and the paths are checked first (a bad one: exit status 2, naming it); both files are written
at the end, each atomically (uedp.files): a refused or failed rewrite leaves no output and no temporary file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from uedp.errors import ConfigError
from uedp.files import atomic_write_text

META_SUFFIX = ".meta.json"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rewrite", help="privatize a JSONL file by DP-BART rewriting (local DP)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--in", dest="inp", required=True, type=Path, help="the owner's JSONL file")
    p.add_argument("--out", required=True, type=Path, help="the rewritten JSONL file")
    p.add_argument("--epsilon", required=True, type=float, help="per-document epsilon")
    p.add_argument("--delta", type=float, default=1e-5, help="per-document delta (Gaussian noise)")
    p.add_argument("--variant", default="clv", choices=("clv", "pr", "pr+", "adept"))
    p.add_argument("--noise", default="gaussian", choices=("gaussian", "laplace"))
    p.add_argument("--label-epsilon", type=float, default=None,
                   help="labels by randomized response (default: in the clear)")
    p.add_argument("--max-documents", type=int, default=None,
                   help="rewrite at most N documents per user (default: all)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise: the output is NOT private")
    p.add_argument("--public-for", default="jsonl",
                   help="corpus the rewriter must be independent of (its public training text excludes it)")
    p.add_argument("--rewriter", default="", metavar="DIR",
                   help="a saved rewriter (Rewriter.save) instead of the one trained on public text: its weights "
                        "must be public; their digest goes into the meta file")
    p.set_defaults(func=run)


def check_output(out: Path, inp: Path) -> Path:
    """The meta file beside `out`, once `out` is known to be writable as a file (not the input, not a
    directory, no file where a parent directory would go): ConfigError naming --out otherwise."""
    try:
        if out.resolve() == inp.resolve():
            raise ConfigError(f"--out {out} is the input file: choose another path")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--out {out} / --in {inp}: not a usable path ({exc})") from None
    meta = out.with_name(out.name + META_SUFFIX)
    for path in (out, meta):
        if path.is_dir():
            raise ConfigError(f"--out {out}: {path} is a directory; name a file")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"--out {out}: {parent} is not a directory")
    return meta


def run(args: argparse.Namespace) -> int:
    from uedp.data.jsonl import load_jsonl
    from uedp.privacy.noise import secure_generator
    from uedp.rewriting.rewrite import (
        RewriteSettings,
        guarantee,
        mechanism_for,
        randomized_response,
        rewrite_texts,
        rewriter_for,
        select_documents,
    )

    # Every option and both paths are checked before any work, and nothing is written until the end
    settings = RewriteSettings(epsilon=args.epsilon, delta=args.delta, variant=args.variant, noise=args.noise,
                               label_epsilon=args.label_epsilon, max_documents=args.max_documents)
    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed must be a non-negative integer, got {args.seed}")
    if not args.public_for.strip():
        raise ConfigError("--public-for must name a corpus (default: jsonl)")
    meta_path = check_output(args.out, args.inp)
    corpus = load_jsonl(path=args.inp)
    rng, warning = secure_generator(args.seed)
    if warning:
        print(f"WARNING: --seed {args.seed}: {warning}; the rewrites are for reproduction only", file=sys.stderr)
    rewriter = rewriter_for(settings, args.public_for, path=args.rewriter, setting="--rewriter")
    mechanism = mechanism_for(rewriter, settings)
    rows = corpus.table.to_pylist()
    by_user: dict[str, list[dict]] = {}
    for r in rows:
        by_user.setdefault(r["user"], []).append(r)
    chosen = [r for docs in by_user.values() for i in select_documents(len(docs), settings.max_documents, rng)
              for r in [docs[i]]]
    t0 = time.monotonic()
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        rate = done[0] / max(time.monotonic() - t0, 1e-9)
        print(f"\rrewritten {done[0]}/{len(chosen)} documents ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)

    texts = rewrite_texts([r["text"] for r in chosen], rewriter, mechanism, rng, progress=progress)
    print(file=sys.stderr)
    names = corpus.label_names
    lines = []
    for r, text in zip(chosen, texts):
        record = {"user": r["user"], "text": text, "split": r["split"]}
        if names is not None and r["label"] is not None:
            label = r["label"]
            if settings.label_epsilon is not None:
                label = randomized_response(label, len(names), settings.label_epsilon, rng)
            record["label"] = names[label]
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    per_user = max(len(d) for d in by_user.values())
    documents = per_user if settings.max_documents is None else min(per_user, settings.max_documents)
    meta = {"input": str(args.inp), "output": str(args.out), "documents": len(chosen), "users": len(by_user),
            "rewriter": rewriter.identity(), "public_text": rewriter.public, "rewriter_path": args.rewriter or None,
            **guarantee(mechanism, settings, documents_per_user=documents, warning=warning)}
    meta_text = json.dumps(meta, indent=1, default=str)
    atomic_write_text(args.out, "".join(lines))  # a reader sees no part of a file, a failure leaves none
    atomic_write_text(meta_path, meta_text)
    print(f"{len(chosen)} documents of {len(by_user)} users -> {args.out}; per document eps {settings.epsilon:g} "
          f"(delta {settings.mechanism_delta:g}), per user eps {meta['epsilon_user']:.4g} over {documents} "
          f"documents; in the clear: {', '.join(meta['in_the_clear'])}; details in {meta_path}")
    return 0
