"""What a module's weights multiply, counted at ATen's matrix products.

``model.w(x)``, ``F.linear(x, w)``, ``x @ w.T``, ``torch.einsum`` and ``torch.bmm`` all come down to
one of a few ATen products (:data:`PRODUCTS`), so counting there sees every spelling of "multiply by
this weight". A weight is known by its storage; a view of it (``w.T``, ``w.view(...)``) shares that
storage, and a copy (``w.clone()``, ``w.contiguous()``) or a stack of several weights
(``torch.stack([...])``) is followed: what a copying operator (:data:`COPIES`) makes from a counted
weight is counted as that weight (a stack as its members, one per slice of its first axis).

Advisory, as everything in the learner's process is: the counts are as good as the process that
keeps them. The grader reads them as evidence of how the work was split, never as the answer.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: the ATen operators that copy a weight (views share its storage and need no following)
COPIES = frozenset({"clone", "_to_copy", "copy_", "stack", "cat", "_unsafe_view", "repeat", "index_select",
                    "expand_copy", "permute_copy", "t_copy", "transpose_copy", "view_copy"})
#: the ATen products through which a weight reads rows of features, whichever function led to them
PRODUCTS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot", "_mkldnn_matmul"})


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()  # 0 for an empty tensor, which holds no weight


class ProductCount(TorchDispatchMode):
    """For each weight of ``weights`` (name -> tensor): ``rows``, the rows of features multiplied by it,
    ``nonzero``, those of them not all zero (a row of padding costs a product but carries no token), and
    ``calls``, the products it took part in. ``unattributed`` counts products of a stack of weights whose
    rows could not be told apart by member."""

    def __init__(self, weights: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        #: storage -> the names it holds, one per slice of the first axis for a stack
        self.owners: dict[int, tuple[str, ...]] = {_storage(w): (name,) for name, w in weights.items()}
        self.rows = dict.fromkeys(weights, 0)
        self.nonzero = dict.fromkeys(weights, 0)
        self.calls = dict.fromkeys(weights, 0)
        self.unattributed = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled; wrapping the handler for dynamo would import it (seconds)

    def _owner(self, t: torch.Tensor) -> tuple[str, ...] | None:
        if t.layout != torch.strided or t.device.type == "meta" or not t.numel():
            return None
        return self.owners.get(_storage(t))

    def read(self, name: str, inputs: list[torch.Tensor]) -> None:
        """One product of the weight ``name`` with ``inputs`` (its other tensors): the widest is the features."""
        if not inputs:
            return
        x = max(inputs, key=lambda t: t.numel())
        flat = x.detach().reshape(-1, max(x.shape[-1], 1)) if x.dim() else x.detach().reshape(1, 1)  # (rows, features)
        self.rows[name] += flat.shape[0]
        self.nonzero[name] += int((flat != 0).any(dim=-1).sum())
        self.calls[name] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
        owned = [(t, self._owner(t)) for t in tensors]
        if not any(o for _, o in owned):
            return out
        inputs = [t for t, o in owned if o is None and t.dim() >= 1]
        op = func.name().partition("::")[2].split(".")[0]
        if op in PRODUCTS:
            for _, names in owned:
                if names is None:
                    continue
                if len(names) == 1:
                    self.read(names[0], inputs)
                elif inputs and all(x.dim() >= 1 and x.shape[0] == len(names) for x in inputs):
                    for i, name in enumerate(names):  # a batched product of stacked weights: slice i is member i
                        self.read(name, [x[i] for x in inputs])
                else:
                    self.unattributed += 1
            return out
        if op not in COPIES:  # an embedding looked up in a weight is an activation, not a copy of the weight
            return out
        # A copy of a counted weight (a clone, a stack) is counted as that weight.
        sources = [o for _, o in owned if o]
        made = [t for t in tree_flatten(out if op != "copy_" else args[0])[0]
                if isinstance(t, torch.Tensor) and self._owner(t) is None]
        if made:
            whole = tuple(n for names in sources for n in names)
            for t in made:
                if t.layout == torch.strided and t.device.type != "meta" and t.numel():
                    self.owners[_storage(t)] = sources[0] if len(sources) == 1 else whole
        return out

    def counts(self) -> dict[str, tuple[int, int, int]]:
        """(rows, nonzero rows, calls) by weight, as plain data."""
        return {name: (self.rows[name], self.nonzero[name], self.calls[name]) for name in self.rows}
