"""use_mmap=None (auto, the default): weights read into huge pages on Linux where that pays,
mapped elsewhere (pyllamaspec/engine/load_mode.py); True / False as given."""
from __future__ import annotations

import sys

import pytest

from models import write_llama_gguf
from pyllamaspec import Model
from pyllamaspec.engine import load_mode
from pyllamaspec.errors import InvalidArgumentError


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.gguf"
    write_llama_gguf(p)
    return str(p)


@pytest.mark.parametrize("text,want", [("[always] madvise never", True), ("always [madvise] never", True),
                                       ("always madvise [never]", False), (None, False)])
def test_huge_pages_available(tmp_path, text, want):
    f = tmp_path / "enabled"
    if text is not None:
        f.write_text(text + "\n")
    assert load_mode.huge_pages_available(str(f)) is want


def test_mem_available(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n")
    assert load_mode.mem_available(str(f)) == 2048 * 1024
    f.write_text("MemTotal: 1 kB\n")
    assert load_mode.mem_available(str(f)) is None
    assert load_mode.mem_available(str(tmp_path / "none")) is None


@pytest.fixture
def linux_with_thp(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(load_mode, "huge_pages_available", lambda: True)
    monkeypatch.delenv("PYLLAMASPEC_HUGE_PAGES", raising=False)


def test_auto_reads_in_only_where_it_pays(tiny, tmp_path, monkeypatch, linux_with_thp):
    import os
    size = os.path.getsize(tiny)
    monkeypatch.setattr(load_mode, "mem_available", lambda: 2 * size)
    assert load_mode.resolve_mmap(None, tiny, 0) is False                 # read into huge pages
    assert load_mode.resolve_mmap(None, tiny, 1) is True                  # layers offloaded
    assert load_mode.resolve_mmap(None, tiny, -1) is True
    split = tmp_path / "m-00001-of-00002.gguf"
    split.write_bytes(b"x")
    assert load_mode.resolve_mmap(None, str(split), 0) is True            # a split set
    monkeypatch.setattr(load_mode, "mem_available", lambda: 2 * size - 1)
    assert load_mode.resolve_mmap(None, tiny, 0) is True                  # more than half the free memory
    monkeypatch.setattr(load_mode, "mem_available", lambda: None)
    assert load_mode.resolve_mmap(None, tiny, 0) is True
    monkeypatch.setattr(load_mode, "mem_available", lambda: 1 << 40)
    monkeypatch.setenv("PYLLAMASPEC_HUGE_PAGES", "0")
    assert load_mode.resolve_mmap(None, tiny, 0) is True
    monkeypatch.delenv("PYLLAMASPEC_HUGE_PAGES")
    monkeypatch.setattr(load_mode, "huge_pages_available", lambda: False)
    assert load_mode.resolve_mmap(None, tiny, 0) is True                  # THP "never"
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(load_mode, "huge_pages_available", lambda: True)
    assert load_mode.resolve_mmap(None, tiny, 0) is True                  # no THP on macOS


def test_explicit_choice_is_kept_and_checked(tiny, linux_with_thp):
    assert load_mode.resolve_mmap(True, tiny, 0) is True
    assert load_mode.resolve_mmap(False, tiny, 99) is False
    with pytest.raises(InvalidArgumentError, match="use_mmap"):
        Model(tiny, use_mmap="yes")


def test_model_records_the_choice(tiny):
    with Model(tiny) as m:
        assert m.use_mmap is (not load_mode.read_in_pays(tiny, 0))
        auto = m.eval([1, 2, 3])[-1].copy()
    for choice in (True, False):
        with Model(tiny, use_mmap=choice) as m:
            assert m.use_mmap is choice
            assert (m.eval([1, 2, 3])[-1] == auto).all()     # the same weights either way
