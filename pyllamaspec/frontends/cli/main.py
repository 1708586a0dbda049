"""Command line: speculative generation with llama.cpp's flag names.

    python -m pyllamaspec.cli -m TARGET.gguf -md DRAFT.gguf -p "prompt" -n 128
    python -m pyllamaspec.cli -m CHAT.gguf -md DRAFT.gguf -cnv -sys "Be brief."   (a conversation)
    python -m pyllamaspec.cli -m M.gguf --mmproj MMPROJ.gguf -cnv     (then /image FILE, as llama-mtmd-cli)
    python -m pyllamaspec.cli -hf user/repo:Q4_K_M -hfd user/small-repo -p "..."
    python -m pyllamaspec.cli --demo          (an offline pair: Gemma 3 270M F16 + its Q4_K_M)

Streams the text (with --color, tokens the draft proposed and the target accepted are green),
then prints a summary like llama-speculative. Ctrl-C stops cleanly with the summary so far.
With a model that has a chat template it converses turn by turn (-cnv), -p/-f being the first
user message, as llama-cli does (-no-cnv completes the prompt as text); see conversation.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from contextlib import ExitStack

from ...engine import state_file
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError, PyllamaspecError
from ...files.progress import StepProgress
from ...speculation.decoder import DraftParams, Stats
from ...generation.generate import iter_generate
from ..flags.args import build_parser, parse_args, projector_kwargs
from .conversation import CTRL_C, run_conversation
from ..flags.checks import Setup, ineffective_flags, show_warning
from .compare import Run, alternate, report, warm_up
from ..flags.launch import DEFAULT_PROMPT, open_models, process_escapes, resolve_models, settings_from_args  # noqa: F401
from ..flags.launch import open_flag_draft_projector

GREEN, RESET = "\033[32m", "\033[0m"


def _prompt(a: argparse.Namespace, default: str) -> str:
    if a.file:
        with open(a.file, encoding="utf-8") as f:
            text = f.read()
        text = text[:-1] if text.endswith("\n") else text      # as llama.cpp reads -f
        return process_escapes(text) if a.escape else text
    return a.prompt if a.prompt is not None else default


def print_summary(stats: Stats, a: argparse.Namespace, has_draft: bool, file=None) -> None:
    file = file or sys.stderr               # the stream of now, not of the module's import
    p = lambda *x: print(*x, file=file)  # noqa: E731
    p()
    n_eval = stats.n_prompt_evaluated
    # the prefill evaluates neither the cached prefix nor the last token (the first round does)
    how = (f"(prompt: {stats.n_prompt} tokens, {stats.n_reused} from the cache, the last evaluated with "
           f"the first round)")
    if n_eval:
        p(f"encoded {n_eval:4d} tokens in {stats.t_prompt:8.3f} seconds, speed: {stats.prompt_tps:8.3f} t/s {how}")
    else:
        p(f"encoded    0 tokens {how}")
    p(f"decoded {stats.n_generated:4d} tokens in {stats.t_generate:8.3f} seconds, speed: {stats.generate_tps:8.3f} t/s")
    p()
    if has_draft:
        p(f"n_draft   = {a.draft_max}")
        if stats.draft_mode:
            p(f"mode      = {stats.draft_mode} (the draft's text re-tokenized; counts in target tokens)")
        p(f"n_predict = {stats.n_generated}")
        p(f"n_drafted = {stats.drafted}")
        p(f"n_accept  = {stats.accepted}")
        p(f"accept    = {100 * stats.acceptance_rate:.3f}%")
        p(f"rounds    = {stats.rounds}, tokens per round {stats.mean_accepted:.2f}")
        if stats.tree_rounds:
            p(f"trees     = {stats.tree_rounds} rounds, {stats.tree_nodes / stats.tree_rounds:.1f} nodes verified "
              f"per tree, last shape: {stats.tree_shape}")
        p(f"time: draft {stats.t_draft:.3f} s, target {stats.t_target:.3f} s, loop {stats.t_loop:.3f} s")
    else:
        p("plain decoding (no draft model)")


def _has_template(a: argparse.Namespace, target: Model) -> bool:
    return bool(a.chat_template or a.chat_template_file or target.meta("tokenizer.chat_template"))


def _conversing(a: argparse.Namespace, target: Model, demo: bool) -> bool:
    """-cnv / -no-cnv, else llama-cli's default: converse when the model has a chat template (or
    one is given); -p / -f is then the first user message."""
    if a.conversation is not None:
        return a.conversation
    if getattr(a, "image", None) and (a.prompt is not None or a.file):
        return False                # llama-mtmd-cli: --image with -p is one turn, else its chat mode
    return not demo and _has_template(a, target)


def print_prompt_tokens(target: Model, ids: list[int], prompt: str, file=None) -> None:
    """--verbose-prompt, as llama.cpp prints it."""
    file = file or sys.stderr
    print(f"prompt: {prompt!r}\nnumber of tokens in prompt = {len(ids)}", file=file)
    for t in ids:
        piece = target.token_to_piece(t, render_special=True).decode("utf-8", "replace")
        print(f"{t:6d} -> {piece!r}", file=file)
    print(file=file)


def stream(a: argparse.Namespace, prompt: str, target: Model, draft, sampling: SamplingParams,
           draft_params: DraftParams) -> tuple[dict, bool]:
    """Echoes the prompt and streams the answer: (the result dict, whether Ctrl-C stopped it)."""
    max_tokens = a.n_predict if a.n_predict >= 0 else target.n_ctx
    result: dict = {}
    if getattr(a, "display_prompt", True):
        sys.stdout.write(prompt)
        sys.stdout.flush()
    interrupted = False
    _load_prompt_cache(a, target)
    pieces = iter_generate(prompt, target, draft, sampling=sampling, draft=draft_params,
                           max_tokens=max_tokens, stop=a.stop, result=result,
                           parse_special=not a.no_special,
                           progress=None if a.log_disable else StepProgress("prompt", new_line=True),
                           constraint=getattr(a, "constraint", None), images=getattr(a, "media", None))
    try:
        for piece in pieces:
            text = piece.text
            if a.color and piece.from_draft:
                text = GREEN + text + RESET
            sys.stdout.write(text)
            sys.stdout.flush()
    except CTRL_C:
        interrupted = True
    finally:
        pieces.close()          # runs the generator's bookkeeping (stats) now
        sys.stdout.write("\n")  # an error then starts on a line of its own
        sys.stdout.flush()
    _save_prompt_cache(a, target)
    return result, interrupted


def _load_prompt_cache(a: argparse.Namespace, target: Model) -> None:
    """--prompt-cache FILE (llama-completion's): the state saved there, into sequence 0 (which the
    prompt's generation then takes: it shares the most); a file of another model or cache type is
    an error, and the file is left as it is."""
    path = getattr(a, "prompt_cache", None)
    if not path or not os.path.exists(path):
        return
    try:
        head, state = state_file.read(path, target)
        target.sequence(0).load_state(state)
    except PyllamaspecError as e:
        raise PyllamaspecError(f"--prompt-cache {path}: {e}") from None
    if not a.log_disable:
        print(f"prompt cache: {head['n_tokens']} tokens from {path}", file=sys.stderr)


def _save_prompt_cache(a: argparse.Namespace, target: Model) -> None:
    path = getattr(a, "prompt_cache", None)
    if not path or getattr(a, "prompt_cache_ro", False) or not target.cached_tokens:
        return
    try:
        state_file.write(path, target, target.cached_tokens, target.sequence(0).save_state())
    except (PyllamaspecError, OSError) as e:
        print(f"warning: --prompt-cache {path}: not saved: {e}", file=sys.stderr)


def run_prompt(a: argparse.Namespace, prompt: str, target: Model, draft, sampling: SamplingParams,
               draft_params: DraftParams, adaptive: bool, compare: bool) -> int:
    """One prompt, streamed, then the summary; with compare, plain and speculative decoding of the
    same, warmed up and alternated (compare.py)."""
    quiet = a.log_disable and not a.perf
    run = Run(prompt, target, draft, sampling, draft_params, a.stop, not a.no_special) \
        if compare and draft is not None else None
    if run is not None and not a.no_warmup:
        if not quiet:
            print("warming up (a short plain and a short speculative run, not timed) ...", file=sys.stderr)
        warm_up(run)
    if a.verbose_prompt:
        print_prompt_tokens(target, target.tokenize(prompt, parse_special=not a.no_special), prompt)
    result, interrupted = stream(a, prompt, target, draft, sampling, draft_params)
    if "stats" in result and not quiet:
        stats = result["stats"]
        if interrupted:
            print("\n[interrupted]", file=sys.stderr)
        elif result.get("finish_reason") == "context_full":
            print(f"\n[context full: n_ctx = {target.n_ctx}; raise it with -c]", file=sys.stderr)
        print_summary(stats, a, draft is not None)
        _print_cost_model(result.get("policy"), a, draft is not None and adaptive)
        if run is not None and not interrupted and stats.n_generated:
            report(alternate(run, stats, a.compare_runs), stats.n_generated)
    return 130 if interrupted else 0


def _print_cost_model(pol, a: argparse.Namespace, show: bool) -> None:
    if not show or pol is None or pol.c_draft is None or 1 not in pol.c_target:
        return
    k = pol.best_k(a.draft_max, alpha=pol.alpha_upper)
    print(f"cost model: draft {1e3 * pol.c_draft:.1f} ms/token, target {1e3 * pol.target_cost(1):.1f} ms "
          f"for 1 token, {1e3 * pol.target_cost(a.draft_max + 1):.1f} ms for {a.draft_max + 1}; "
          f"acceptance ~{pol.alpha:.2f} (bound {pol.alpha_upper:.2f}) -> " + (f"drafts {k} tokens" if k else
          "plain decoding pays best here"), file=sys.stderr)


def _drafter(a: argparse.Namespace, draft):
    """The drafter's kind as the flag checks name it."""
    if a.lookup:
        return "ngram"
    if getattr(a, "mtp", False):
        return "mtp"
    return draft


def _interactive(a: argparse.Namespace) -> None:
    """llama-cli's -i / --interactive-first read as a conversation; --interactive-first waits for
    your first message, so its -p is what llama-cli makes of it, the text before that: here the
    system message (unless -sys gives one)."""
    if not (a.interactive or a.interactive_first):
        return
    a.conversation = True
    if a.interactive_first and (a.prompt is not None or a.file):
        text = _prompt(a, "")
        if a.system_prompt is None:
            a.system_prompt = text
        else:
            warnings.warn("--interactive-first waits for your first message: -p/-f is not sent (-sys is the "
                          "system message)")
        a.prompt, a.file = None, None


def _open_media(a: argparse.Namespace, draft, stack: ExitStack, target: Model) -> None:
    """--mmproj and --image: a.projector (or None), a.media = (Projector, [files], the draft's
    Projector or None: --mmproj-draft) for one prompt
    (a conversation attaches a.image to its first message). --mmproj FILE is loaded (so checked)
    even without --image, and so is the projector -hf found (a.hf_mmproj), as llama-mtmd-cli loads
    it: a conversation's /image takes it. One found by -hf that cannot be used (a type this engine
    does not run yet, a damaged file) leaves the CLI text only with a warning, unless --image
    needs it."""
    a.media, a.projector = None, None
    a.draft_projector = open_flag_draft_projector(a, draft, target, stack)
    path = a.mmproj or getattr(a, "hf_mmproj", None)
    if a.image and not path:
        raise InvalidArgumentError(_no_projector(a))
    if not path:
        return
    from ...errors import ModelFormatError, UnsupportedModelError
    from ...vision.projector import Projector
    try:
        a.projector = stack.enter_context(Projector(path, **projector_kwargs(a)))
    except (UnsupportedModelError, ModelFormatError) as e:
        if a.mmproj or a.image:
            raise
        print(f"warning: {a.hf_repo}'s vision projector cannot be used here ({e}): text only", file=sys.stderr)
        return
    a.media = (a.projector, list(a.image), a.draft_projector) if a.image else None


def _no_projector(a: argparse.Namespace) -> str:
    why = "--image needs a vision projector: --mmproj FILE (llama.cpp's mmproj GGUF)"
    if not getattr(a, "hf_repo", None):
        return why
    if getattr(a, "no_mmproj", False):
        flag = getattr(a, "given", {}).get("no_mmproj", "--no-mmproj")
        return f"{why}; {flag} leaves out the one of {a.hf_repo}"
    return f"{why}: {a.hf_repo} has no mmproj GGUF beside its model"


def run(a: argparse.Namespace) -> int:
    _interactive(a)
    sampling, draft_params, adaptive = settings_from_args(a)
    if a.verbose:
        from ...engine._native import set_verbose
        set_verbose(True)
    demo = a.demo or not (a.model or a.hf_repo or a.hf_repo_draft)
    compare = a.compare if a.compare is not None else demo
    target_path, draft_path, default_prompt = resolve_models(a)
    with ExitStack() as stack:
        target, draft = open_models(a, target_path, draft_path, stack)
        _open_media(a, draft, stack, target)
        if draft_params.spec_type is None and a.spec_types:      # the target's own file as -md: MTP
            draft_params.spec_type = a.spec_types
        if draft is None and a.spec_types:          # drafting without a draft file
            draft = ",".join(a.spec_types)
        conversing = _conversing(a, target, demo)
        setup = Setup(_drafter(a, draft), conversing, _has_template(a, target), target.info.n_ctx_train, target.n_ctx)
        for w in ineffective_flags(a, setup):
            warnings.warn(w)
        if conversing:
            if a.file:
                a.prompt = _prompt(a, "")
            return run_conversation(a, target, draft, sampling, draft_params,
                                    a.chat_template_file or a.chat_template)
        return run_prompt(a, _prompt(a, default_prompt), target, draft, sampling, draft_params,
                          adaptive, compare)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(build_parser(__doc__), argv)
    with warnings.catch_warnings():
        warnings.showwarning = show_warning
        if a.log_disable:
            warnings.simplefilter("ignore")
        try:
            return run(a)
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)
            return 130
        except (PyllamaspecError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
