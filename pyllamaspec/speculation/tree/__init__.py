"""Token trees: drafted (draft.py: TreeBuilder, TreeDraft in a draft model's sequences;
sampled.py: a sampled drafter's tree or chain per round), chosen (policy.py: tree or chain, from the
verify cost curve and acceptance by sibling rank) and verified in one target evaluation
(verify.py: layout in branch sequences, greedy / recursive-rejection acceptance, rollback)."""
