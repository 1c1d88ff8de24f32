"""Chapter 9 checks: attention against the hardware.

One module per topic: :mod:`.tiled` (``tiled_attention``), :mod:`.rope` (``apply_rope``),
:mod:`.grouped` (``grouped_query_attention``, ``KVCache``) and :mod:`.window`
(``sliding_window_mask``).

Oracles: plain attention in float64 (the formula, and ``F.scaled_dot_product_attention``) with
``torch.logsumexp`` of its scores; rotary embedding written with complex numbers, and its
defining property (a score depends on the distance between the positions only); chapter 3's
multi-head attention with each key/value head repeated; the filled prefix of a cache as the
concatenation of what was written; the window's rule written position by position.

The memory bound of tiled attention is the sandbox's: each learner process may allocate 2 GiB
(``Limits.memory_mb``, a kernel limit set before any learner code runs), and a long case's scores
alone would take more: 2.25 GiB for the visible one, 2.0 to 2.4 GiB for the hidden one, whose length,
width, block size and mask are drawn (an instructor who raises ``--memory-mb`` past that lets a whole
score matrix through). The case's own budget (:mod:`harness.memory_budget`) makes a notebook,
which has no such limit, fail the same answer at once.
"""
from __future__ import annotations

from .grouped import GroupedQueryAttentionCheck, KVCacheCheck
from .rope import ApplyRopeCheck
from .tiled import TiledAttentionCheck
from .window import SlidingWindowMaskCheck

CHECKS = [TiledAttentionCheck, ApplyRopeCheck, GroupedQueryAttentionCheck, KVCacheCheck, SlidingWindowMaskCheck]
