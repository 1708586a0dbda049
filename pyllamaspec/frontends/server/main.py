"""python -m pyllamaspec.server: an OpenAI-compatible server, with llama-server's flags.

    python -m pyllamaspec.server -m TARGET.gguf -md DRAFT.gguf --host 127.0.0.1 --port 8080
    python -m pyllamaspec.server -m TARGET.gguf --lookup -c 4096 -a my-model --api-key SECRET
    python -m pyllamaspec.server -hf user/repo:Q4_K_M -hfd user/small-repo

Then any OpenAI client: base_url http://127.0.0.1:8080/v1. Sampling flags (--temp, --top-k,
...) are the defaults of requests that do not set them; -n is the default max_tokens.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from contextlib import ExitStack

from . import ServerDependencyError, check_dependencies


def build_parser() -> argparse.ArgumentParser:
    from ..flags.args import (Parser, add_accepted_args, add_mmproj_args, add_model_args, add_reasoning_args,
                              add_resource_args, add_sampling_args, add_speculation_args)
    ap = Parser(prog="python -m pyllamaspec.server", description=__doc__, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    for add in (add_model_args, add_sampling_args, add_speculation_args, add_resource_args, add_accepted_args):
        add(ap)
    add_native_args(ap)
    g = ap.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    g.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    g.add_argument("-a", "--alias", help="the model's name in responses and /v1/models (default: its file name)")
    g.add_argument("--api-key", help="clients must send Authorization: Bearer API_KEY (/health excepted)")
    g.add_argument("--api-key-file", help="read the API key from the first line of this file")
    g.add_argument("-n", "--n-predict", type=int, default=-1,
                   help="default max_tokens of a request (-1 = until the end or the context is full)")
    g.add_argument("--chat-template", help="a built-in template (chatml, llama3, gemma, llama2, mistral), "
                                           "Jinja source, or a file, in place of the model's")
    g.add_argument("--chat-template-file", help="a Jinja template file, in place of the model's")
    add_mmproj_args(g, "vision projector (llama.cpp's mmproj GGUF): chat messages may then hold image_url parts "
                       "(data URLs; URLs are never fetched); with -hf, the repository's is loaded unless --no-mmproj")
    add_reasoning_args(g)
    g.add_argument("-cram", "--cache-ram", dest="cache_ram", type=int, default=8192, metavar="MiB",
                   help="host memory for prompts a slot lets go of, resumed when a request shares them "
                        "(llama-server's; default 8192, 0: off)")
    g.add_argument("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints", dest="ctx_checkpoints", type=int, default=8,
                   metavar="N", help="a hybrid model's checkpoints a slot keeps: its recurrent state where a chat's "
                                     "user turns begin (default 8, 0: none)")
    g.add_argument("--media-path", dest="media_path", default=None, metavar="DIR",
                   help="directory for local images: chat requests may name its files by file:// URLs with "
                        "relative paths (llama-server's; default: off)")
    g.add_argument("--slot-save-path", dest="slot_save_path", default=None, metavar="DIR",
                   help="where POST /slots/{id}?action=save|restore writes and reads slot files")
    g.add_argument("-np", "--parallel", type=int, default=-1,
                   help="slots: requests decoded together, every round's drafts verified in one target "
                        "evaluation (default -1 = auto: 4, sharing the whole context)")
    g.add_argument("-kvu", "--kv-unified", dest="kv_unified", action="store_true", default=None,
                   help="every slot may use the whole context (default with -np auto; else each slot "
                        "gets -c / -np tokens, as llama-server)")
    g.add_argument("-no-kvu", "--no-kv-unified", dest="kv_unified", action="store_false")
    g.add_argument("--max-body-size", dest="max_body_size", type=int, default=16 << 20, metavar="BYTES",
                   help="requests with a larger body are refused (413) before it is read (default 16 MiB; 0 = no limit)")
    g.add_argument("--log-disable", dest="log_disable", action="store_true",
                   help="no line per request (by default each request's counts and timings go to stderr, as "
                        "llama-server logs a task's)")
    g.add_argument("--head-timeout", dest="head_timeout", type=float, default=10.0, metavar="SECONDS",
                   help="a connection must send a whole request head within this long of opening or of its last "
                        "answer, else it is closed (idle and slow-header connections; default 10, 0 = no limit)")
    g.add_argument("-to", "--timeout", dest="timeout", type=float, default=600.0, metavar="SECONDS",
                   help="llama-server's read/write timeout: a request body that stops arriving, or an answer the "
                        "client stops reading, is cut after this long (default 600; 0 = none)")
    g.add_argument("--max-header-size", dest="max_header_size", type=int, default=16 << 10, metavar="BYTES",
                   help="requests with larger headers are refused (431; default 16 KiB; 0 = no limit)")
    g.add_argument("-cb", "--cont-batching", action="store_true", default=True,
                   help="continuous batching: always on (llama-server's flag, accepted)")
    g.add_argument("-nocb", "--no-cont-batching", dest="cont_batching", action="store_false",
                   help="not supported: continuous batching stays on")
    return ap


def add_native_args(ap: argparse.ArgumentParser) -> None:
    """llama-server's switches for its own routes (native_routes.py)."""
    g = ap.add_argument_group("llama-server routes")
    g.add_argument("--metrics", action="store_true", help="serve /metrics (Prometheus text format)")
    g.add_argument("--slots", dest="slots", action="store_true", default=True, help="serve /slots (default: on)")
    g.add_argument("--no-slots", dest="slots", action="store_false")
    g.add_argument("--slots-debug", dest="slots_debug", action="store_true",
                   help="the operator's view: /slots shows each slot's prompt and answer, /health the request "
                        "counters (by default neither: a client's text is its own; with --api-key, a request "
                        "carrying the key gets this view)")
    g.add_argument("--embedding", "--embeddings", dest="embeddings", action="store_true",
                   help="serve /v1/embeddings and /embedding (the final hidden states, pooled by --pooling)")
    g.add_argument("--pooling", choices=["none", "mean", "last"], default=None,
                   help="how an embedding pools a text's tokens (default: the model's, else none: then only "
                        "/embedding answers, with one row per token)")
    g.add_argument("--embd-normalize", dest="embd_normalize", type=int, default=2,
                   help="normalization of pooled embeddings: 2 Euclidean (default), 1 taxicab, 0 max absolute "
                        "(int16 range), -1 none, p > 2 the p-norm")
    g.add_argument("--webui", dest="ui", action="store_true", default=True, help="the chat page at / (default: on)")
    g.add_argument("--no-webui", dest="ui", action="store_false")


def _pooling(a: argparse.Namespace, target) -> str:
    """--pooling, else the model's own (GGUF <arch>.pooling_type: 1 mean, 3 last), else none, as
    llama-server."""
    if a.pooling:
        return a.pooling
    kind = target.meta(f"{target.info.arch}.pooling_type")
    return {1: "mean", 3: "last"}.get(kind, "none")


def _heap_returns_large_blocks() -> None:
    """glibc raises its mmap threshold after a large block is freed, so that a huge request's
    buffers (a 3 MB body's 200,000-entry map) later come from the heap and stay there when freed:
    the server would keep tens of MB per hostile request. A fixed threshold keeps every block of
    1 MiB or more mapped, and given back when freed. Elsewhere nothing to do."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)          # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _slot_dir(path: str | None) -> str | None:
    """--slot-save-path, made if missing (as llama-server does)."""
    if path is None:
        return None
    from ...errors import PyllamaspecError
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise PyllamaspecError(f"--slot-save-path {path}: {e.strerror}") from None
    return os.path.realpath(path)


def _media_dir(path: str | None) -> str | None:
    """--media-path (main checked it is a directory), as an absolute path."""
    return None if path is None else os.path.realpath(path)


def _open_projector(a: argparse.Namespace, stack: ExitStack):
    """The vision projector image_url parts need: --mmproj FILE, else the one -hf found in the
    repository (as llama-server loads it; --no-mmproj: none). A projector found by -hf that cannot
    be used (a type this engine does not run yet, a damaged file) leaves the server text only with
    a warning (refusing to serve the text model would be a step back); given by --mmproj, it is an
    error."""
    from ...errors import ModelFormatError, UnsupportedModelError
    from ...vision.projector import Projector
    from ..flags.args import projector_kwargs
    if a.mmproj:
        return stack.enter_context(Projector(a.mmproj, **projector_kwargs(a)))
    if not getattr(a, "hf_mmproj", None):
        return None
    try:
        return stack.enter_context(Projector(a.hf_mmproj, **projector_kwargs(a)))
    except (UnsupportedModelError, ModelFormatError) as e:
        print(f"warning: {a.hf_repo}'s vision projector cannot be used here ({e}): text only, image_url parts "
              "are refused (--no-mmproj: not fetched)", file=sys.stderr)
        return None


def _api_key(a: argparse.Namespace) -> str | None:
    if a.api_key_file:
        with open(a.api_key_file, encoding="utf-8") as f:
            return f.readline().strip() or None
    return a.api_key or None


def main(argv: list[str] | None = None) -> int:
    try:
        check_dependencies()
    except ServerDependencyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import uvicorn

    from ...errors import PyllamaspecError
    from ..flags.args import parse_args, request_lines
    from ..flags.launch import open_models, resolve_models, settings_from_args
    from ...speculation.drafters import spec_types_of
    from .app import create_app
    from .native_routes import Options
    from .worker import Defaults, Worker
    from ...engine.head import DraftHead

    ap = build_parser()
    a = parse_args(ap, argv)
    # the line per request is info: --log-disable or -lv below 3 drops it (as llama-server's threshold)
    logging.getLogger("pyllamaspec.server").setLevel(logging.INFO if request_lines(a) else logging.WARNING)
    a.prompt = a.file = None                   # what cli's helpers read and a server has not
    if not (a.model or a.hf_repo or a.demo):
        ap.error("give a model: -m TARGET.gguf, -hf user/repo[:QUANT] or --demo")
    if a.parallel == 0 or a.parallel < -1 or a.parallel > 256:
        ap.error(f"-np/--parallel must be -1 (auto) or 1 to 256, got {a.parallel}")
    if a.media_path is not None and not os.path.isdir(a.media_path):
        ap.error(f"--media-path {a.media_path}: not a directory")     # before any model loads
    auto = a.parallel == -1
    n_parallel = 4 if auto else a.parallel            # llama-server's auto: 4 slots, one shared context
    kv_unified = auto if a.kv_unified is None else a.kv_unified
    if sys.platform.startswith("linux"):
        _heap_returns_large_blocks()
    from ..flags.checks import mmproj_flags, unsupported_flags
    for w in unsupported_flags(a) + mmproj_flags(a):
        print(f"warning: {w}", file=sys.stderr)
    try:
        sampling, draft_params, _ = settings_from_args(a)
        if a.verbose:
            from ...engine._native import set_verbose
            set_verbose(True)
        key = _api_key(a)
        target_path, draft_path, _ = resolve_models(a)
        with ExitStack() as stack:
            # a sequence per slot (a hybrid model keeps a state ring per slot)
            target, drafter = open_models(a, target_path, draft_path, stack, n_slots=n_parallel)
            if draft_params.spec_type is None and a.spec_types:      # the target's own file as -md: MTP
                draft_params.spec_type = a.spec_types
            if a.mtp and target.n_mtp_layers < 1:
                raise PyllamaspecError(f"--spec-type draft-mtp: {target_path} has no MTP (NextN) layers")
            if isinstance(drafter, type(target)):
                target.check_draft(drafter)
            types = draft_params.spec_type if draft_params.spec_type is not None else spec_types_of(drafter)
            if drafter is None and types:               # drafting without a draft file
                drafter = ",".join(types)
            if isinstance(drafter, DraftHead) and n_parallel > 1:
                if not auto:                            # its features follow one sequence of the target
                    raise PyllamaspecError(f"-np {n_parallel}: a draft head ({drafter.kind}) drafts for one "
                                           f"sequence of its target; run it with -np 1")
                n_parallel = 1
            defaults = Defaults(sampling, draft_params, seeded=a.seed >= 0,
                                chat_template=a.chat_template_file or a.chat_template,
                                max_tokens=a.n_predict if a.n_predict >= 0 else None, constraint=a.constraint,
                                n_parallel=n_parallel, kv_unified=kv_unified, reasoning=a.reasoning_options,
                                template_kwargs=a.template_kwargs)
            projector = _open_projector(a, stack)
            from ..flags.launch import open_flag_draft_projector   # --mmproj-draft: checked against -md
            draft_projector = open_flag_draft_projector(a, drafter, target, stack)
            worker = Worker(target, drafter, defaults, projector, draft_projector)
            alias = a.alias or os.path.basename(target_path)
            opts = Options(metrics=a.metrics, slots=a.slots, embeddings=a.embeddings, pooling=_pooling(a, target),
                           normalize=a.embd_normalize, ui=a.ui, operator=a.slots_debug,
                           slot_save_path=_slot_dir(a.slot_save_path), media_path=_media_dir(a.media_path))
            app = create_app(worker, alias, key, opts, model_path=target_path, max_body=a.max_body_size,
                             max_head=a.max_header_size)
            what = ("plain decoding" if not types else f"{','.join(types)}"
                    + (f" with {draft_path}" if draft_path and drafter is not None else ""))
            vision = f", vision projector {os.path.basename(projector.path)}" if projector else ""
            print(f"pyllamaspec server: {alias} ({what}{vision}), n_ctx {target.n_ctx}, {n_parallel} slot(s) of "
                  f"{worker.n_ctx_slot}, listening on http://{a.host}:{a.port}", file=sys.stderr, flush=True)
            # a stream still running at shutdown is cut after 5 s (its generation then stops)
            from .http import guarded_protocol
            import gc
            gc.freeze()     # what start-up made lives as long as the server: collections skip it
            uvicorn.run(app, host=a.host, port=a.port, log_level="info" if a.verbose else "warning",
                        timeout_graceful_shutdown=5, http=guarded_protocol(a.head_timeout, a.timeout))
        return 0
    except (PyllamaspecError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def run() -> int:
    """`python -m pyllamaspec.server`: main() with warnings logged to stderr (and a line per
    request unless --log-disable or -lv below 3)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from ..flags.checks import show_warning
    warnings.showwarning = show_warning            # one line each, as the CLI
    return main()
