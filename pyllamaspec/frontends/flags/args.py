"""The command line's flags, with llama.cpp's names and its parsing of them.

llama.cpp's short flags have several letters (-ngl, -fa, -cnv, -ctk, -td): argparse would read
an undefined one as a one-letter flag and its value (-fa as -f a, -cnv as -c nv), so every
flag is defined whole, abbreviations are off, and an unknown one is refused by name.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys

from ...structured.reasoning import FORMATS
from .spec_args import add_speculation_args, ngram_params, resolve_spec_type  # noqa: F401  (shared with the server)

PENALTIES = ("repeat_penalty", "presence_penalty", "frequency_penalty")


def add_model_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("models")
    g.add_argument("-m", "--model", help="target model (GGUF)")
    g.add_argument("-md", "--model-draft", "--spec-draft-model", dest="model_draft",
                   help="draft model (GGUF); without it, plain decoding")
    g.add_argument("-hf", "--hf-repo", help="target from Hugging Face: user/repo[:QUANT] (default quant Q4_K_M); "
                                            "its vision projector (mmproj) too, if the repository has one "
                                            "(--no-mmproj: not)")
    g.add_argument("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf", dest="hf_repo_draft",
                   help="draft from Hugging Face: user/repo[:QUANT]; its vision projector (mmproj) as the "
                        "draft's too, where the target has one and the repository one (--no-mmproj: not; "
                        "--mmproj-draft FILE wins)")
    g.add_argument("-hff", "--hf-file", help="the file to take from --hf-repo (instead of the quant tag)")
    g.add_argument("--demo", action="store_true", help="run the offline demo pair (also the default with no model)")


def add_mmproj_args(g, mmproj_help: str) -> None:
    """llama.cpp's projector flags (the CLI's and the server's, as llama-mtmd-cli's and
    llama-server's): -mm FILE, and whether -hf takes the repository's own (launch.resolve_models)."""
    g.add_argument("-mm", "--mmproj", default=None, metavar="FILE", help=mmproj_help)
    # (-mmd: not one of llama.cpp's flags, which has -mmdev / --mmproj-device; no prefix matching here)
    g.add_argument("-mmd", "--mmproj-draft", dest="mmproj_draft", default=None, metavar="FILE",
                   help="the draft model's own vision projector (a small VLM of the target's family; needs -md): "
                        "the draft reads its rows at each image (without one: the target's rows where as wide "
                        "as the draft's input, else zero rows)")
    g.add_argument("--mmproj-auto", dest="no_mmproj", action="store_false", default=False,
                   help="with -hf, use the repository's vision projector (mmproj) if it has one (the default)")
    g.add_argument("--no-mmproj", "--no-mmproj-auto", dest="no_mmproj", action="store_true",
                   help="with -hf, do not download or load the repository's vision projector (mmproj): text only")
    g.add_argument("--mmproj-offload", dest="mmproj_offload", action="store_true", default=None,
                   help=argparse.SUPPRESS)                                      # checks.py: the projector runs on the CPU
    g.add_argument("--no-mmproj-offload", dest="mmproj_offload", action="store_false",
                   help="keep the vision projector on the CPU (llama.cpp's; here it always runs there)")
    g.add_argument("--image-min-tokens", type=int, default=None, metavar="N",
                   help="minimum number of tokens each image can take, only used by vision models with dynamic "
                        "resolution (Qwen-VL; default: read from model)")
    g.add_argument("--image-max-tokens", type=int, default=None, metavar="N",
                   help="maximum number of tokens each image can take, only used by vision models with dynamic "
                        "resolution (Qwen-VL; default: read from model)")


def projector_kwargs(a: argparse.Namespace) -> dict:
    """Projector(...)'s keywords from --threads and --image-min/max-tokens."""
    return dict(n_threads=a.threads or 0, image_min_tokens=getattr(a, "image_min_tokens", None),
                image_max_tokens=getattr(a, "image_max_tokens", None))


def add_prompt_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("prompt and output")
    g.add_argument("-p", "--prompt", help="prompt text (with -cnv: the first user message)")
    g.add_argument("-f", "--file", help="read the prompt from a file")
    add_mmproj_args(g, "vision projector (llama.cpp's mmproj GGUF) for --image and a conversation's /image; "
                       "with -hf, the repository's is found and loaded unless --no-mmproj")
    g.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image for the prompt (repeatable; each takes the place of a <__media__> marker in "
                        "the prompt, or goes first), as llama-mtmd-cli; with -cnv, for the first user message")
    g.add_argument("-n", "--n-predict", type=int, default=-1, help="tokens to generate (-1 = until end or context full)")
    g.add_argument("--color", action="store_true", help="colour accepted draft tokens")
    g.add_argument("--compare", action=argparse.BooleanOptionalAction, default=None,
                   help="then time plain and speculative decoding of the same prompt alternately, after a "
                        "warm-up, and print the medians (on by default with --demo)")
    g.add_argument("--compare-runs", type=int, default=3, help="timed runs of each kind for --compare (default 3)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("-r", "--reverse-prompt", dest="reverse_prompt", action="append", default=[],
                   help="halt generation at this text (repeatable); in a conversation, the turn ends there")
    g.add_argument("--no-special", action="store_true", help="do not parse special tokens in the prompt")
    g.add_argument("-e", "--escape", dest="escape", action="store_true", default=True,
                   help="process escapes (\\n, \\t, \\', \\\", \\\\, \\xNN) in the prompt and -r (default: on)")
    g.add_argument("--no-escape", dest="escape", action="store_false")
    g.add_argument("--prompt-cache", dest="prompt_cache", default=None, metavar="FILE",
                   help="resume from the state saved in FILE (what the prompt shares with it is not evaluated), "
                        "and save the state there after the answer")
    g.add_argument("--prompt-cache-ro", dest="prompt_cache_ro", action="store_true",
                   help="read --prompt-cache, never write it")
    g.add_argument("--prompt-cache-all", dest="prompt_cache_all", action="store_true",
                   help="accepted for llama.cpp's sake: the saved state holds the answer too, always")
    g.add_argument("--verbose-prompt", action="store_true", help="print the prompt's tokens before generating")
    g.add_argument("--ignore-eos", action="store_true",
                   help="never end at an end-of-generation token (their logits are -inf, as llama.cpp's)")
    g.add_argument("--log-disable", action="store_true",
                   help="print only the generated text and errors (no banner, statistics or warnings)")


def add_conversation_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("conversation")
    g.add_argument("-cnv", "--conversation", dest="conversation", action="store_true", default=None,
                   help="chat turn by turn with the model's template (default when the model has one and "
                        "no -p/-f is given); /exit or end of input leaves, Ctrl-C stops an answer")
    g.add_argument("-no-cnv", "--no-conversation", dest="conversation", action="store_false")
    g.add_argument("-st", "--single-turn", action="store_true", help="one turn of conversation, then exit")
    g.add_argument("-sys", "--system-prompt", help="system message of the conversation")
    g.add_argument("--chat-template", help="a built-in template (chatml, llama3, gemma, llama2, mistral), "
                                           "Jinja source, or a file, in place of the model's")
    g.add_argument("--chat-template-file", help="a Jinja template file, in place of the model's")
    g.add_argument("--jinja", dest="jinja", action="store_true", default=True,
                   help="accepted for llama.cpp's sake: chat templates are always rendered with Jinja here")
    g.add_argument("--no-jinja", dest="jinja", action="store_false")
    add_reasoning_args(g)
    g.add_argument("--turn-stats", action="store_true",
                   help="after each answer, print its prompt reuse, speed and speculation statistics")


def add_reasoning_args(g) -> None:
    """Thinking models, as llama-server and llama-cli take them (CLI and server alike)."""
    g.add_argument("--chat-template-kwargs", dest="chat_template_kwargs", default=None, metavar="JSON",
                   help='variables for the template, e.g. \'{"enable_thinking": false}\' (a request\'s own win)')
    g.add_argument("-rea", "--reasoning", dest="reasoning", choices=["on", "off", "auto"], default="auto",
                   help="thinking on or off for templates that read enable_thinking (auto: the template's default)")
    g.add_argument("--reasoning-format", dest="reasoning_format", choices=list(FORMATS), default="auto",
                   help="how a reasoning block is returned: auto / deepseek: as reasoning_content; "
                        "deepseek-legacy: so, but inline in streamed content; none: left in the content")
    g.add_argument("--reasoning-budget", dest="reasoning_budget", type=int, default=-1, metavar="N",
                   help="thinking tokens before the block is closed (-1: no bound, 0: closed at once)")
    g.add_argument("--reasoning-budget-message", dest="reasoning_budget_message", default="", metavar="TEXT",
                   help="text put before the forced end of a thinking block")


def add_sampling_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("sampling")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=0.8, help="temperature (0 = greedy)")
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("-s", "--seed", type=int, default=-1, help="RNG seed (-1 = random)")
    for name in PENALTIES:
        g.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None,
                       help="as llama.cpp's (off by default)")
    g.add_argument("--repeat-last-n", dest="repeat_last_n", type=int, default=None,
                   help="last n tokens the penalties consider (default 64, 0 = off, -1 = the whole context)")
    g = ap.add_argument_group("constraints (llama.cpp's flags; a server's default for requests without their own)")
    g.add_argument("--grammar", help="GBNF grammar every token respects (llama.cpp's syntax)")
    g.add_argument("--grammar-file", help="a file with the GBNF grammar")
    g.add_argument("-j", "--json-schema", help="JSON schema the output follows (converted as llama.cpp converts it)")
    g.add_argument("-jf", "--json-schema-file", help="a file with the JSON schema")
    g.add_argument("--no-forced-drafts", dest="forced", action="store_false",
                   help="do not draft the text a grammar forces (it is drafted for free by default)")


def _gpu_layers(value: str) -> int:
    if value in ("all", "auto"):           # llama.cpp's words; here -1 offloads everything
        return -1
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, 'auto' or 'all', got {value!r}") from None


def add_resource_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("resources")
    g.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size (0 = from the model)")
    g.add_argument("-b", "--batch-size", type=int, default=512)
    g.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    g.add_argument("-td", "--threads-draft", "--spec-draft-threads", dest="threads_draft", type=int, default=None,
                   help="CPU threads of the draft (default: -t)")
    g.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", type=_gpu_layers, default=0,
                   help="target layers on the GPU (-1 or all = all)")
    g.add_argument("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl",
                   dest="n_gpu_layers_draft", type=_gpu_layers, default=0, help="draft layers on the GPU")
    g.add_argument("--rpc", default=None, metavar="HOST:PORT,...",
                   help="the target's layers on these ggml RPC servers (python -m pyllamaspec.rpc_server "
                        "or llama.cpp's rpc-server) and the local devices")
    g.add_argument("--rpc-draft", dest="rpc_draft", default=None, metavar="HOST:PORT,...",
                   help="the draft's RPC servers (default: none, the draft runs here)")
    g.add_argument("-ts", "--tensor-split", dest="tensor_split", default=None, metavar="N0,N1,...",
                   help="with --rpc: the target's share of layers per device (RPC servers' devices, "
                        "then the local ones; default: by free memory)")
    g.add_argument("--rpc-timeout", dest="rpc_timeout", type=float, default=60.0,
                   help="seconds one evaluation on RPC servers may take before it fails (default 60)")
    g.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", default="f16",
                   help="KV cache type of K (default f16, as llama.cpp; f32 attends faster on a CPU and is as "
                        "near exact maths, but its answers may part from llama.cpp's; auto: f32 where the "
                        "cache is in CPU memory and takes at most 512 MiB, else f16)")
    g.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", default="f16", help="KV cache type of V (as -ctk)")
    g.add_argument("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k", dest="cache_type_k_draft", default=None)
    g.add_argument("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v", dest="cache_type_v_draft", default=None)
    g.add_argument("-fa", "--flash-attn", dest="flash_attn", nargs="?", const="on", default="auto",
                   choices=["on", "off", "auto"], help="accepted for llama.cpp's sake: attention here is "
                                                       "ggml's, flash attention is not used")
    g.add_argument("--mmap", dest="mmap", action="store_true", default=None,
                   help="map the model file (the default where the weights would not fit in huge pages: "
                        "macOS, offloaded layers, a model large next to the free memory)")
    g.add_argument("--no-mmap", dest="mmap", action="store_false",
                   help="read the weights into memory (huge pages on Linux: faster decoding); the default "
                        "on Linux for a model at most half the free memory")
    g.add_argument("--mlock", action="store_true", help="keep the weights in RAM (no swapping out)")
    g.add_argument("--deterministic", action="store_true",
                   help="batch-invariant numerics: a sequence's logits do not depend on how many tokens or "
                        "sequences share its evaluation, so speculation and -np N give plain decoding's greedy "
                        "output token for token (CPU only; slower: docs/speculation.md, \"Deterministic numerics\")")
    g.add_argument("--repack", dest="repack", action="store_true", default=True,
                   help="repack the weights for the CPU's kernels (the default)")
    g.add_argument("-nr", "--no-repack", dest="repack", action="store_false",
                   help="leave the weights as stored (slower on most CPUs); the matmul kernels then change "
                        "at another batch size (Gemma 3 270M Q4_K_M's logits: from 8 tokens an evaluation "
                        "on, not 4; scripts/batch_composition.py)")
    g.add_argument("-lm", "--load-mode", choices=["auto", "none", "mmap", "mlock", "mmap+mlock"], default=None,
                   help="llama.cpp's newer spelling of --mmap / --no-mmap / --mlock (auto: as with neither)")
    g.add_argument("-v", "--verbose", action="store_true", help="let ggml log to stderr")
    g.add_argument("-lv", "--verbosity", "--log-verbosity", dest="verbosity", type=int, default=None, metavar="N",
                   help="llama.cpp's log threshold (0 output, 1 error, 2 warning, 3 info, 4 debug; default 3): "
                        "4 and above as -v; the server's line per request is info (below 3: none); the "
                        "CLI below 2 as --log-disable")


def add_interactive_args(ap: argparse.ArgumentParser) -> None:
    """llama-cli's interactive flags (the CLI's only)."""
    g = ap.add_argument_group("llama-cli's interactive mode")
    g.add_argument("-i", "--interactive", dest="interactive", action="store_true",
                   help="llama-cli's interactive mode: here a conversation (-cnv)")
    g.add_argument("--interactive-first", dest="interactive_first", action="store_true",
                   help="a conversation (-cnv) that waits for your first message")
    g.add_argument("--no-display-prompt", dest="display_prompt", action="store_false", default=True,
                   help="do not echo the prompt before the answer")
    g.add_argument("--keep", type=int, default=None, help=argparse.SUPPRESS)         # checks.py: no effect
    g.add_argument("--simple-io", dest="simple_io", action="store_true", help=argparse.SUPPRESS)
    g.add_argument("--perf", dest="perf", action="store_true", default=None,
                   help="print the timings at the end (the default here; with --log-disable too)")
    g.add_argument("--no-perf", dest="perf", action="store_false")


def add_accepted_args(ap: argparse.ArgumentParser) -> None:
    """llama.cpp flags its users type every day that have no counterpart here: accepted, each
    with a one-line warning saying what happens instead (flags/checks.py), never an error."""
    g = ap.add_argument_group("llama.cpp flags accepted with a warning (no counterpart here)")
    g.add_argument("-ub", "--ubatch-size", dest="ubatch_size", type=int, default=None, help=argparse.SUPPRESS)
    g.add_argument("-tb", "--threads-batch", dest="threads_batch", type=int, default=None, help=argparse.SUPPRESS)
    g.add_argument("--no-warmup", dest="no_warmup", action="store_true",
                   help="no warm-up run (here only --compare warms up, and this skips it)")
    g.add_argument("-dev", "--device", dest="device", default=None, help=argparse.SUPPRESS)
    g.add_argument("--mirostat", type=int, default=0, help=argparse.SUPPRESS)
    g.add_argument("--mirostat-lr", dest="mirostat_lr", type=float, default=None, help=argparse.SUPPRESS)
    g.add_argument("--mirostat-ent", dest="mirostat_ent", type=float, default=None, help=argparse.SUPPRESS)
    g.add_argument("--typical", dest="typical", type=float, default=1.0, help=argparse.SUPPRESS)
    g.add_argument("--lora", action="append", default=[], help=argparse.SUPPRESS)
    g.add_argument("--lora-scaled", dest="lora_scaled", nargs=2, action="append", default=[], help=argparse.SUPPRESS)


class Parser(argparse.ArgumentParser):
    """argparse with llama.cpp's one-line errors: an unknown flag is named with its closest known
    spelling, not followed by the whole usage block."""

    def error(self, message: str):
        if message.startswith("unrecognized arguments: "):
            self.unknown(message.split(": ", 1)[1].split()[0])
        print(f"error: {message}\nsee {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)

    def unknown(self, flag: str):
        close = self.closest(flag)
        self.error(f"unknown argument: {flag}" + (f" (did you mean {close}?)" if close else ""))

    def closest(self, flag: str) -> str | None:
        """The known flag the user most likely meant: one it begins (--reverse: --reverse-prompt),
        else the most similar spelling (--draft-ma: --draft-max; _ read as -)."""
        names = [s for a in self._actions for s in a.option_strings]
        norm = flag.replace("_", "-")
        if norm in names:
            return norm
        longer = sorted((n for n in names if n.startswith(norm) and len(norm) > 2), key=len)
        if longer:
            return longer[0]
        close = difflib.get_close_matches(norm, names, n=1, cutoff=0.7)
        return close[0] if close else None


def build_parser(description: str | None = None, prog: str = "pyllamaspec") -> Parser:
    ap = Parser(prog=prog, description=description, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    for add in (add_model_args, add_prompt_args, add_conversation_args, add_interactive_args, add_sampling_args,
                add_speculation_args, add_resource_args, add_accepted_args):
        add(ap)
    return ap


_MULTI_LETTER = re.compile(r"-[A-Za-z][A-Za-z-]+")
_LONG = re.compile(r"--[A-Za-z][A-Za-z0-9-]*")


def _unknown(ap: argparse.ArgumentParser, flag: str):
    if isinstance(ap, Parser):
        ap.unknown(flag)
    ap.error(f"unknown argument: {flag}")


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """argparse as llama.cpp parses: an unknown multi-letter single-dash flag is refused by name
    (-fitt is not -f itt), and a flag's value is the next argument whatever it looks like
    (-p -hello, -n -1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    known = {s: a for a in ap._actions for s in a.option_strings}
    out, i = [], 0
    given: dict[str, str] = {}             # dest -> the flag as spelled (warnings name it so)
    while i < len(argv):
        tok = argv[i]
        action = known.get(tok)
        name = tok.split("=", 1)[0]
        if action is None and (_MULTI_LETTER.fullmatch(tok) or _LONG.fullmatch(name)):
            if name not in known:
                _unknown(ap, name)
        if name in known:
            given[known[name].dest] = name
        takes = action is not None and (action.nargs is None or
                                        (action.nargs == "?" and i + 1 < len(argv) and argv[i + 1] in (action.choices or ())))
        if takes and i + 1 < len(argv):
            long = max(action.option_strings, key=len)      # --name=value: argparse takes the value as is
            out.append(f"{long}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    ns = ap.parse_args(out)
    ns.given = given
    _verbosity(ap, ns)
    return ns


def _verbosity(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """-lv N as llama.cpp's threshold: 4 (debug) and above lets ggml log (-v); the levels below
    are read where they decide (request_lines; the CLI's quiet)."""
    n = getattr(a, "verbosity", None)
    if n is None:
        return
    if n < 0:
        ap.error(f"-lv/--verbosity must be 0 or more, got {n}")
    if n >= 4 and hasattr(a, "verbose"):
        a.verbose = True
    if n < 2 and hasattr(a, "log_disable"):
        a.log_disable = True


def request_lines(a: argparse.Namespace) -> bool:
    """Whether the server logs its line per request (info): not with --log-disable or -lv below 3."""
    n = getattr(a, "verbosity", None)
    return not getattr(a, "log_disable", False) and (n is None or n >= 3)


def penalty_kwargs(a: argparse.Namespace) -> dict:
    """The penalties given (llama.cpp's flags and meaning; see SamplingParams)."""
    given = {k: getattr(a, k) for k in PENALTIES if getattr(a, k) is not None}
    if a.repeat_last_n is not None:
        given["penalty_last_n"] = a.repeat_last_n
    return given


def gpu_available() -> bool:
    from ...engine._native import system_info
    info = system_info()
    return any(name in info for name in ("CUDA", "Metal", "Vulkan", "HIP", "SYCL"))


def warn_gpu_layers(a: argparse.Namespace) -> None:
    """llama.cpp's warning when layers are asked for the GPU of a build without one."""
    for flag, n in (("--gpu-layers", a.n_gpu_layers), ("--gpu-layers-draft", a.n_gpu_layers_draft)):
        if n != 0 and not gpu_available():
            print(f"warning: no usable GPU found, {flag} option will be ignored\n"
                  "warning: one possible reason is that pyllamaspec was built without GPU support "
                  "(see docs/building.md)", file=sys.stderr)
    if not gpu_available():
        a.n_gpu_layers = a.n_gpu_layers_draft = 0
