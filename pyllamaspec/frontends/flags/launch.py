"""From flags to loaded models, shared by the CLI and the server (which parse the same flags,
flags/args.py): the models' paths (-m / -hf / --demo), the sampling and drafting settings, and the
target and its draft opened (generation/drafts.py decides what a draft file is)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import ExitStack

from ...engine._native import lib, mlock_all
from ...engine.chat_template import template_source
from ...engine.head import DraftHead
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import PyllamaspecError
from ...generation.drafts import open_draft
from ...speculation.decoder import DraftParams
from ...structured.formats import GrammarSpec, constraint_spec
from ...structured.reasoning import Reasoning
from .args import ngram_params, penalty_kwargs, resolve_spec_type, warn_gpu_layers
from .checks import check_drafters

# The prompt of a run given none, completed as text: a model with a chat template converses
# instead (llama-cli's default), so this never meets a chat format it would have to spell out.
DEFAULT_PROMPT = "Once upon a time, a small robot named Pip wanted to learn to paint. One morning,"


def wants_repo_mmproj(a: argparse.Namespace) -> bool:
    """Whether -hf also fetches the repository's vision projector, as llama.cpp's -hf does for
    the programs that take images (llama-server, llama-mtmd-cli, llama-cli: here those with
    --mmproj, the CLI and the server): not with --no-mmproj, nor when --mmproj FILE names one."""
    return hasattr(a, "mmproj") and not getattr(a, "no_mmproj", False) and not a.mmproj


def wants_draft_repo_mmproj(a: argparse.Namespace) -> bool:
    """Whether -hfd also takes the draft repository's vision projector: where the target has one
    (-mm FILE, or the one -hf found), unless --no-mmproj (both off) or --mmproj-draft FILE names
    the draft's. llama.cpp b11434 differs: common/arg.cpp plans the -hfd repository with the
    target's download options, its mmproj included, but never fetches or uses that mmproj (its
    draft has no projector: common/speculative.cpp feeds a draft the target's rows, or zeros).
    Here a draft reads its own projector's rows (--mmproj-draft), which is what gets its drafts
    after an image accepted (test_vision_draft: all of them, against almost none with zeros)."""
    return hasattr(a, "mmproj") and not getattr(a, "no_mmproj", False) and not getattr(a, "mmproj_draft", None) \
        and bool(a.mmproj or a.hf_mmproj)


def resolve_models(a: argparse.Namespace) -> tuple[str, str | None, str]:
    """(target path, draft path or None, default prompt). With -hf, a.hf_mmproj is the
    repository's vision projector (wants_repo_mmproj), else None; with -hfd, a.hf_mmproj_draft
    the draft repository's (wants_draft_repo_mmproj), else None."""
    a.hf_mmproj = a.hf_mmproj_draft = None
    if a.hf_repo or a.hf_repo_draft:
        from ...files.hub import resolve, resolve_with_mmproj
        target = a.model
        if a.hf_repo and wants_repo_mmproj(a):
            found = resolve_with_mmproj(a.hf_repo, a.hf_file)
            target, a.hf_mmproj = str(found.model), str(found.mmproj) if found.mmproj else None
        elif a.hf_repo:
            target = str(resolve(a.hf_repo, a.hf_file))
        draft = a.model_draft
        if a.hf_repo_draft and wants_draft_repo_mmproj(a):
            found = resolve_with_mmproj(a.hf_repo_draft)
            draft, a.hf_mmproj_draft = str(found.model), str(found.mmproj) if found.mmproj else None
        elif a.hf_repo_draft:
            draft = str(resolve(a.hf_repo_draft))
        if not target:
            raise PyllamaspecError("a draft from -hfd needs a target (-m or -hf)")
        return target, draft, DEFAULT_PROMPT
    if a.model and not a.demo:
        return _named(a.model, a), _named(a.model_draft, a) if a.model_draft else None, DEFAULT_PROMPT
    if a.lookup:
        raise PyllamaspecError("--lookup needs a target model (-m or -hf)")
    from ...files.offline import demo_pair
    if not getattr(a, "log_disable", False):
        why = "" if a.demo else " (no -m given; -m FILE.gguf, or -m smollm2 / gemma3, runs another)"
        print(f"pyllamaspec demo: target Gemma 3 270M F16, draft Gemma 3 270M Q4_K_M (from PyPI, cached){why}",
              file=sys.stderr)
    target, draft = demo_pair()
    return str(target), str(draft), DEFAULT_PROMPT


def open_flag_draft_projector(a: argparse.Namespace, draft, target, stack: ExitStack):
    """The draft's projector: --mmproj-draft FILE (an error where it cannot serve), else the one
    -hfd found (a.hf_mmproj_draft), which where it cannot serve (a draft head, a draft of another
    vocabulary, another width, a file this engine does not run) leaves the draft without one, with
    a warning, as -hf's projector that cannot be used leaves the target text only."""
    from ...errors import InvalidArgumentError, ModelFormatError, UnsupportedModelError
    from ...generation.generate import open_draft_projector
    from .args import projector_kwargs
    if getattr(a, "mmproj_draft", None):
        return open_draft_projector(a.mmproj_draft, draft, stack, target, **projector_kwargs(a))
    found = getattr(a, "hf_mmproj_draft", None)
    if not found:
        return None
    try:
        return open_draft_projector(found, draft, stack, target, **projector_kwargs(a))
    except (InvalidArgumentError, UnsupportedModelError, ModelFormatError) as e:
        print(f"warning: {a.hf_repo_draft}'s vision projector is not used for the draft ({e})", file=sys.stderr)
        return None


def _named(path: str, a: argparse.Namespace) -> str:
    """-m smollm2 / -m gemma3: the project's offline models by name (files.offline), where no file
    of that name is there."""
    from ...files.offline import REAL_MODEL_NAMES, real_model_path
    if path not in REAL_MODEL_NAMES or os.path.exists(path):
        return path
    out = str(real_model_path(path))
    if not getattr(a, "log_disable", False):
        print(f"pyllamaspec: {path} is {os.path.basename(out)} (from PyPI, cached)", file=sys.stderr)
    return out


def process_escapes(text: str) -> str:
    """llama.cpp's escapes (on by default, -e; --no-escape keeps the text as typed): \\n \\r \\t
    \\' \\" \\\\ and \\xNN; any other backslash stays as it is."""
    simple = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\"}
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
            hex2 = text[i + 2:i + 4]
            if nxt == "x" and len(hex2) == 2 and all(h in "0123456789abcdefABCDEF" for h in hex2):
                out.append(chr(int(hex2, 16)))
                i += 4
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _load_mode(a: argparse.Namespace) -> None:
    """-lm (llama.cpp's newer flag) into --no-mmap / --mlock."""
    mode = getattr(a, "load_mode", None)
    if mode in ("none", "mlock"):
        a.mmap = False
    if mode in ("mmap", "mmap+mlock"):
        a.mmap = True
    if mode in ("mlock", "mmap+mlock"):
        a.mlock = True


def settings_from_args(a: argparse.Namespace) -> tuple[SamplingParams, DraftParams, bool]:
    """(sampling, draft parameters, adaptive) from the flags, checked before any model loads."""
    resolve_spec_type(a)
    check_drafters(a)
    _load_mode(a)
    if getattr(a, "escape", False):
        if a.prompt is not None:
            a.prompt = process_escapes(a.prompt)
        a.reverse_prompt = [process_escapes(r) for r in a.reverse_prompt]
    if hasattr(a, "stop"):                     # -r is a stop string here, as in llama-cli's one-shot mode
        a.stop = list(a.stop) + [r for r in getattr(a, "reverse_prompt", []) if r and r not in a.stop]
    penalties = penalty_kwargs(a)
    warn_gpu_layers(a)
    sampling = SamplingParams(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                              seed=a.seed if a.seed >= 0 else int.from_bytes(os.urandom(8), "little"),
                              ignore_eos=getattr(a, "ignore_eos", False), **penalties)
    # a fixed seed with sampling asks for reproducible output: fixed draft lengths then
    adaptive = not a.no_adaptive and (a.seed < 0 or a.temp == 0)
    draft_params = DraftParams(n_draft=a.draft_max, n_min=a.draft_min, p_min=a.draft_p_min,
                               adaptive=adaptive, ngram=a.lookup_ngram, draft_vocab=a.draft_vocab, forced=a.forced,
                               spec_type=a.spec_types, ngrams=ngram_params(a),
                               tree=getattr(a, "spec_tree", None), tree_nodes=getattr(a, "spec_tree_nodes", 0))
    a.constraint = constraint_from_args(a)
    a.reasoning_options, a.template_kwargs = reasoning_from_args(a)
    if a.n_predict < -1:
        raise PyllamaspecError("-n must be >= -1")
    if getattr(a, "compare_runs", 1) < 1:
        raise PyllamaspecError("--compare-runs must be >= 1")
    if a.chat_template_file and a.chat_template:
        raise PyllamaspecError("give --chat-template or --chat-template-file, not both")
    if a.chat_template or a.chat_template_file:
        template_source(a.chat_template_file or a.chat_template, "--chat-template")
    if a.flash_attn == "on":
        print("note: -fa on is accepted, but pyllamaspec's attention is ggml's, without flash attention",
              file=sys.stderr)
    if getattr(a, "jinja", True) is False:
        print("warning: --no-jinja has no effect: chat templates are always rendered with Jinja here",
              file=sys.stderr)
    return sampling, draft_params, adaptive


def _read(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise PyllamaspecError(f"{flag}: cannot read {path}: {e}") from None


def reasoning_from_args(a: argparse.Namespace) -> tuple[Reasoning, dict]:
    """--reasoning-format / --reasoning-budget(-message), and the template's variables from
    --chat-template-kwargs and -rea on|off (enable_thinking), checked now."""
    kwargs: dict = {}
    if getattr(a, "chat_template_kwargs", None):
        try:
            kwargs = json.loads(a.chat_template_kwargs)
        except json.JSONDecodeError as e:
            raise PyllamaspecError(f"--chat-template-kwargs is not JSON: {e}") from None
        if not isinstance(kwargs, dict):
            raise PyllamaspecError("--chat-template-kwargs must be a JSON object")
    if getattr(a, "reasoning", "auto") != "auto":
        kwargs["enable_thinking"] = a.reasoning == "on"
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise PyllamaspecError("--chat-template-kwargs: enable_thinking must be true or false")
    if getattr(a, "reasoning_budget", -1) < -1:
        raise PyllamaspecError("--reasoning-budget must be -1 (no bound), 0 or a number of tokens")
    r = Reasoning(getattr(a, "reasoning_format", "auto"), getattr(a, "reasoning_budget", -1),
                  getattr(a, "reasoning_budget_message", ""))
    return r, kwargs


def constraint_from_args(a: argparse.Namespace) -> GrammarSpec | None:
    """--grammar / --grammar-file / --json-schema / --json-schema-file, checked now."""
    grammar = _read(a.grammar_file, "--grammar-file") if a.grammar_file else a.grammar
    schema = _read(a.json_schema_file, "--json-schema-file") if a.json_schema_file else a.json_schema
    if (a.grammar and a.grammar_file) or (a.json_schema and a.json_schema_file):
        raise PyllamaspecError("give a grammar (or schema) once: as text or as a file")
    return constraint_spec(grammar, schema)


def sequences_for(a: argparse.Namespace, n_slots: int = 0) -> int:
    """The sequences each model's context holds: the server's slots (n_slots; 0 in the CLI: the
    core's default, many, but one for a hybrid model), and with --spec-tree a token tree's
    branches beside them: each is verified (and drafted) in a spare sequence (speculation/
    tree/verify.py), and without spares a tree shrinks to its first branch. Only when asked: a hybrid
    model keeps a recurrent state ring per sequence (memory); elsewhere a server's idle slots
    serve as the branches."""
    n = n_slots
    if getattr(a, "spec_tree", None):
        dp = DraftParams()
        n = min(max(n, 1) + dp.tree_width ** dp.tree_levels, lib.PSL_SEQ_MAX)
    return n


def open_models(a: argparse.Namespace, target_path: str, draft_path: str | None, stack: ExitStack,
                n_slots: int = 0) -> "tuple[Model, Model | DraftHead | str | None]":
    """The target and the draft (generation.drafts.open_draft: a model, a head, or "mtp" for the
    target's own file), loaded for n_slots server slots (0: the CLI); a draft that cannot
    speculate for the target is refused here, before anything is printed."""
    kw = dict(n_ctx=a.ctx_size, n_batch=a.batch_size, use_mmap=getattr(a, "mmap", None),
              use_repack=getattr(a, "repack", True), n_seq_max=sequences_for(a, n_slots),
              deterministic=getattr(a, "deterministic", False), cache_ram=max(0, getattr(a, "cache_ram", 0)))
    target = stack.enter_context(Model(target_path, n_gpu_layers=a.n_gpu_layers, n_threads=a.threads,
                                       type_k=a.cache_type_k, type_v=a.cache_type_v, rpc=a.rpc,
                                       tensor_split=a.tensor_split, rpc_timeout=a.rpc_timeout, **kw))
    target.n_ctx_checkpoints = getattr(a, "ctx_checkpoints", target.n_ctx_checkpoints)
    draft = None
    if draft_path:
        draft = open_draft(draft_path, target, stack, spec_type=a.spec_types, n_gpu_layers=a.n_gpu_layers_draft,
                           n_threads=a.threads if a.threads_draft is None else a.threads_draft,
                           type_k=a.cache_type_k_draft or a.cache_type_k, type_v=a.cache_type_v_draft or a.cache_type_v,
                           rpc=a.rpc_draft, rpc_timeout=a.rpc_timeout, **kw)
    if isinstance(draft, Model):
        target.check_draft(draft)
    if getattr(a, "mlock", False):
        why = mlock_all()
        if why:
            print(f"warning: --mlock: cannot lock the models in RAM: {why}", file=sys.stderr)
    return target, draft
