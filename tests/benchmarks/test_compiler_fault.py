"""benchmarks/compiler_fault.py, rehearsed: the measurement of torch's fault runs end to end, and tells finite
gradients from NaN ones (the fault itself is measured by the script after a change of torch, not by the suite)."""
from __future__ import annotations

import sys

from course.layout import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import compiler_fault  # noqa: E402  (benchmarks/compiler_fault.py)


def test_the_rehearsal_finds_finite_gradients(capsys):
    assert compiler_fault.main(["--rehearse"]) == 0
    assert "compiled with aot_eager: gradients finite" in capsys.readouterr().out


def test_a_nan_gradient_is_seen(monkeypatch):
    def poisoned(q, k, v, mask):
        output, weights = scaled_dot_product_attention(q, k, v, mask)
        return output * float("nan"), weights

    scaled_dot_product_attention = compiler_fault.scaled_dot_product_attention
    monkeypatch.setattr(compiler_fault, "scaled_dot_product_attention", poisoned)
    assert compiler_fault.finite_gradients(None) is False
