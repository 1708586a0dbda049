"""generate(), stream_generate(): text in, text out, with or without a draft model; streaming as a
generator. Each prompt runs the one generation lifecycle (lifecycle.py)."""
from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Iterator, Sequence, Union

import numpy as np

from ..engine import _args
from ..engine.cancel import Cancel
from ..engine.chat_template import ChatPrompt, chat_text, is_messages
from ..engine.head import DraftHead
from ..engine.model import Model
from ..engine.sampling import MAX_LOGPROBS, SamplingParams, TokenLogprobs
from ..errors import InvalidArgumentError, ModelClosedError, PyllamaspecError
from ..speculation.decoder import DraftParams, Stats
from ..speculation.params import NgramParams
from ..structured.formats import GrammarSpec, chat_spec, constraint_spec
from ..structured.reasoning import Reasoning
from .drafts import is_draft_name, open_draft
from .lifecycle import Generation, run_alone
from .options import GenerateOptions
from .text import Piece

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
                  constraint: GrammarSpec | None = None, images=None) -> Iterator[Piece]:
    """One prompt's generation (lifecycle.Generation, run alone). Yields Pieces (per_token: one
    per generated token, then the text held back to the end as a Piece of token -1); fills
    result with tokens, finish reason, stats, logprobs (a list, when asked) and "eog" (the
    Piece of the end-of-generation token that stopped it, if one did). prompt: text, token ids,
    or a ChatPrompt (rendered with the model's chat template). cache_prompt: keep what the
    models' caches hold of the prompt (else they start empty). progress(done, total): the
    prompt's evaluation, batch by batch. constraint: the grammar every token respects (a chat's
    JSON schema becomes llama-server's response-format grammar around the template's
    generation prompt). images: (Projector, [image, ...]) for a text prompt with one media marker
    per image (none: the images go first, as llama-mtmd-cli puts them)."""
    if isinstance(draft_model, Model):
        model.check_draft(draft_model)
    result["reader"] = None
    checkpoints: list[int] = []
    image_prompt = None
    if isinstance(prompt, ChatPrompt):
        # the template decides the chat's format (tool syntax or the generic one, its thinking)
        prompt, constraint = (constraint or chat_spec(None)).bind(prompt, model)
        ids, chat_stops = prompt.render(model)
        if images:                                  # the rendered text holds a marker per image
            image_prompt = _image_prompt(chat_text(prompt, model), model, images, True, draft_model)
            ids = image_prompt.ids
        stop = stop + [s for s in chat_stops if s not in stop]
        result["reader"] = constraint.reader()         # how chat() reads the answer
        if model.memory.get("recurrent_bytes", 0) and not images:   # a hybrid keeps its state at the user turns
            checkpoints = prompt.turn_starts(model, ids)
    elif images:
        image_prompt = _image_prompt(prompt, model, images, add_special, draft_model)
        ids = image_prompt.ids
    else:
        ids = prompt_ids(prompt, model, add_special, parse_special)
    g = Generation(ids, model, draft_model, sampling=sampling, draft=draft, max_tokens=max_tokens, stop=stop,
                   logprobs=logprobs, per_token=per_token, cancel=cancel, cache_prompt=cache_prompt,
                   constraint=constraint, result=result, progress=progress, checkpoints=checkpoints,
                   images=image_prompt)
    yield from run_alone(g)


def _image_prompt(prompt, model: Model, images, add_special: bool, draft_model=None):
    """A text prompt and its images -> vision.prompt.ImagePrompt (the images encoded now, by the
    draft's projector too where images carries one)."""
    from ..vision import prompt as vp
    projector, files, draft_projector = (*images, None)[:3]
    if not isinstance(prompt, str):
        raise InvalidArgumentError("a prompt with images is text with a media marker per image, not token ids")
    marker = vp.MEDIA_MARKER                  # as llama-mtmd-cli: LLAMA_MEDIA_MARKER is the server's
    if marker not in prompt:
        prompt = marker * len(files) + prompt
    rows = [projector.encode(f) for f in files]
    p = vp.tokenize(model, prompt, rows, projector.info.type, add_special, marker)
    if draft_projector is not None:          # the draft's own rows of the same images, by the same ids
        vp.attach_draft_rows(p, [draft_projector.encode(f) for f in files], draft_model)
    return p


def prompt_ids(prompt: str | Sequence[int], model: Model, add_special: bool = True,
               parse_special: bool = True) -> list[int]:
    """A prompt's token ids: text tokenized, ids checked against the vocabulary."""
    if isinstance(prompt, str):
        return model.tokenize(prompt, add_special=add_special, parse_special=parse_special)
    return _args.token_ids("prompt", prompt, model.n_vocab).tolist()


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


def sampling_params(o: GenerateOptions, seed: int) -> SamplingParams:
    """generate()'s sampling options, with this seed."""
    return SamplingParams(temperature=o.temperature, top_k=o.top_k, top_p=o.top_p, min_p=o.min_p, seed=seed,
                          repeat_penalty=o.repeat_penalty, frequency_penalty=o.frequency_penalty,
                          presence_penalty=o.presence_penalty, penalty_last_n=o.penalty_last_n)


def draft_params(o: GenerateOptions) -> DraftParams:
    """generate()'s speculation options: adaptive draft lengths unless a seed asks for the same
    sampled output each time (then fixed lengths, as measured times would move them)."""
    adaptive = o.adaptive if o.adaptive is not None else o.seed is None or o.temperature == 0
    return DraftParams(n_draft=o.n_draft, n_min=o.n_min, p_min=o.p_min, adaptive=adaptive, ngram=o.ngram,
                       draft_vocab=o.draft_vocab, forced=o.forced, spec_type=o.spec_type,
                       ngrams=NgramParams() if o.ngram_params is None else o.ngram_params, tree=o.tree,
                       tree_nodes=o.tree_nodes)


def _prepare(prompt, model, draft_model, o: GenerateOptions, tools: GrammarSpec | None = None,
             reasoning: Reasoning | None = None):
    """Checks every option before any work; returns (run, seed): run(per_token, result) is the
    generation as a generator of Pieces, loading what needs loading. Several prompts: (run,
    seeds), run(results) decoding them together (a list of result dicts). tools: a chat's
    tool-call grammar (chat() makes it)."""
    batch = is_batch(prompt)
    seeds = [o.seed if o.seed is not None else int.from_bytes(os.urandom(8), "little")
             for _ in (prompt if batch else [0])]
    sampling, draft = sampling_params(o, seeds[0]), draft_params(o)
    constraint = constraint_spec(o.grammar, o.json_schema, o.response_format)
    if tools is not None:
        if constraint is not None:
            raise InvalidArgumentError("Cannot use grammar, json_schema or response_format constraints with tools")
        constraint = tools
    if reasoning is not None:
        constraint = chat_spec(constraint, reasoning)
    stops = _check_stop(o.stop)
    max_tokens = _args.integer("max_tokens", o.max_tokens)
    _args.integer("n_ctx", o.n_ctx, 0, _args.MAX_CTX)
    _args.integer("n_gpu_layers", o.n_gpu_layers, -1)
    if o.n_threads is not None:
        _args.integer("n_threads", o.n_threads, 0, _max_threads())
    if o.logprobs is not None:
        _args.integer("logprobs", o.logprobs, 0, MAX_LOGPROBS)
    for p in prompt if batch else [prompt]:
        _check_prompt(p)
    n_parallel = _args.integer("n_parallel", o.n_parallel, 1, 256) if o.n_parallel is not None else None
    if not isinstance(o.cache_prompt, bool):
        raise InvalidArgumentError(f"cache_prompt must be True or False, got {o.cache_prompt!r}")
    if o.cancel is not None and not isinstance(o.cancel, Cancel):
        raise InvalidArgumentError(f"cancel must be a pyllamaspec.Cancel, got {type(o.cancel).__name__}")
    if not isinstance(model, (str, os.PathLike, Model)):
        raise InvalidArgumentError(f"model must be a path or a Model, got {type(model).__name__}")
    if not isinstance(draft_model, (str, os.PathLike, Model, DraftHead, type(None))):
        raise InvalidArgumentError(f"draft_model must be a path, a Model, a DraftHead, 'ngram', 'mtp' or "
                                   f"speculative type names, got {type(draft_model).__name__}")
    out = dict(max_tokens=max_tokens, stop=stops, cancel=o.cancel, logprobs=o.logprobs, cache_prompt=o.cache_prompt,
               constraint=constraint)
    images = _check_images(o, batch, prompt)
    if o.draft_mmproj is not None and (draft_model is None or isinstance(draft_model, DraftHead)
                                       or is_draft_name(draft_model)):
        raise InvalidArgumentError(f"draft_mmproj is a draft model's projector: it needs a draft model "
                                   f"(draft_model= a text model GGUF), got {draft_model!r}")

    def models(stack: ExitStack):
        kw = dict(n_ctx=o.n_ctx, n_threads=o.n_threads, n_gpu_layers=o.n_gpu_layers)
        target = _open(model, stack, **kw)
        dm = open_draft(draft_model, target, stack, spec_type=o.spec_type, **kw)
        if o.draft_mmproj is not None:          # with images or without: refused alike
            check_draft_projector_vocab(target, dm)
        return target, dm

    def run(per_token: bool, result: dict) -> Iterator[Piece]:
        with ExitStack() as stack:
            target, dm = models(stack)
            imgs = (_open_projector(o.mmproj, stack, o.n_threads), images,
                    open_draft_projector(o.draft_mmproj, dm, stack, target,
                                         n_threads=o.n_threads or 0)) if images else None
            yield from iter_generate(prompt, target, dm, sampling=sampling, draft=draft, result=result,
                                     add_special=o.add_special, parse_special=o.parse_special,
                                     per_token=per_token, images=imgs, **out)

    def run_many(results: list[dict]) -> None:
        from .together import generate_together
        with ExitStack() as stack:
            target, dm = models(stack)
            ids = [prompt_ids(p, target, o.add_special, o.parse_special) for p in prompt]
            results[:] = generate_together(ids, target, dm, [replace(sampling, seed=s) for s in seeds], draft,
                                           n_parallel=n_parallel, **out)
    return (run_many, seeds) if batch else (run, seeds[0])


def _check_images(o: GenerateOptions, batch: bool, prompt) -> list:
    """The images of a call (a path, bytes or PIL image, or a list of them), checked."""
    if o.images is None:
        return []
    images = [o.images] if isinstance(o.images, (str, bytes, os.PathLike)) else list(o.images)
    if not images:
        return []
    if o.mmproj is None:
        raise InvalidArgumentError("images need a vision projector: pass mmproj= (llama.cpp's mmproj GGUF)")
    from ..vision.projector import Projector     # (Pillow and the image code load with images only)
    if not isinstance(o.mmproj, (str, os.PathLike, Projector)):
        raise InvalidArgumentError(f"mmproj must be a path or a Projector, got {type(o.mmproj).__name__}")
    if batch or not isinstance(prompt, (str, ChatPrompt)):
        raise InvalidArgumentError("images go with one text prompt (a media marker per image)")
    if o.draft_mmproj is not None and not isinstance(o.draft_mmproj, (str, os.PathLike, Projector)):
        raise InvalidArgumentError(f"draft_mmproj must be a path or a Projector, got {type(o.draft_mmproj).__name__}")
    return images


def open_draft_projector(mmproj, draft, stack: ExitStack, target: Model | None = None, **projector_kw):
    """draft_mmproj= / --mmproj-draft opened into stack (None: none; a Projector: as given), its
    rows checked against the draft model's width (InvalidArgumentError naming both), and the
    draft against target's vocabulary (check_draft_projector_vocab)."""
    if mmproj is None:
        return None
    if not isinstance(draft, Model):
        raise InvalidArgumentError(f"a draft projector (draft_mmproj= / --mmproj-draft) is a draft model's: it needs "
                                   f"a draft model (a text model GGUF: draft_model= / -md), got {draft!r}")
    if target is not None:
        check_draft_projector_vocab(target, draft)
    from ..vision.projector import Projector     # (Pillow and the image code load with images only)
    from ..vision.prompt import check_draft_width
    p = mmproj if isinstance(mmproj, Projector) else stack.enter_context(Projector(mmproj, **projector_kw))
    check_draft_width(p.info.n_embd, draft.info.n_embd_inp)
    return p


def check_draft_projector_vocab(target: Model, draft) -> None:
    """A draft of another vocabulary (speculation/drafters/cross_vocab.py) drafts text: it is fed
    the target's text re-tokenized, so at an image it sees only the text around it, and a
    projector of its own would never be read; refused rather than silently ignored."""
    if not isinstance(draft, Model):
        return                                  # (open_draft_projector says what it needs)
    why = target.vocab_difference(draft)
    if why is not None:
        raise InvalidArgumentError(f"a draft projector (draft_mmproj= / --mmproj-draft) needs a draft of the target's "
                                   f"vocabulary: this draft's differs ({why}), so it drafts re-tokenized text and "
                                   f"sees only the text around an image, never its rows")


def _open_projector(mmproj, stack: ExitStack, n_threads: int | None):
    from ..vision.projector import Projector     # (Pillow and the image code load with images only)
    if isinstance(mmproj, Projector):
        return mmproj
    return stack.enter_context(Projector(mmproj, n_threads or 0))


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
             forced: bool = True, n_parallel: int | None = None, tree: bool | None = None, tree_nodes: int = 0,
             images: Sequence | None = None, mmproj=None, draft_mmproj=None):
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
    evaluation, exactly: speculation/tree/verify.py; "ngram": the continuations of the last two matches),
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
    images (files, bytes or PIL images) with mmproj (llama.cpp's mmproj GGUF, or a
    vision.Projector): each image takes the place of a media marker "<__media__>" (llama-mtmd-cli's;
    LLAMA_MEDIA_MARKER is the server's) in the text prompt (none: they go first); every drafter
    keeps drafting; a draft model reads rows at an image: its own projector's with draft_mmproj=
    (a path or a Projector), else the target's where they fit its width, else zero rows (as
    llama.cpp, with a warning).
    """
    opts = GenerateOptions(
        max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
        n_draft=n_draft, n_min=n_min, p_min=p_min, adaptive=adaptive, ngram=ngram, draft_vocab=draft_vocab,
        stop=stop, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, add_special=add_special,
        parse_special=parse_special, cancel=cancel, repeat_penalty=repeat_penalty,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, penalty_last_n=penalty_last_n,
        logprobs=logprobs, cache_prompt=cache_prompt, spec_type=spec_type, ngram_params=ngram_params,
        grammar=grammar, json_schema=json_schema, response_format=response_format, forced=forced,
        n_parallel=n_parallel, tree=tree, tree_nodes=tree_nodes, images=images, mmproj=mmproj,
        draft_mmproj=draft_mmproj)
    return generate_with(prompt, model, draft_model, opts, stream=stream)


def generate_with(prompt, model: ModelLike, draft_model, opts: GenerateOptions, *, stream: bool = False,
                  tools: GrammarSpec | None = None, reasoning: Reasoning | None = None):
    """generate() with its options as one object (tools: a chat's tool-call grammar; reasoning:
    how a chat's thinking is read and bounded)."""
    if stream and is_batch(prompt):
        raise InvalidArgumentError("stream=True takes one prompt (several are decoded together and returned as a list)")
    run, seed = _prepare(prompt, model, draft_model, opts, tools, reasoning)
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
    opts = GenerateOptions.from_kwargs(kwargs, "stream_generate()", refused=("n_parallel",))
    run, _ = _prepare(prompt, model, draft_model, opts)
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
