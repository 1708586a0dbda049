"""Images in (issue 42): a Gemma 3 projector (llama.cpp's mmproj file) in the core, its rows
evaluated in place of token embeddings (non-causally within the image), prompts with images
through generate() with and without speculation, prefix reuse by image, and bad input."""
from __future__ import annotations

import base64

import numpy as np
import pytest

import models_vision as mv
import pyllamaspec
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import (InvalidArgumentError, ModelFormatError, ModelNotFoundError, PyllamaspecError,
                                UnsupportedModelError)
from pyllamaspec.vision.projector import Projector
from pyllamaspec.engine.chat_template import ChatPrompt
from pyllamaspec.vision import messages as vm
from pyllamaspec.vision import prompt as vp

N_VOCAB, N_EMBD = 272, 64
PROMPT = "<__media__>describe it"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny gemma3 text model whose vocabulary has Gemma's image markers, its projector, pictures."""
    return mv.write_tiny_vision(tmp_path_factory.mktemp("vision"), N_VOCAB, N_EMBD)


def test_projector_info_and_rows(tiny):
    with Projector(tiny / "mmproj.gguf") as p:
        i = p.info
        assert (i.type, i.image_size, i.patch_size, i.n_merge, i.n_embd, i.n_tokens) == \
            ("gemma3", 32, 4, 2, N_EMBD, 16)
        assert i.non_causal and i.mean == (0.5, 0.5, 0.5)
        a, b = p.encode(tiny / "a.png"), p.encode(tiny / "b.png")
        assert a.rows.shape == (16, N_EMBD) and np.isfinite(a.rows).all()
        assert a.digest != b.digest and not np.allclose(a.rows, b.rows)
        again = p.encode((tiny / "a.png").read_bytes())          # bytes: the same image
        assert again.digest == a.digest and np.array_equal(again.rows, a.rows)
        with pytest.raises(InvalidArgumentError, match="takes"):
            p.encode_pixels(np.zeros((3, 16, 16), np.float32))


def test_projector_keeps_the_rows_of_its_last_images(tiny, monkeypatch):
    """A chat resends its images every turn: an image seen again is not encoded again (its
    rows come from the projector's cache), another image is, and the oldest is let go past
    CACHE_IMAGES."""
    from pyllamaspec.vision import projector as vproj
    calls, real = [], vproj.lib

    class CountingLib:                                             # the core's calls, encodes counted
        def __getattr__(self, name):
            f = getattr(real, name)
            return (lambda *a: calls.append(1) or f(*a)) if name == "psl_projector_encode" else f

    with Projector(tiny / "mmproj.gguf") as p:
        monkeypatch.setattr(vproj, "lib", CountingLib())
        a = p.encode(tiny / "a.png")
        assert len(calls) == 1
        again = p.encode((tiny / "a.png").read_bytes())            # the same pixels, another source
        assert len(calls) == 1 and again.digest == a.digest and np.array_equal(again.rows, a.rows)
        b = p.encode(tiny / "b.png")
        assert len(calls) == 2 and b.digest != a.digest
        with pytest.raises(ValueError):
            a.rows[0, 0] = 1.0                                     # shared rows are read-only
        monkeypatch.setattr(vproj, "CACHE_IMAGES", 2)
        p.encode(tiny / "a.png")                                   # a: the most recent now
        p.encode_pixels(np.zeros((3, 32, 32), np.float32))         # a third image: b goes
        assert len(calls) == 3
        p.encode(tiny / "a.png")
        assert len(calls) == 3
        assert np.array_equal(p.encode(tiny / "b.png").rows, b.rows) and len(calls) == 4


def test_legacy_ffn_names_give_the_same_rows(tiny, tmp_path):
    """Old converters named fc1 ffn_down (clip.cpp swaps them back): the same weights either way."""
    mv.write_gemma3_mmproj(tmp_path / "old.gguf", n_embd_text=N_EMBD, seed=5, legacy_ffn_names=True)
    with Projector(tiny / "mmproj.gguf") as p, Projector(tmp_path / "old.gguf") as q:
        assert np.array_equal(p.encode(tiny / "a.png").rows, q.encode(tiny / "a.png").rows)


def test_a_deep_projector_encodes(tmp_path):
    """The encoder's graph is sized by its layers (a fixed size would abort past ~140 layers)."""
    mv.write_gemma3_mmproj(tmp_path / "deep.gguf", n_embd_text=N_EMBD, n_embd=8, n_head=2, n_ff=16, n_layer=300)
    with Projector(tmp_path / "deep.gguf") as p:
        assert np.isfinite(p.encode_pixels(np.zeros((3, 32, 32), np.float32)).rows).all()


def test_bad_projector_files(tiny, tmp_path):
    with pytest.raises(ModelNotFoundError):
        Projector(tmp_path / "missing.gguf")
    with pytest.raises(UnsupportedModelError, match="not a projector"):
        Projector(tiny / "text.gguf")
    mv.write_gemma3_mmproj(tmp_path / "nopos.gguf", n_embd_text=N_EMBD, drop_tensors=["v.position_embd.weight"])
    with pytest.raises(ModelFormatError, match="position_embd"):
        Projector(tmp_path / "nopos.gguf")
    mv.write_gemma3_mmproj(tmp_path / "other.gguf", n_embd_text=N_EMBD, extra_kv={"clip.projector_type": "qwen9vl"})
    with pytest.raises(UnsupportedModelError, match="qwen9vl"):
        Projector(tmp_path / "other.gguf")
    mv.write_gemma3_mmproj(tmp_path / "odd.gguf", n_embd_text=N_EMBD, extra_kv={"clip.vision.projector.scale_factor": 3})
    with pytest.raises(ModelFormatError, match="scale_factor"):
        Projector(tmp_path / "odd.gguf")
    whole = (tiny / "mmproj.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(PyllamaspecError):
        Projector(tmp_path / "cut.gguf")


def test_rows_attend_both_ways_within_an_image(tiny):
    """Non-causal: the first row's logits move when only the last row changes; causal: they do not
    (the negative control: the mask, not the rows, makes the difference)."""
    rows = np.random.default_rng(0).standard_normal((6, N_EMBD)).astype(np.float32)
    other = rows.copy()
    other[-1] += 1.0
    with Model(tiny / "text.gguf", n_ctx=64) as m:
        def first_row(r, non_causal):
            with m.lease(None) as s:
                s.clear()
                s.eval([2], logits="none")
                return s.eval_rows(r, list(range(-6, 0)), non_causal, logits="all")[0].copy()
        assert np.abs(first_row(rows, True) - first_row(other, True)).max() > 1e-3
        assert np.array_equal(first_row(rows, False), first_row(other, False))


def test_rows_of_another_width_are_refused(tiny):
    with Model(tiny / "text.gguf", n_ctx=64) as m:
        with m.lease(None) as s:
            with pytest.raises(InvalidArgumentError, match="width"):
                s.eval_rows(np.zeros((4, N_EMBD + 1), np.float32), [-1, -2, -3, -4], True)
            assert s.n_past == 0


def test_a_saved_state_keeps_its_image(tiny):
    """A state file holds the image's own ids (the core's history, not a placeholder): restored, the
    sequence is told from one holding another image or a text, and its rows are the image's (the
    next token's logits as before the save)."""
    with Model(tiny / "text.gguf", n_ctx=128, n_seq_max=2) as m, Projector(tiny / "mmproj.gguf") as p:
        ip = vp.tokenize(m, "look <__media__> now", [p.encode(tiny / "a.png")], "gemma3")
        k = ip.ids.index(N_VOCAB - 2) + 1                  # the image's first position
        img = ip.images[ip.ids[k]]
        with m.lease(None) as s:
            s.clear()
            s.eval(ip.ids[:k], logits="none")
            s.eval_rows(img.rows, ip.ids[k:k + 16], img.non_causal)
            want = s.eval(ip.ids[k + 16:], logits="last")[0].copy()
            s.truncate(k + 16)
            state = s.save_state()
        with m.lease(None) as t:
            t.load_state(state)
            # the image's ids, negative: a text spelling the placeholder there shares no more than
            # the prefix before the image
            assert t.cached_tokens == ip.ids[:k + 16] and t.cached_tokens[k] != ip.text_ids()[k]
            assert np.array_equal(t.eval(ip.ids[k + 16:], logits="last")[0], want)


def test_rows_are_refused_where_the_architecture_reads_ids_again(tmp_path):
    """Only architectures whose graphs read ids through the embedding alone take rows (the
    others, unchecked, refuse by name); the sequence is as it was."""
    import models_moe
    models_moe.write_moe_gguf(tmp_path / "moe.gguf", n_embd=N_EMBD)
    with Model(tmp_path / "moe.gguf", n_ctx=64) as m:
        with m.lease(None) as s:
            s.eval([1, 2], logits="none")
            with pytest.raises(UnsupportedModelError, match="qwen3moe"):
                s.eval_rows(np.zeros((4, N_EMBD), np.float32), [-1, -2, -3, -4], True)
            assert s.n_past == 2 and s.cached_tokens == [1, 2]


def test_prompt_tokens_as_mtmd(tiny):
    """BOS, the text before, <start_of_image>, the image's own ids, <end_of_image>, the text after."""
    with Model(tiny / "text.gguf", n_ctx=128) as m, Projector(tiny / "mmproj.gguf") as p:
        img = p.encode(tiny / "a.png")
        ip = vp.tokenize(m, "look <__media__> now", [img], "gemma3")
        beg, end = N_VOCAB - 2, N_VOCAB - 1
        own = vp.image_ids(img)
        k = ip.ids.index(beg)
        assert ip.ids[:k] == m.tokenize("look ", add_special=True)
        assert ip.ids[k + 1:k + 17] == own and all(t < 0 for t in own) and ip.ids[k + 17] == end
        assert ip.ids[k + 18:] == m.tokenize(" now", add_special=False)
        assert ip.text_ids()[k + 1:k + 17] == [ip.placeholder] * 16
        with pytest.raises(InvalidArgumentError, match="markers"):
            vp.tokenize(m, "no marker", [img], "gemma3")


def _gen(tiny, m, draft=None, image="a.png", **kw):
    return pyllamaspec.generate(PROMPT, m, draft, images=[tiny / image], mmproj=tiny / "mmproj.gguf",
                                temperature=0, max_tokens=24, **kw)


def test_greedy_speculation_with_an_image_equals_plain(tiny):
    with Model(tiny / "text.gguf", n_ctx=256) as m, Model(tiny / "text.gguf", n_ctx=256) as d:
        plain = _gen(tiny, m, cache_prompt=False)
        assert plain.tokens
        for drafter in (d, "ngram"):
            spec = _gen(tiny, m, drafter, cache_prompt=False, adaptive=False, n_draft=4)
            assert spec.tokens == plain.tokens, drafter
        # a draft model that is the target itself, reading the target's rows at the image
        # (test_vision_draft.py measures what it gains over placeholders)
        spec = _gen(tiny, m, d, cache_prompt=False, adaptive=False, n_draft=4)
        assert spec.stats.accepted > 0


def test_prefix_reuse_stops_at_another_image(tiny):
    with Model(tiny / "text.gguf", n_ctx=256) as m:
        first = _gen(tiny, m)
        again = _gen(tiny, m)
        assert again.tokens == first.tokens
        assert again.stats.n_reused == len(again.prompt_tokens) - 1     # the whole prompt kept
        other = _gen(tiny, m, image="b.png")
        assert other.stats.n_reused == other.prompt_tokens.index(N_VOCAB - 2) + 1   # up to <start_of_image>
        fresh = _gen(tiny, m, image="b.png", cache_prompt=False)
        assert fresh.tokens == other.tokens


def test_bad_images_and_arguments(tiny, tmp_path):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with Model(tiny / "text.gguf", n_ctx=256) as m:
        with pytest.raises(InvalidArgumentError):
            _gen(tiny, m, image=str(tmp_path / "bad.png"))
        with pytest.raises(InvalidArgumentError, match="mmproj"):
            pyllamaspec.generate(PROMPT, m, images=[tiny / "a.png"], max_tokens=2)
        with pytest.raises(InvalidArgumentError, match="media markers"):
            pyllamaspec.generate("<__media__><__media__>", m, images=[tiny / "a.png"], mmproj=tiny / "mmproj.gguf",
                                 max_tokens=2)
        # the model lives on
        assert _gen(tiny, m).tokens


def test_message_parts_join_as_llama_server():
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                         {"type": "text", "text": "c"}, {"type": "image", "image": b"xy"}]}]
    out, images = vm.split_media(msgs)
    assert out[0] == msgs[0]
    assert out[1]["content"] == "a\nb<__media__>c<__media__>"      # common_chat_msg's join
    assert images == [b"\x00\x00\x00", b"xy"]
    for bad in ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}},
                {"type": "audio", "audio": "x"}):
        with pytest.raises(InvalidArgumentError):
            vm.split_media([{"role": "user", "content": [bad]}])
    with pytest.raises(InvalidArgumentError, match="local"):
        vm.split_media([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "/etc/x.png"}}]}],
                       local_files=False)


def test_media_path_names_as_llama_server(tmp_path):
    """--media-path's file:// URLs: the names llama.cpp's fs_validate_filename (subdirectories
    allowed) takes and refuses, read under the directory; without one, a file:// URL is refused."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.png").write_bytes(b"png")
    for ok in ("x.png", "sub/x.png", "/sub/x.png", "é.png", "a b.png", ".hidden"):
        assert vm.media_file_name_ok(ok), ok
    for bad in ("", ".", "..", "../x.png", "sub/../x.png", "a..b", "x.png.", " x.png", "x.png ", "a:b", "a*b",
                "a?b", 'a"b', "a<b", "a>b", "a|b", "a\x01b", "a\x7fb", "a\u0085b", "a\uff0eb", "a\u2215b",
                "a\ufffdb", "\ufeffx", "a\ud800b", "x" * 256):
        assert not vm.media_file_name_ok(bad), repr(bad)
    part = [{"type": "image_url", "image_url": {"url": "file://sub/x.png"}}]
    assert vm.split_media([{"role": "user", "content": part}], local_files=False,
                          media_path=str(tmp_path))[1] == [b"png"]
    with pytest.raises(InvalidArgumentError, match="unless --media-path"):
        vm.split_media([{"role": "user", "content": part}], local_files=False)


def test_chat_with_an_image_part(tiny):
    url = "data:image/png;base64," + base64.b64encode((tiny / "a.png").read_bytes()).decode()
    msgs = [{"role": "user", "content": [{"type": "text", "text": "describe"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]
    with Model(tiny / "text.gguf", n_ctx=256) as m:
        got = pyllamaspec.chat(msgs, m, mmproj=tiny / "mmproj.gguf", chat_template="gemma", temperature=0,
                               max_tokens=12, cache_prompt=False)
        text = ChatPrompt.make([{"role": "user", "content": "describe<__media__>"}], "gemma").text(m)
        assert "describe<__media__>" in text
        want = pyllamaspec.generate(text.replace("<bos>", "", 1), m, images=[tiny / "a.png"],
                                    mmproj=tiny / "mmproj.gguf", temperature=0, max_tokens=12, cache_prompt=False,
                                    stop=["<end_of_turn>"])
        assert got.prompt_tokens == want.prompt_tokens and got.tokens == want.tokens
        with pytest.raises(InvalidArgumentError, match="mmproj"):
            pyllamaspec.chat(msgs, m, chat_template="gemma", max_tokens=2)
