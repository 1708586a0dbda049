"""llama.cpp's n-gram speculative kinds (base.py the shared drafter, simple.py, map.py,
mod.py, cache.py with hash_order.py: C++'s hash-map order for ngram-cache's ties) and our prompt
lookup (lookup.py); suffix drafting (suffix.py, over suffix_index.py: earlier requests' text too)."""
