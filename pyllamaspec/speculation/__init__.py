"""Speculative decoding: the Decoder's round (decoder.py), the cost model that sizes drafts
(cost_model.py), what is learned per target and drafter (pair_stats.py), and the drafters
(drafters/, one module each)."""
