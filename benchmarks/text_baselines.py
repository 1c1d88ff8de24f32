"""What the GPT must beat: bits per character of classic compressors and of a character n-gram,
on the same held-out text and with the same training text before it.

* **Compressors** (zlib level 9, bz2 level 9, xz preset 9) are *primed* with the training text:
  the held-out text costs what compressing training + held-out costs beyond compressing the
  training text alone, ``8 * (len(C(train + heldout)) - len(C(train))) / characters``. Each reads
  UTF-8 bytes, as the GPT does. zlib only looks 32 KB back, bz2 works in 900 KB blocks, xz's
  64 MB dictionary holds all of the training text.
* **A character n-gram** with interpolated Kneser-Ney smoothing (Chen and Goodman 1998), one
  absolute discount per order, ``D = n1 / (n1 + 2 n2)`` from the counts of n-grams seen once and
  twice. The highest order uses counts; lower orders use continuation counts (how many different
  characters came before), which is what makes Kneser-Ney better than plain back-off: a
  character that is frequent only after one context gets little weight elsewhere. Order 1 is
  interpolated with the uniform distribution over the training characters plus one slot for
  every unseen character, so nothing has probability zero. The held-out text is scored after
  the training text, like the compressors and the GPT.
"""
from __future__ import annotations

import bz2
import lzma
import math
import zlib
from collections import Counter
from collections.abc import Callable

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zlib": lambda data: zlib.compress(data, 9),
    "bz2": lambda data: bz2.compress(data, 9),
    "xz": lambda data: lzma.compress(data, preset=9),
}


def compressor_bits(name: str, train: str, heldout: str) -> float:
    """Bits per held-out character of a compressor primed with the training text."""
    if not heldout:
        raise ValueError("there is no held-out text to measure")
    compress = COMPRESSORS[name]
    before, both = train.encode("utf-8"), (train + heldout).encode("utf-8")
    return 8 * (len(compress(both)) - len(compress(before))) / len(heldout)


class KneserNey:
    """An interpolated Kneser-Ney character model of the given order, trained on ``text``."""

    def __init__(self, text: str, order: int = 5) -> None:
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        if len(text) < order:
            raise ValueError(f"the training text has {len(text)} characters, fewer than the order {order}")
        self.order = order
        top = Counter(text[i : i + order] for i in range(len(text) - order + 1))
        # counts[k]: the counts order k+1 uses; the highest order's are plain counts, lower ones'
        # are continuation counts, the number of distinct characters seen before the k+1-gram.
        counts: list[Counter[str]] = [Counter() for _ in range(order)]
        counts[order - 1] = top
        for k in range(order - 1, 0, -1):
            for gram in counts[k]:
                counts[k - 1][gram[1:]] += 1
        self.counts = counts
        self.discounts = []
        self.context_total: list[dict[str, int]] = []
        self.context_types: list[dict[str, int]] = []
        for table in counts:
            histogram = Counter(c for c in table.values() if c <= 2)
            n1, n2 = histogram[1], histogram[2]
            self.discounts.append(n1 / (n1 + 2 * n2) if n1 else 0.5)  # no singletons (a tiny alphabet): half a count
            total: dict[str, int] = {}
            types: dict[str, int] = {}
            for gram, count in table.items():
                h = gram[:-1]
                total[h] = total.get(h, 0) + count
                types[h] = types.get(h, 0) + 1
            self.context_total.append(total)
            self.context_types.append(types)
        self.uniform = 1.0 / (len(counts[0]) + 1)  # the characters seen, plus one for any other

    def probability(self, context: str, char: str) -> float:
        """P(char | the last order-1 characters of context)."""
        p = self.uniform
        for k in range(self.order):  # order 1 first, each higher order interpolated with the one below
            h = context[len(context) - k :] if k else ""
            if len(h) < k:
                break
            total = self.context_total[k].get(h)
            if not total:
                continue  # an unseen context: the lower order's estimate as it is
            d = self.discounts[k]
            count = self.counts[k].get(h + char, 0)
            p = max(count - d, 0.0) / total + d * self.context_types[k][h] / total * p
        return p

    def bits(self, before: str, text: str) -> float:
        """Bits per character of ``text`` read after ``before``."""
        if not text:
            raise ValueError("there is no held-out text to measure")
        stream = before[-(self.order - 1) :] + text if self.order > 1 else text
        first = len(stream) - len(text)
        total = 0.0
        for i in range(first, len(stream)):
            total -= math.log2(self.probability(stream[max(0, i - self.order + 1) : i], stream[i]))
        return total / len(text)
