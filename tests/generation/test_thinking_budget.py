"""--reasoning-budget (generation/thinking.py): the thinking block is closed after N tokens by its end
tag, forced as llama.cpp's reasoning-budget sampler forces it (tag matching on token ids, the
generation prompt's own start tag counted, UTF-8 completed first, a new block re-armed), and the
forced tokens keep speculation exact: greedy output with a draft equals plain greedy output, and a
seeded sampled run puts the end tag at the same place."""
from __future__ import annotations

import pytest

import pyllamaspec
from pyllamaspec.files.offline import real_model_path
from pyllamaspec.generation.thinking import ThinkingBudget

START, END = [1, 2], [3]


def _budget(n: int, forced=(9, 3), piece=lambda t: b"x") -> ThinkingBudget:
    return ThinkingBudget(START, [END], list(forced), n, piece)


def test_the_count_starts_at_the_start_tag_and_the_end_is_forced():
    b = _budget(3)
    b.feed([5, 6])
    assert b.room() is None and b.to_force() == []
    b.feed(START)
    assert b.room() == 3
    b.feed([7, 7])
    assert b.room() == 1
    b.feed([7])
    assert b.to_force() == [9, 3] and b.room() is None
    b.feed([9])
    assert b.to_force() == [3]
    b.feed([3, 8, 8])
    assert b.to_force() == [] and b.room() is None


def test_a_block_that_ends_by_itself_is_not_forced_and_a_new_one_rearms():
    b = _budget(4)
    b.feed(START + [7] + END + [8])
    assert b.to_force() == [] and b.room() is None
    b.feed(START)
    assert b.room() == 4


def test_budget_zero_forces_at_once_and_a_closed_prompt_block_is_taken_as_the_forced_end():
    b = _budget(0)
    b.feed(START)
    assert b.to_force() == [9, 3]
    b = _budget(0, forced=[3])
    b.feed(START + END)              # thinking off: the prompt closed the block itself
    assert b.to_force() == [] and b.room() is None


def test_an_incomplete_utf8_character_is_finished_before_the_end():
    pieces = {7: b"a", 10: b"\xc3", 11: b"\xa9"}
    b = _budget(2, piece=lambda t: pieces[t])
    b.feed(START + [7, 10])
    assert b.to_force() == [] and b.room() == 1
    b.feed([11])
    assert b.to_force() == [9, 3]


# SmolLM2 inside a block the generation prompt opens (as Qwen3.5's and DeepSeek R1's do)
THINKING = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
Q = [{"role": "user", "content": "Write a list of ten fruits and explain each one."}]


@pytest.fixture(scope="module")
def smollm2():
    with pyllamaspec.Model(real_model_path("smollm2"), n_ctx=1024) as m:
        yield m


# llama.cpp counts the budget from the start tag, the generation prompt's tokens after it too (here
# its "\n"): the forced end comes after budget - 1 generated tokens, at once for budget 0
AFTER_TAG = 1


def _end_at(m, tokens: list[int]) -> int:
    end = m.tokenize("</think>", add_special=False, parse_special=True)
    for i in range(len(tokens) - len(end) + 1):
        if tokens[i:i + len(end)] == end:
            return i
    return -1


@pytest.mark.parametrize("budget", [0, 7])
def test_the_block_closes_after_the_budget_with_and_without_a_draft(smollm2, budget):
    kw = dict(chat_template=THINKING, max_tokens=24, temperature=0, reasoning_budget=budget)
    plain = pyllamaspec.chat(Q, smollm2, **kw)
    assert _end_at(smollm2, plain.tokens) == max(0, budget - AFTER_TAG), plain.text
    # the block holds the budget's tokens (budget 0: only the prompt's newline after <think>)
    assert bool(plain.message.get("reasoning_content", "").strip()) == bool(budget), plain.message
    unbounded = pyllamaspec.chat(Q, smollm2, **{**kw, "reasoning_budget": -1})
    assert _end_at(smollm2, unbounded.tokens) != max(0, budget - AFTER_TAG), "without a budget the model does not close it there"
    for draft in ("ngram", smollm2):
        spec = pyllamaspec.chat(Q, smollm2, draft, n_draft=6, adaptive=False, **kw)
        assert spec.tokens == plain.tokens, draft


def test_sampled_runs_close_the_block_at_the_budget(smollm2):
    for seed in range(3):
        kw = dict(chat_template=THINKING, max_tokens=20, temperature=0.9, seed=seed, reasoning_budget=5)
        r = pyllamaspec.chat(Q, smollm2, "ngram", **kw)
        assert _end_at(smollm2, r.tokens) == 5 - AFTER_TAG, r.text


def test_the_cost_model_keeps_thinking_and_answer_apart():
    from pyllamaspec.speculation.cost_model import DraftPolicy
    p = DraftPolicy(8)
    p.select(3)
    for _ in range(20):
        p.observe_round(4, 4)                # the answer: all accepted
    answer = p.alpha
    p.set_phase("thinking")
    assert p.alpha < answer                   # a fresh estimate, not the answer's
    for _ in range(20):
        p.observe_round(4, 0)
    assert p.alpha < 0.2
    p.set_phase("answer")
    assert p.alpha == answer and p.drafter_key == 3
    p.select(1)
    p.set_phase("thinking")
    assert p.key == ("thinking", 1)


def test_the_stats_split_acceptance_inside_and_outside_the_block(smollm2):
    kw = dict(chat_template=THINKING, max_tokens=48, temperature=0, reasoning_budget=20, n_draft=6, adaptive=False)
    r = pyllamaspec.chat(Q, smollm2, "ngram", **kw)
    s = r.stats
    assert 0 < s.thinking_drafted < s.drafted, (s.thinking_drafted, s.drafted)
    inside, outside = s.thinking_acceptance()
    assert 0 <= inside <= 1 and 0 <= outside <= 1
    plain = pyllamaspec.chat(Q, smollm2, "ngram", **{**kw, "chat_template": None})
    assert plain.stats.thinking_drafted == 0 and plain.stats.thinking_acceptance() is None
