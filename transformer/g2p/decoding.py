"""Beam search over a whole batch of sources at once.

It is the chapter 8 exercise's beam search (``reference.capstone.beam_search``), step for step:
the ``beam_size`` best extensions of all live hypotheses together survive, one that ends in
``<eos>`` finishes and leaves the beam, and the finished hypothesis with the best score divided
by ``((5 + |Y|) / 6) ** alpha`` wins. The exercise decodes one word, one hypothesis at a time;
this does every word and every hypothesis in one ``decode`` call per step, which is what makes
evaluating thousands of words practical. A test checks that both give the same answers.
"""
from __future__ import annotations

from typing import Any

import torch


def _repeat(memory: Any, k: int) -> Any:
    """Each source's memory k times over (B, ...) -> (B k, ...): a tensor, one model's named tuple of them, or
    a list of such memories (an ensemble's, one per member)."""
    if isinstance(memory, torch.Tensor):
        return memory.repeat_interleave(k, dim=0)
    if isinstance(memory, list):
        return [_repeat(m, k) for m in memory]
    return type(memory)(*(_repeat(m, k) for m in memory))


def length_penalty(generated: int, alpha: float) -> float:
    """Wu et al. (2016): ((5 + |Y|) / 6) ** alpha, with |Y| the tokens after <bos>."""
    return ((5 + generated) / 6) ** alpha


@torch.no_grad()
def batched_beam_search(
    model: Any, src: torch.Tensor, beam_size: int, max_len: int, bos_id: int, eos_id: int, pad_id: int, alpha: float = 0.0,
) -> tuple[list[list[int]], list[float]]:
    """For each row of src (B, S): the best hypothesis (token ids from <bos>) and its normalised score."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    B, k, device = src.shape[0], beam_size, src.device
    memory = _repeat(model.encode(src), k)  # every hypothesis slot reads its own source
    ys = torch.full((B, k, 1), bos_id, dtype=torch.long, device=device)  # (B, k, t)
    scores = torch.full((B, k), float("-inf"), dtype=torch.float64, device=device)  # (B, k), -inf: empty slot
    scores[:, 0] = 0.0  # one live hypothesis, <bos>, per source
    best: list[tuple[float, list[int]] | None] = [None] * B
    for step in range(1, max_len + 1):
        alive = torch.isfinite(scores)  # (B, k)
        if not bool(alive.any()):
            break
        t = ys.shape[-1]
        logits = model.decode(memory, ys.view(B * k, t))[:, -1].double()  # (B k, V)
        V = logits.shape[-1]
        candidates = scores.unsqueeze(-1) + torch.log_softmax(logits, dim=-1).view(B, k, V)  # (B, k, V)
        # An empty slot holds only padding; a model whose fully masked rows give NaN (nn.Transformer)
        # would fill it with NaN, which topk ranks above every real score: empty slots offer nothing.
        candidates = candidates.masked_fill(~alive.unsqueeze(-1), float("-inf"))
        top_scores, top_index = candidates.view(B, k * V).topk(k, dim=-1)  # (B, k) each, best first
        valid = torch.isfinite(top_scores)
        parent, token = top_index // V, top_index % V  # (B, k)
        finishing = valid & (token == eos_id)
        for b, j in finishing.nonzero().tolist():
            normalised = float(top_scores[b, j]) / length_penalty(step, alpha)
            if best[b] is None or normalised > best[b][0]:
                best[b] = (normalised, ys[b, parent[b, j]].tolist() + [eos_id])
        # The survivors move to the first slots, in order of score; finished ones leave the beam.
        staying = valid & ~finishing  # (B, k)
        slot = staying.long().cumsum(-1) - 1  # (B, k): where each survivor goes
        rows, cols = staying.nonzero(as_tuple=True)
        new_ys = torch.full((B, k, t + 1), pad_id, dtype=torch.long, device=device)
        new_scores = torch.full((B, k), float("-inf"), dtype=torch.float64, device=device)
        new_ys[rows, slot[rows, cols], :t] = ys[rows, parent[rows, cols]]
        new_ys[rows, slot[rows, cols], t] = token[rows, cols]
        new_scores[rows, slot[rows, cols]] = top_scores[rows, cols]
        ys, scores = new_ys, new_scores
        # A log-probability only falls as a hypothesis grows, and the penalty is at most
        # lp(max_len): a live hypothesis can end no better than score / lp(max_len). A word whose
        # best finished hypothesis beats that bound for all its live ones is decided.
        ceiling = length_penalty(max_len, alpha)
        for b in range(B if alpha >= 0 else 0):  # (a negative alpha rewards short outputs: no such bound)
            if best[b] is not None and bool(torch.isfinite(scores[b]).any()):
                if float(scores[b].max()) / ceiling <= best[b][0]:
                    scores[b] = float("-inf")
    tokens, results = [], []
    for b in range(B):
        if best[b] is None:  # nothing finished within max_len: the best live hypothesis
            j = int(scores[b].argmax())
            generated = ys.shape[-1] - 1
            best[b] = (float(scores[b, j]) / length_penalty(generated, alpha), ys[b, j].tolist())
        results.append(best[b][0])
        tokens.append(best[b][1])
    return tokens, results
