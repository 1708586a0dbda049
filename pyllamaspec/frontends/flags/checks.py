"""Flags that do nothing in the combination given, and combinations that cannot be meant.

A llama.cpp user expects every flag to do something: one that has no effect here (a draft flag
without a drafter, -sys outside a conversation, -c past the model's training context) gets a
one-line warning naming it as it was spelled; two drafters at once are refused."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from ...errors import PyllamaspecError

# dest -> what makes the flag do something (checked against the Setup below)
DRAFT_FLAGS = ("draft_max", "draft_min", "draft_p_min", "no_adaptive", "spec_tree", "spec_tree_nodes")
DRAFT_MODEL_FLAGS = ("threads_draft", "n_gpu_layers_draft", "cache_type_k_draft", "cache_type_v_draft",
                     "rpc_draft", "draft_vocab")
CONVERSATION_FLAGS = ("system_prompt", "single_turn", "turn_stats")
PROMPT_ONLY_FLAGS = ("compare", "verbose_prompt")


@dataclass
class Setup:
    """What the run turned out to be once the models are known."""
    drafter: object                 # None, "ngram", "mtp" or the draft Model
    conversing: bool
    has_template: bool
    n_ctx_train: int
    n_ctx: int


def check_drafters(a: argparse.Namespace) -> None:
    """Two drafters named at once: which one was meant cannot be guessed."""
    if a.lookup and (a.model_draft or a.hf_repo_draft):
        raise PyllamaspecError("--lookup and -md/-hfd both name a drafter: give one (--lookup drafts by n-gram "
                               "lookup, -md with a draft model)")
    if getattr(a, "mtp", False) and a.lookup:
        raise PyllamaspecError("--spec-type draft-mtp and --lookup both name a drafter: give one")


def _flag(a: argparse.Namespace, dest: str) -> str | None:
    """The flag as the user spelled it, if it was given."""
    return getattr(a, "given", {}).get(dest)


def _no_drafter(a: argparse.Namespace, s: Setup) -> list[str]:
    if s.drafter is not None:
        return []
    why = "without a drafter (-md, -hfd, --lookup or --spec-type draft-mtp): plain decoding"
    return [f"{f} has no effect {why}" for d in DRAFT_FLAGS + DRAFT_MODEL_FLAGS + ("lookup_ngram", "color")
            if (f := _flag(a, d))]


def _no_draft_model(a: argparse.Namespace, s: Setup) -> list[str]:
    if s.drafter is None or not isinstance(s.drafter, str):
        return []
    out = [f"{f} has no effect without a draft model (the drafter is {s.drafter})" for d in DRAFT_MODEL_FLAGS
           if (f := _flag(a, d))]
    if s.drafter != "ngram" and (f := _flag(a, "lookup_ngram")):
        out.append(f"{f} has no effect without --lookup")
    return out


SUFFIX_FLAGS = ("suffix_max_tokens", "suffix_factor", "suffix_min_prob")


def _no_suffix(a: argparse.Namespace, s: Setup) -> list[str]:
    if "suffix" in (getattr(a, "spec_types", None) or ()):
        return []
    return [f"{f} has no effect without --spec-type suffix" for d in SUFFIX_FLAGS if (f := _flag(a, d))]


def _conversation(a: argparse.Namespace, s: Setup) -> list[str]:
    if s.conversing:
        return [f"{f} has no effect in a conversation" for d in PROMPT_ONLY_FLAGS if (f := _flag(a, d))]
    why = ("-no-cnv" if a.conversation is False else
           "the model has no chat template (--chat-template NAME gives it one)" if not s.has_template else
           "the demo completes text")
    return [f"{f} has no effect without a conversation ({why})"
            for d in CONVERSATION_FLAGS + ("chat_template", "chat_template_file") if (f := _flag(a, d))]


def _context(a: argparse.Namespace, s: Setup) -> list[str]:
    if s.n_ctx_train and s.n_ctx > s.n_ctx_train:
        return [f"-c {s.n_ctx} is more than the model was trained on (n_ctx_train = {s.n_ctx_train}): past "
                f"{s.n_ctx_train} tokens its output may degrade (llama.cpp: possible training context overflow)"]
    return []


def _sampling(a: argparse.Namespace, s: Setup) -> list[str]:
    if a.temp == 0 and (f := _flag(a, "seed")):
        return [f"{f} has no effect with --temp 0 (greedy decoding draws nothing at random)"]
    return []


# llama.cpp flags with no counterpart here (args.add_accepted_args, add_interactive_args):
# dest -> (whether the value given asks for something, what happens instead)
UNSUPPORTED = {
    "ubatch_size": (lambda v: v is not None, "the batch is evaluated as one ggml graph here (no micro-batches)"),
    "threads_batch": (lambda v: v is not None, "-t threads evaluate prompts and generated tokens alike"),
    "device": (lambda v: v is not None, "layers go to the GPU with -ngl; ggml picks the device"),
    "mirostat": (lambda v: v != 0, "mirostat sampling is not supported: sampling stays temp / top-k / top-p / min-p"),
    "mirostat_lr": (lambda v: v is not None, "mirostat sampling is not supported"),
    "mirostat_ent": (lambda v: v is not None, "mirostat sampling is not supported"),
    "typical": (lambda v: v != 1.0, "locally typical sampling is not supported: sampling stays temp / top-k / "
                                    "top-p / min-p"),
    "lora": (bool, "LoRA adapters are not supported: the base model runs without the adapter"),
    "lora_scaled": (bool, "LoRA adapters are not supported: the base model runs without the adapter"),
    "keep": (lambda v: v is not None, "the context is never shifted here: a full context ends the answer"),
    "simple_io": (bool, "the input is read line by line already"),
    "mmproj_offload": (lambda v: v is True, "the vision projector runs on the CPU here"),
}


def unsupported_flags(a: argparse.Namespace) -> list[str]:
    """One message per llama.cpp flag given that asks for what has no counterpart here."""
    return [f"{f} has no effect: {why}" for dest, (asks, why) in UNSUPPORTED.items()
            if (f := _flag(a, dest)) and asks(getattr(a, dest, None))]


def _unsupported(a: argparse.Namespace, s: Setup) -> list[str]:
    return unsupported_flags(a)


def mmproj_flags(a: argparse.Namespace) -> list[str]:
    """--no-mmproj where it changes nothing: without -hf (only -hf finds a projector by itself),
    or with --mmproj FILE (that file is loaded all the same, as in llama.cpp) unless -hfd would
    take its repository's projector for the draft (launch.wants_draft_repo_mmproj)."""
    f = _flag(a, "no_mmproj")
    if not f or not getattr(a, "no_mmproj", False):
        return []
    if getattr(a, "mmproj", None):
        if getattr(a, "hf_repo_draft", None) and not getattr(a, "mmproj_draft", None):
            return []                               # it leaves out the draft repository's
        return [f"{f} has no effect with --mmproj FILE: that projector is loaded"]
    if not getattr(a, "hf_repo", None):
        return [f"{f} has no effect without -hf (only -hf finds a vision projector by itself)"]
    return []


def _mmproj(a: argparse.Namespace, s: Setup) -> list[str]:
    return mmproj_flags(a)


def ineffective_flags(a: argparse.Namespace, s: Setup) -> list[str]:
    """One message per flag given that has no effect in this run."""
    out: list[str] = []
    for check in (_no_drafter, _no_draft_model, _no_suffix, _conversation, _context, _sampling, _unsupported,
                  _mmproj):
        out += check(a, s)
    return out


__all__ = ["Setup", "check_drafters", "ineffective_flags", "unsupported_flags", "mmproj_flags", "show_warning"]


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings as one line each, as a command line says them (no file, no line number):
    warnings.showwarning for the CLI and the server."""
    print(f"warning: {message}", file=sys.stderr)
