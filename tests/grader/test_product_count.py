"""What a weight multiplies, counted at ATen's products (harness.products): every spelling of a product,
copies and stacks of the weight followed, and an activation looked up in a weight not taken for a copy."""
from __future__ import annotations

import torch

from harness.products import ProductCount


def test_every_spelling_of_a_product_is_counted_for_its_weight():
    w = torch.randn(8, 4)
    x = torch.randn(5, 4)
    with ProductCount({"w": w}) as count:
        x @ w.T  # 5 rows
        torch.nn.functional.linear(torch.randn(2, 3, 4), w, torch.randn(8))  # 6 rows
        torch.einsum("nd,fd->nf", x[:2], w)  # 2 rows
        torch.cat([x[:1], torch.zeros(2, 4)]) @ w.T  # 3 rows, 2 of them zeros
    assert count.counts() == {"w": (16, 14, 4)}


def test_copies_and_stacks_are_followed_and_a_stack_is_split_by_member():
    ws = {f"e{i}": torch.randn(8, 4) for i in range(3)}
    with ProductCount(ws) as count:
        torch.randn(1, 4) @ ws["e2"].clone().contiguous().T.contiguous()  # a copy of a copy: still e2
        stacked = torch.stack(list(ws.values()))  # (3, 8, 4)
        buffers = torch.randn(3, 6, 4)
        buffers[1, 4:] = 0  # expert 1's buffer is padded with two rows of zeros
        torch.bmm(buffers, stacked.transpose(1, 2))  # slice i of the buffers meets member i
    assert count.counts() == {"e0": (6, 6, 1), "e1": (6, 4, 1), "e2": (7, 7, 2)}
    assert count.unattributed == 0


def test_an_embedding_looked_up_in_a_weight_is_an_activation():
    table = torch.randn(10, 4)
    with ProductCount({"table": table}) as count:
        h = torch.nn.functional.embedding(torch.tensor([1, 2, 3]), table)  # (3, 4): not a copy of the table
        h @ torch.randn(4, 2)
    assert count.counts() == {"table": (0, 0, 0)}
