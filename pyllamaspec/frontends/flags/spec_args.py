"""The speculation flags (shared by the CLI and the server), with llama.cpp's names: --spec-type
(every llama.cpp type, several chained; given more than once, the lists add up as in llama.cpp),
the draft's --spec-draft-* flags, the n-gram kinds' --spec-ngram-* flags and lookup caches (-lcs,
-lcd), suffix drafting's --spec-suffix-* flags, and ours (--lookup, the cost model's --no-adaptive, --draft-vocab).

Without --spec-type the draft decides: -md names a draft model (draft-simple) or a head, detected
from its GGUF (general.architecture eagle3 / dflash), as llama.cpp detects a draft's type."""
from __future__ import annotations

import argparse
import sys

from ...errors import PyllamaspecError
from ...speculation.params import NgramMapParams, NgramModParams, NgramParams, SuffixParams
from ...speculation.spec_types import parse

_NEEDS_DRAFT_FILE = ("draft-simple", "draft-eagle3", "draft-dflash")


def add_speculation_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("speculation")
    g.add_argument("--draft", "--draft-max", "--draft-n", "--spec-draft-n-max", dest="draft_max", type=int,
                   default=16, help="most tokens drafted per round")
    g.add_argument("--draft-min", "--spec-draft-n-min", dest="draft_min", type=int, default=0,
                   help="fewest tokens drafted per round")
    g.add_argument("--draft-p-min", "--spec-draft-p-min", dest="draft_p_min", type=float, default=None,
                   help="stop drafting when the draft's top probability is below this (default: the cost "
                        "model decides token by token; 0.75 with --no-adaptive)")
    g.add_argument("--spec-type", action="append", default=None,
                   help="llama.cpp's speculative types, comma-separated, chained (n-gram kinds first, the first "
                        "non-empty draft wins): draft-simple (a draft model), draft-eagle3 / draft-dflash (a head, "
                        "-md), draft-mtp (the target's MTP layers, or a Gemma 4 assistant: -md), ngram-simple, "
                        "ngram-map-k, ngram-map-k4v, "
                        "ngram-mod, ngram-cache (llama.cpp's n-gram kinds), ngram-lookup (--lookup), suffix (the "
                        "text of this and earlier requests: a server's slots share it), none "
                        "(default: what -md is)")
    g.add_argument("--lookup", action="store_true",
                   help="draft without a model: copy what followed the last n-gram earlier in the text")
    g.add_argument("--draft-vocab", type=int, default=32768,
                   help="a draft with over twice this many tokens computes the logits of this many common "
                        "ones only (faster drafts for 100k+ vocabularies); 0 = all")
    g.add_argument("--lookup-ngram", dest="lookup_ngram", type=int, default=3,
                   help="longest n-gram --lookup matches")
    g.add_argument("--no-adaptive", action="store_true",
                   help="always draft --draft-max tokens (no cost model; it may then be slower than plain)")
    g.add_argument("--spec-tree", dest="spec_tree", action="store_const", const=True, default=None,
                   help="a draft model drafts a token tree each round (several branches, one target evaluation; "
                        "--draft-max stays its depth). Default: the cost model drafts one where it pays")
    g.add_argument("--no-spec-tree", dest="spec_tree", action="store_const", const=False,
                   help="always draft a chain")
    g.add_argument("--spec-tree-nodes", dest="spec_tree_nodes", type=int, default=0,
                   help="a token tree's node budget (default 0: twice its depth)")
    _add_ngram_args(ap)


def _add_ngram_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("n-gram kinds (llama.cpp's --spec-ngram-* flags and defaults)")
    for kind, label in (("simple", "ngram-simple"), ("map-k", "ngram-map-k"), ("map-k4v", "ngram-map-k4v")):
        dest = kind.replace("-", "_")
        g.add_argument(f"--spec-ngram-{kind}-size-n", dest=f"ngram_{dest}_n", type=int, default=12,
                       help=f"{label}: length of the lookup n-gram (default 12)")
        g.add_argument(f"--spec-ngram-{kind}-size-m", dest=f"ngram_{dest}_m", type=int, default=48,
                       help=f"{label}: length of the drafted m-gram, its longest draft (default 48)")
        g.add_argument(f"--spec-ngram-{kind}-min-hits", dest=f"ngram_{dest}_hits", type=int, default=1,
                       help=f"{label}: hits a key needs before it drafts (default 1)")
    g.add_argument("--spec-ngram-mod-n-match", dest="ngram_mod_match", type=int, default=24,
                   help="ngram-mod: lookup length (default 24)")
    g.add_argument("--spec-ngram-mod-n-max", dest="ngram_mod_max", type=int, default=64,
                   help="ngram-mod: longest draft (default 64)")
    g.add_argument("--spec-ngram-mod-n-min", dest="ngram_mod_min", type=int, default=48,
                   help="ngram-mod: shortest draft kept (default 48)")
    g.add_argument("--spec-suffix-max-tokens", dest="suffix_max_tokens", type=int, default=1 << 17,
                   help="suffix: tokens of earlier prompts and answers kept (the oldest dropped first; default 131072)")
    g.add_argument("--spec-suffix-factor", dest="suffix_factor", type=float, default=1.0,
                   help="suffix: a draft at most this many times its match's length (default 1.0)")
    g.add_argument("--spec-suffix-min-prob", dest="suffix_min_prob", type=float, default=0.1,
                   help="suffix: the least empirical probability of a draft (default 0.1)")
    g.add_argument("-lcs", "--lookup-cache-static", dest="lookup_cache_static", default=None,
                   help="ngram-cache: a static lookup cache (llama-lookup-create's file)")
    g.add_argument("-lcd", "--lookup-cache-dynamic", dest="lookup_cache_dynamic", default=None,
                   help="ngram-cache: a dynamic lookup cache (read, not updated)")


def ngram_params(a: argparse.Namespace) -> NgramParams:
    """The n-gram kinds' parameters from the flags (checked: InvalidArgumentError)."""
    def m(kind: str) -> NgramMapParams:
        return NgramMapParams(getattr(a, f"ngram_{kind}_n"), getattr(a, f"ngram_{kind}_m"),
                              getattr(a, f"ngram_{kind}_hits"))
    return NgramParams(simple=m("simple"), map_k=m("map_k"), map_k4v=m("map_k4v"),
                       mod=NgramModParams(a.ngram_mod_match, a.ngram_mod_max, a.ngram_mod_min),
                       cache_static=a.lookup_cache_static, cache_dynamic=a.lookup_cache_dynamic,
                       suffix=SuffixParams(max_tokens=a.suffix_max_tokens, factor=a.suffix_factor,
                                           min_prob=a.suffix_min_prob))


def resolve_spec_type(a: argparse.Namespace) -> None:
    """Sets a.spec_types: the types --spec-type names (and --lookup's ngram-lookup), in llama.cpp's
    order, () for none; None when the draft decides (-md: a draft model or a head). a.mtp:
    draft-mtp is among them. Refuses what cannot run, by name; a draft no type uses is dropped."""
    given = [t for v in (a.spec_type or []) for t in v.split(",")]
    types = parse(given + (["ngram-lookup"] if a.lookup else [])) if given or a.lookup else None
    has_draft = bool(a.model_draft or a.hf_repo_draft)
    if types is not None:
        needs = [t for t in types if t in _NEEDS_DRAFT_FILE]
        if len(needs) > 1:
            raise PyllamaspecError(f"--spec-type {','.join(needs)}: one draft (-md) serves one of them")
        if needs and not has_draft:
            raise PyllamaspecError(f"--spec-type {needs[0]} needs a draft (-md or -hfd)")
        if has_draft and not needs and "draft-mtp" not in types:     # (draft-mtp: a Gemma 4 assistant)
            if types:
                print(f"warning: --spec-type {','.join(types)} does not use the draft model: not loaded",
                      file=sys.stderr)
            a.model_draft = a.hf_repo_draft = None
    a.spec_types = types
    a.mtp = bool(types) and "draft-mtp" in types
