"""generate(): text in, text out, with or without a draft model; streaming as a generator."""
from __future__ import annotations

import os
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, replace
from typing import Iterator, Sequence, Union

import numpy as np

from ..engine import _args
from ..engine.cancel import Cancel
from ..engine.chat_template import ChatPrompt, is_messages
from ..engine.head import HEAD_TYPES, DraftHead, file_arch
from ..engine.model import DRAFT_OPTIONS, Model
from ..engine.sampling import MAX_LOGPROBS, SamplingParams, TokenLogprobs
from ..errors import EvaluationInterrupted, InvalidArgumentError, ModelClosedError, PyllamaspecError, RpcError
from ..speculation.decoder import Decoder, DraftParams, Stats
from ..speculation.params import NgramParams
from ..speculation.spec_types import parse as parse_spec_types
from .output import Piece, TextOutput
from .structured.formats import GrammarSpec, constraint_spec

ModelLike = Union[str, "os.PathLike[str]", Model]


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]            # generated ids (end-of-generation token excluded)
    prompt_tokens: list[int]
    finish_reason: str           # "stop" (eog token or stop string), "length", "context_full", "cancelled"
    stats: Stats
    seed: int
    logprobs: list[TokenLogprobs] | None = None   # one per generated token, when asked
    message: dict | None = None  # a chat's answer as read under its format (tool calls, JSON)


def _open(m: ModelLike, stack: ExitStack, **kwargs) -> Model:
    if isinstance(m, Model):
        if m.closed:
            raise ModelClosedError("the model is closed")
        return m
    if isinstance(m, (str, os.PathLike)):
        return stack.enter_context(Model(m, **kwargs))
    raise InvalidArgumentError(f"a model is a path or a Model, got {type(m).__name__}")


def _open_draft(d, stack: ExitStack, n_gpu_layers: int = 0, **kwargs) -> "Model | DraftHead | str | None":
    """A draft given as a path is opened as what its file is: an EAGLE-3 / DFlash head, else a
    draft model; "ngram", "mtp" and --spec-type names stay names."""
    if d is None or isinstance(d, (Model, DraftHead)):
        if getattr(d, "closed", False):
            raise InvalidArgumentError("the draft model is closed")
        return d
    if isinstance(d, str) and not os.path.exists(d) and (d in ("ngram", "mtp") or _is_type_list(d)):
        return d
    if file_arch(d) in HEAD_TYPES:
        return stack.enter_context(DraftHead(d, n_gpu_layers=n_gpu_layers))
    return stack.enter_context(Model(d, n_gpu_layers=n_gpu_layers, **DRAFT_OPTIONS, **kwargs))


def _mtp_if_same(draft, target: Model, spec_type) -> "Model | DraftHead | str | None":
    """The target's own file as its draft means its MTP layers, when it has them (as llama.cpp
    detects draft-mtp from nextn tensors in the draft's file)."""
    if spec_type is None and isinstance(draft, (str, os.PathLike)) and os.path.exists(draft) \
            and os.path.samefile(draft, target.path) and target.n_mtp_layers > 0:
        return "mtp"
    return draft


def _is_type_list(s: str) -> bool:
    try:
        parse_spec_types(s)
        return True
    except PyllamaspecError:
        return False


def _max_threads() -> int:
    from ..engine._native import lib
    return lib.psl_max_threads()


def _check_stop(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    if not isinstance(stop, (str, list, tuple)):
        raise InvalidArgumentError(f"stop must be a non-empty string or a list of them, got {type(stop).__name__}")
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) and s for s in stops):
        raise InvalidArgumentError("stop must be a non-empty string or a list of them")
    return stops


def iter_generate(prompt: str | Sequence[int], model: Model, draft_model: "Model | DraftHead | str | None", *,
                  sampling: SamplingParams, draft: DraftParams, max_tokens: int,
                  stop: list[str], result: dict, add_special: bool = True,
                  parse_special: bool = True, cancel: Cancel | None = None,
                  logprobs: int | None = None, per_token: bool = False,
                  cache_prompt: bool = True, progress=None,
                  constraint: GrammarSpec | None = None) -> Iterator[Piece]:
    """The generation loop. Yields Pieces (per_token: one per generated token, then the text
    held back to the end as a Piece of token -1); fills result with tokens, finish reason,
    stats, logprobs (a list, when asked) and "eog" (the Piece of the end-of-generation token
    that stopped it, if one did). prompt: text, token ids, or a ChatPrompt (rendered with the
    model's chat template). cache_prompt: keep what the models' caches hold of the prompt
    (else they start empty). progress(done, total): the prompt's evaluation, batch by batch.
    constraint: the grammar every token respects (a chat's JSON schema becomes llama-server's
    response-format grammar around the template's generation prompt)."""
    if isinstance(draft_model, Model):
        model.check_draft(draft_model)
    if isinstance(prompt, ChatPrompt):
        ids, chat_stops = prompt.render(model)
        stop = stop + [s for s in chat_stops if s not in stop]
        if constraint is not None:
            constraint = constraint.for_chat(prompt, model)
            result["reader"] = constraint.reader()     # how chat() reads the answer
    else:
        ids = prompt_ids(prompt, model, add_special, parse_special)
    grammar = constraint.make(model) if constraint is not None else None
    dec = Decoder(model, draft_model, sampling, draft, logprobs=logprobs, grammar=grammar)
    result.setdefault("reader", None)
    result.update(tokens=[], prompt_tokens=ids, finish_reason="length", stats=dec.stats, policy=dec.policy,
                  text="", logprobs=None if logprobs is None else [], eog=None)
    t0 = None                    # when generation (after the prompt) started
    try:
        with cancel.watching() if cancel is not None else nullcontext():
            # sequences of its own in the models (generations sharing them never mix)
            dec.open(ids, fresh=not cache_prompt, stop=cancel.is_set if cancel is not None else None)
            if cancel is not None:
                cancel.watch(*dec.sequences())
            dec.prefill(ids, fresh=not cache_prompt, progress=progress)
            if max_tokens == 0:
                return
            t0 = time.perf_counter()
            yield from _decode(dec, max_tokens, stop, result, cancel, per_token)
    except EvaluationInterrupted:
        if cancel is None or not cancel.is_set():
            raise
        result["finish_reason"] = "cancelled"
    except RpcError as e:             # a server was lost: say what had been produced
        e.tokens, e.text = list(result["tokens"]), result["text"]
        raise
    finally:
        if t0 is not None:
            dec.stats.n_generated = len(result["tokens"])
            dec.stats.t_generate = time.perf_counter() - t0
            dec.keep(len(ids) + len(result["tokens"]))
        dec.close()


def prompt_ids(prompt: str | Sequence[int], model: Model, add_special: bool = True,
               parse_special: bool = True) -> list[int]:
    """A prompt's token ids: text tokenized, ids checked against the vocabulary."""
    if isinstance(prompt, str):
        return model.tokenize(prompt, add_special=add_special, parse_special=parse_special)
    return _args.token_ids("prompt", prompt, model.n_vocab).tolist()


def _decode(dec: Decoder, max_tokens: int, stop: list[str], result: dict,
            cancel: Cancel | None, per_token: bool = False) -> Iterator[Piece]:
    """Rounds of dec until a stop: yields the text as it becomes final (held back while it could
    still be the start of a stop string); result["text"] is what went out."""
    out = TextOutput(dec.target, stop, max_tokens, result, per_token)
    ok = False
    try:
        while not out.done:
            if cancel is not None and cancel.is_set():
                out.finish("cancelled")
                break
            if dec.room() < 1:
                out.finish("context_full")
                break
            new = dec.step(out.wants)
            yield from out.push(new, dec.round_logprobs if out.logprobs is not None else None)
        ok = True
    finally:
        pieces = out.close(flush=ok)
    yield from pieces


@dataclass
class GenerationResponse:
    """One item of stream_generate (mlx-lm's name): the text that became final with `token`
    (possibly "" while a stop string or a UTF-8 character is incomplete), whether the drafter
    proposed it, and its TokenLogprobs when asked. The stream ends with one more response that
    carries finish_reason and stats (and the text held back to the end): its token is the
    end-of-generation token when one stopped the generation (not part of the text), else -1."""
    text: str
    token: int
    from_draft: bool
    logprobs: TokenLogprobs | None = None
    finish_reason: str | None = None
    stats: Stats | None = None


def _check_prompt(prompt) -> None:
    if isinstance(prompt, (str, ChatPrompt)):
        return
    if is_messages(prompt) or (isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], dict)):
        raise InvalidArgumentError("prompt is a list of messages; generate() takes text or token ids "
                                   "(for a conversation use pyllamaspec.chat(messages, model))")
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise InvalidArgumentError(f"prompt must be a string or a non-empty list of token ids, "
                                   f"got {type(prompt).__name__}")
    _args.int_sequence("prompt", prompt)         # types now; the vocabulary range once loaded


def is_batch(prompt) -> bool:
    """Several prompts: a list of strings, or of token-id lists (a flat list of ints is one)."""
    return (isinstance(prompt, (list, tuple)) and bool(prompt)
            and all(isinstance(p, str) or (isinstance(p, (list, tuple, np.ndarray)) and not is_messages(p))
                    for p in prompt))


def _prepare(prompt, model, draft_model, *, max_tokens, temperature, top_k, top_p, min_p, seed, n_draft,
             n_min, p_min, adaptive, ngram, draft_vocab, stop, n_ctx, n_threads, n_gpu_layers, add_special,
             parse_special, cancel, repeat_penalty, frequency_penalty, presence_penalty, penalty_last_n,
             logprobs, cache_prompt, spec_type, ngram_params, grammar=None, json_schema=None, response_format=None,
             forced=True, _constraint=None, n_parallel=None, tree=None, tree_nodes=0):
    """Checks every argument before any work; returns (run, seed): run(per_token, result) is the
    generation as a generator of Pieces, loading what needs loading. Several prompts: (run,
    seeds), run(results) decoding them together (a list of result dicts)."""
    if adaptive is None:
        adaptive = seed is None or temperature == 0
    batch = is_batch(prompt)
    seeds = [seed if seed is not None else int.from_bytes(os.urandom(8), "little") for _ in (prompt if batch else [0])]
    seed = seeds[0]
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                              repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                              presence_penalty=presence_penalty, penalty_last_n=penalty_last_n)
    draft = DraftParams(n_draft=n_draft, n_min=n_min, p_min=p_min, adaptive=adaptive, ngram=ngram,
                        draft_vocab=draft_vocab, forced=forced, spec_type=spec_type,
                        ngrams=NgramParams() if ngram_params is None else ngram_params, tree=tree,
                        tree_nodes=tree_nodes)
    constraint = constraint_spec(grammar, json_schema, response_format)
    if _constraint is not None:               # a chat's tools (chat() makes it)
        if constraint is not None:
            raise InvalidArgumentError("Cannot use grammar, json_schema or response_format constraints with tools")
        constraint = _constraint
    stops = _check_stop(stop)
    max_tokens = _args.integer("max_tokens", max_tokens)
    _args.integer("n_ctx", n_ctx, 0, _args.MAX_CTX)
    _args.integer("n_gpu_layers", n_gpu_layers, -1)
    if n_threads is not None:
        _args.integer("n_threads", n_threads, 0, _max_threads())
    if logprobs is not None:
        _args.integer("logprobs", logprobs, 0, MAX_LOGPROBS)
    for p in prompt if batch else [prompt]:
        _check_prompt(p)
    if n_parallel is not None:
        n_parallel = _args.integer("n_parallel", n_parallel, 1, 256)
    if not isinstance(cache_prompt, bool):
        raise InvalidArgumentError(f"cache_prompt must be True or False, got {cache_prompt!r}")
    if cancel is not None and not isinstance(cancel, Cancel):
        raise InvalidArgumentError(f"cancel must be a pyllamaspec.Cancel, got {type(cancel).__name__}")
    if not isinstance(model, (str, os.PathLike, Model)):
        raise InvalidArgumentError(f"model must be a path or a Model, got {type(model).__name__}")
    if not isinstance(draft_model, (str, os.PathLike, Model, DraftHead, type(None))):
        raise InvalidArgumentError(f"draft_model must be a path, a Model, a DraftHead, 'ngram', 'mtp' or "
                                   f"speculative type names, got {type(draft_model).__name__}")

    def models(stack: ExitStack):
        kw = dict(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers)
        target = _open(model, stack, **kw)
        return target, _open_draft(_mtp_if_same(draft_model, target, spec_type), stack, **kw)

    def run(per_token: bool, result: dict) -> Iterator[Piece]:
        with ExitStack() as stack:
            target, dm = models(stack)
            yield from iter_generate(prompt, target, dm, sampling=sampling, draft=draft,
                                     max_tokens=max_tokens, stop=stops, result=result,
                                     add_special=add_special, parse_special=parse_special, cancel=cancel,
                                     logprobs=logprobs, per_token=per_token, cache_prompt=cache_prompt,
                                     constraint=constraint)

    def run_many(results: list[dict]) -> None:
        from .generate_batch import generate_together
        with ExitStack() as stack:
            target, dm = models(stack)
            ids = [prompt_ids(p, target, add_special, parse_special) for p in prompt]
            results[:] = generate_together(ids, target, dm, [replace(sampling, seed=s) for s in seeds], draft,
                                           max_tokens=max_tokens, stop=stops, cancel=cancel, logprobs=logprobs,
                                           cache_prompt=cache_prompt, n_parallel=n_parallel, constraint=constraint)
    return (run_many, seeds) if batch else (run, seed)


def generate(prompt: str | Sequence[int], model: ModelLike, draft_model: ModelLike | str | None = None, *,
             max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
             min_p: float = 0.05, seed: int | None = None, n_draft: int = 16, n_min: int = 0,
             p_min: float | None = None, adaptive: bool | None = None, ngram: int = 3, draft_vocab: int = 32768,
             stop: str | Sequence[str] | None = None, stream: bool = False,
             n_ctx: int = 4096, n_threads: int | None = None, n_gpu_layers: int = 0,
             add_special: bool = True, parse_special: bool = True, cancel: Cancel | None = None,
             repeat_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
             penalty_last_n: int = 64, logprobs: int | None = None, cache_prompt: bool = True,
             spec_type: str | Sequence[str] | None = None, ngram_params: NgramParams | None = None,
             grammar: str | None = None, json_schema: dict | str | None = None, response_format: dict | None = None,
             forced: bool = True, _constraint: GrammarSpec | None = None, n_parallel: int | None = None,
             tree: bool | None = None, tree_nodes: int = 0):
    """Generate text from `prompt` with `model`, speculatively when `draft_model` is given.

    Several prompts (a list of strings, or of token-id lists; a flat list of ints is one
    tokenized prompt) are decoded together and give a list of results, each as its own call
    would (greedy: the same tokens; sampled: the same distribution, and with a seed the same
    text: each prompt gets that seed), every round's drafts of all of them verified in one
    target evaluation; n_parallel (default: all, up to the model's sequences and what its
    context holds) caps how many run at once, the others wait their turn. Each prompt has its
    own grammar state under grammar / json_schema. A draft head (EAGLE-3, DFlash, a Gemma 4
    assistant) follows one sequence of its target: with it, n_parallel must be 1.

    Models are paths (loaded for this call) or loaded Model objects (reused: what their caches
    hold of the prompt, its longest common prefix with the last call's, is not evaluated again
    unless cache_prompt=False; see pyllamaspec.chat for conversations); draft_model="ngram"
    drafts by prompt lookup (n-gram size `ngram`) instead of a model, draft_model="mtp" with the
    target's own MTP (NextN) layers (qwen35 files that carry them; UnsupportedModelError else);
    an EAGLE-3 or DFlash head (a path to its GGUF, or a DraftHead) drafts from the target's
    hidden states. spec_type: llama.cpp's --spec-type names ("ngram-mod", "ngram-mod,draft-eagle3",
    ...; default: what draft_model is), chained in llama.cpp's order (the first non-empty draft
    wins a round); ngram_params: the n-gram kinds' parameters (llama.cpp's defaults).
    adaptive lets a cost model pick the draft length each round (up to n_draft, 0 = plain
    decoding when speculation would not pay) and where each draft stops; p_min (a draft stops
    where its top probability is below it) then defaults to none, else to llama.cpp's 0.75. Its choices follow measured times, and with
    sampling the exact sample drawn depends on them (its distribution never does), so by default
    (None) it is on unless a seed is given with temperature > 0: same seed, same output.
    draft_vocab: a draft model with over twice as many tokens computes the logits of this many
    common ones only, restored when the call ends (0 = all).
    tree: a draft model drafts a token tree each round (several branches verified in one target
    evaluation, exactly: speculation/tree.py; "ngram": the continuations of the last two matches),
    False a chain, None (default) lets the cost model choose (a draft model's trees only);
    n_draft stays the depth, tree_nodes is the node budget (0: twice the depth).
    temperature 0 is greedy. repeat_penalty, frequency_penalty, presence_penalty and
    penalty_last_n are llama.cpp's penalties (see SamplingParams), over the prompt and output;
    speculative output keeps the exact distribution of the penalized target. logprobs (0..20):
    each generated token's log-probability under the target's raw softmax and the `logprobs`
    most likely alternatives (TokenLogprobs; result.logprobs). Returns a GenerationResult;
    with stream=True, a generator of text pieces instead (never a broken UTF-8 character; see
    stream_generate for response objects). cancel (a pyllamaspec.Cancel)
    stops the generation from another thread: finish_reason "cancelled", the tokens so far
    kept. Parameters are checked before any work (InvalidArgumentError).
    grammar (GBNF text, llama.cpp's syntax), json_schema (a dict or its JSON text) or
    response_format (OpenAI's {"type": "json_object" | "json_schema", ...}) constrain every
    token, as llama-server does (GrammarError for a bad grammar or schema); speculation stays
    exact under them, and with forced=True the text the grammar forces is drafted for free.
    """
    if stream and is_batch(prompt):
        raise InvalidArgumentError("stream=True takes one prompt (several are decoded together and returned as a list)")
    run, seed = _prepare(prompt, model, draft_model, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, min_p=min_p, seed=seed, n_draft=n_draft, n_min=n_min, p_min=p_min,
                         adaptive=adaptive, ngram=ngram, draft_vocab=draft_vocab, stop=stop, n_ctx=n_ctx,
                         n_threads=n_threads, n_gpu_layers=n_gpu_layers, add_special=add_special,
                         parse_special=parse_special, cancel=cancel, repeat_penalty=repeat_penalty,
                         frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                         penalty_last_n=penalty_last_n, logprobs=logprobs, cache_prompt=cache_prompt,
                         spec_type=spec_type, ngram_params=ngram_params,
                         grammar=grammar, json_schema=json_schema, response_format=response_format, forced=forced,
                         _constraint=_constraint, n_parallel=n_parallel, tree=tree, tree_nodes=tree_nodes)
    if is_batch(prompt):
        results: list[dict] = []
        run(results)
        return [_result(r, s) for r, s in zip(results, seed)]
    result: dict = {}
    if stream:
        return (p.text for p in run(False, result))
    for _ in run(False, result):
        pass
    return _result(result, seed)


def _result(result: dict, seed: int) -> GenerationResult:
    reader = result.get("reader")
    if reader is not None:
        reader.push(result["text"])
        reader.finish()
    return GenerationResult(text=result["text"], tokens=result["tokens"], prompt_tokens=result["prompt_tokens"],
                            finish_reason=result["finish_reason"], stats=result["stats"], seed=seed,
                            logprobs=result["logprobs"], message=reader.message() if reader is not None else None)


def stream_generate(prompt: str | Sequence[int], model: ModelLike, draft_model: ModelLike | str | None = None,
                    **kwargs) -> Iterator[GenerationResponse]:
    """generate() as a stream of GenerationResponse (mlx-lm's stream_generate): one per
    generated token, then a last one with finish_reason and stats. Takes generate()'s keyword
    arguments but stream; they are checked here, before the first item is asked for."""
    if "stream" in kwargs:
        raise InvalidArgumentError("stream_generate always streams: drop stream=")
    if is_batch(prompt):
        raise InvalidArgumentError("stream_generate takes one prompt (generate() takes several)")
    defaults = {k: v for k, v in generate.__kwdefaults__.items() if k not in ("stream", "n_parallel")}
    unknown = set(kwargs) - set(defaults)
    if unknown:
        raise InvalidArgumentError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    run, _ = _prepare(prompt, model, draft_model, **{**defaults, **kwargs})
    return _responses(run)


def _responses(run) -> Iterator[GenerationResponse]:
    result: dict = {}
    tail = ""
    for p in run(True, result):
        if p.token < 0:                          # the text held back to the end
            tail += p.text
        else:
            yield GenerationResponse(p.text, p.token, p.from_draft, p.logprobs)
    eog: Piece | None = result.get("eog")
    yield GenerationResponse(tail, eog.token if eog else -1, eog.from_draft if eog else False,
                             eog.logprobs if eog else None, result["finish_reason"], result["stats"])


__all__ = ["generate", "stream_generate", "iter_generate", "GenerationResult", "GenerationResponse", "Piece",
           "PyllamaspecError"]
