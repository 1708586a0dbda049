"""The command line's conversation mode (-cnv), like llama-cli's: read a user message, stream
the answer, repeat. The Model is reused, so each turn evaluates only the new part of the prompt.

Commands: /exit or /quit (or end of input) leaves, /clear starts the conversation afresh, /image
FILE (with --mmproj) loads an image for the next message, as llama-mtmd-cli's chat mode does
(media.py); a line ending in a backslash continues on the next. Ctrl-C while an answer streams
stops that answer (what was said is kept in the conversation); Ctrl-C at the prompt leaves.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from ...engine.chat_template import ChatPrompt
from ...structured.formats import chat_spec
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import ContextFullError, EvaluationInterrupted, PyllamaspecError
from ...files.progress import StepProgress
from ...speculation.decoder import DraftParams, Stats
from ...generation.generate import iter_generate
from ...vision.messages import has_media, split_media
from . import media

# Ctrl-C: KeyboardInterrupt, or EvaluationInterrupted where the core saw the signal first and
# the eval returned before Python raised it (nothing else interrupts a CLI's evaluations)
CTRL_C = (KeyboardInterrupt, EvaluationInterrupted)

GREEN, RESET = "\033[32m", "\033[0m"


@dataclass
class Conversation:
    system: str | None = None
    messages: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)     # image parts loaded for the next user message

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.images = []                                  # as llama-cli's /clear drops staged media

    def add_user(self, text: str) -> None:
        """The user's message, with the images loaded for it first (llama-mtmd-cli puts each
        image's marker before the text)."""
        content = [*self.images, {"type": "text", "text": text}] if self.images else text
        self.messages.append({"role": "user", "content": content})
        self.images = []


def read_message(prompt: str = "\n> ") -> str | None:
    """One user message from stdin (None at end of input); a trailing backslash continues it."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            return "\n".join(lines) if lines else None
        line = line.rstrip("\n")
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        if not sys.stdin.isatty():          # no terminal echoed it: a piped session reads as a transcript
            sys.stdout.write("\n".join(lines) + "\n")
        return "\n".join(lines)


def turn_stats(stats: Stats, has_draft: bool) -> str:
    s = (f"[prompt {stats.n_prompt} tokens, {stats.n_reused} reused, {stats.n_prompt - stats.n_reused} evaluated "
         f"in {stats.t_prompt:.3f} s | {stats.n_generated} tokens at {stats.generate_tps:.1f} t/s")
    if has_draft:
        s += (f" | drafted {stats.drafted}, accepted {stats.accepted} ({100 * stats.acceptance_rate:.1f}%), "
              f"{stats.mean_accepted:.2f} tokens per round")
        split = stats.thinking_acceptance()
        if split is not None:
            s += f" (thinking {100 * split[0]:.1f}%, answer {100 * split[1]:.1f}%)"
    return s + "]"


def answer(conv: Conversation, target: Model, draft, a: argparse.Namespace, sampling: SamplingParams,
           draft_params: DraftParams, chat_template: str | None) -> tuple[str, Stats | None, bool]:
    """Streams one answer to stdout: (its text, stats, whether Ctrl-C stopped it)."""
    max_tokens = a.n_predict if a.n_predict >= 0 else target.n_ctx
    result: dict = {}
    messages, images = split_media(conv.messages) if has_media(conv.messages) else (conv.messages, [])
    prompt = ChatPrompt.make(messages, chat_template, **getattr(a, "template_kwargs", {}))
    spec = chat_spec(getattr(a, "constraint", None), getattr(a, "reasoning_options", None))   # a thinking budget
    pieces = iter_generate(prompt, target, draft, sampling=sampling,
                           draft=draft_params, max_tokens=max_tokens, stop=list(a.stop), result=result,
                           progress=StepProgress("prompt"), constraint=spec,
                           images=(getattr(a, "projector", None), images, getattr(a, "draft_projector", None))
                           if images else None)
    text, interrupted = "", False
    try:
        for piece in pieces:
            text += piece.text
            sys.stdout.write(GREEN + piece.text + RESET if a.color and piece.from_draft else piece.text)
            sys.stdout.flush()
    except CTRL_C:
        interrupted = True
    finally:
        pieces.close()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return result.get("text", text), result.get("stats"), interrupted


def _command(msg: str, conv: Conversation, a: argparse.Namespace) -> str | None:
    """A command line: "exit", "done" (handled: read the next line), or None (a message)."""
    line = msg.strip()
    if line in ("/exit", "/quit"):
        return "exit"
    if line == "/clear":
        conv.clear()
        sys.stdout.write("Chat history cleared\n")
        return "done"
    if media.is_media_command(line):
        part = media.stage_line(line, getattr(a, "projector", None))
        if part is not None:
            conv.images.append(part)
        return "done"
    return None if line else "done"


def run_conversation(a: argparse.Namespace, target: Model, draft, sampling: SamplingParams,
                     draft_params: DraftParams, chat_template: str | None) -> int:
    conv = Conversation(a.system_prompt)
    projector = getattr(a, "projector", None)
    conv.images = media.initial_images(list(getattr(a, "image", None) or []), projector)
    if projector is not None and not a.log_disable:
        print(media.banner(projector), file=sys.stderr)
    first = a.prompt
    while True:
        if first is not None:
            msg, first = first, None
            sys.stdout.write(f"\n> {msg}\n")
        else:
            try:
                msg = read_message()
            except KeyboardInterrupt:
                sys.stdout.write("\n")
                return 0
            what = "exit" if msg is None else _command(msg, conv, a)
            if what == "exit":
                sys.stdout.write("\n")
                return 0
            if what == "done":
                continue
        conv.add_user(msg)
        try:
            text, stats, interrupted = answer(conv, target, draft, a, sampling, draft_params, chat_template)
        except CTRL_C:                      # before the answer's first token (rendering, prompt)
            text, stats, interrupted = "", None, True
        except ContextFullError as e:
            conv.messages.pop()
            print(f"[{e}; /clear starts afresh]", file=sys.stderr)
            continue
        except PyllamaspecError as e:
            conv.messages.pop()
            print(f"error: {e}", file=sys.stderr)
            continue
        if interrupted:
            print("[interrupted]", file=sys.stderr)
            if not text:                    # nothing was said: the question is withdrawn
                conv.messages.pop()
                continue
        conv.messages.append({"role": "assistant", "content": text})
        if a.turn_stats and stats is not None:
            print(turn_stats(stats, draft is not None), file=sys.stderr)
        if a.single_turn:
            return 0
