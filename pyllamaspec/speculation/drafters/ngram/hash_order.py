"""The iteration order of a C++ std::unordered_map<int32, int32> built by insertions only, as
GCC's libstdc++ lays it out: llama.cpp's ngram-cache picks the most frequent next token by a
strict comparison in that order, so on a tie the first one in it wins, and drafts that equal
llama.cpp's (built with GCC on Linux) need the same order. (A libc++ build, e.g. llama.cpp on
macOS, orders its buckets otherwise and may pick another of two tied tokens.)

libstdc++ keeps one singly linked list; the nodes of a bucket are contiguous in it, and a node
goes first among its bucket's, or at the head of the list when its bucket is empty. A rehash
re-inserts the list's nodes in order by the same rule. The hash of an int is the int, the
bucket its remainder by the bucket count, which grows at fixed element counts (measured with
GCC 12's libstdc++, max_load_factor 1; the same prime policy since GCC 4.9)."""
from __future__ import annotations

# element count at which the map grows -> its new bucket count (before that insertion)
_GROWTH = ((1, 13), (14, 29), (30, 59), (60, 127), (128, 257), (258, 541), (542, 1109), (1110, 2357),
           (2358, 5087), (5088, 10273), (10274, 20753), (20754, 42043), (42044, 85229), (85230, 172933),
           (172934, 351061), (351062, 712697), (712698, 1447153), (1447154, 2938679), (2938680, 5967347))
_NEXT = dict(_GROWTH)


class CountMap:
    """token -> count, iterated in libstdc++'s order (items())."""

    __slots__ = ("counts", "order", "buckets")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.order: list[int] = []
        self.buckets = 1

    def add(self, token: int, count: int = 1) -> None:
        """count more of token (inserted first when new)."""
        if token in self.counts:
            self.counts[token] += count
            return
        grown = _NEXT.get(len(self.counts) + 1)
        if grown is not None:
            old, self.order = self.order, []
            self.buckets = grown
            for t in old:
                self._place(t)
        self._place(token)
        self.counts[token] = count

    def _place(self, token: int) -> None:
        b = token % self.buckets
        for i, t in enumerate(self.order):
            if t % self.buckets == b:
                self.order.insert(i, token)
                return
        self.order.insert(0, token)

    def items(self):
        return ((t, self.counts[t]) for t in self.order)

    def get(self, token: int, default: int = 0) -> int:
        return self.counts.get(token, default)

    def __len__(self) -> int:
        return len(self.counts)
