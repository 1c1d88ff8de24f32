"""Whether torch's compiler still computes NaN gradients through the chapters' attention under bf16 on a CPU.

    python benchmarks/compiler_fault.py               the measurement (a minute or two on 2 cores)
    python benchmarks/compiler_fault.py --rehearse    the same steps with the backend that generates no code

Training refuses `--compile` with bf16 on a CPU through the chapters' attention
(`transformer.loop.refuse_compiled_bf16_course_attention`): inductor's CPU code gives NaN gradients
there, and such a run would train nothing for its whole budget. That is a fault of torch, not of the
course, and it can only go away with another torch: run this after changing the torch that
`requirements.txt` pins. It computes one masked attention's gradients under bf16 autocast, uncompiled
and compiled, and exits 0 while the compiled ones still hold a NaN (the refusal is still needed), 1
once they are finite (the refusal can go), 2 if the uncompiled ones are not finite (the measurement
itself is wrong). It needs a CPU that computes bf16 natively (AVX-512 BF16 or AMX): elsewhere
autocast takes another path and it says so and exits 3.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference.attention import scaled_dot_product_attention  # noqa: E402
from transformer.loop import native_bf16  # noqa: E402

CPU = torch.device("cpu")


def finite_gradients(backend: str | None) -> bool:
    """Whether the gradient of one masked attention under bf16 autocast is finite: uncompiled (None) or
    compiled with `backend`. Rows of the mask keep 6 down to 1 keys, so some rows are mostly masked."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 4, 6, 32, requires_grad=True) for _ in range(3))
    mask = (torch.arange(6) < torch.tensor([6, 5, 4, 3, 6, 2, 1, 6])[:, None])[:, None, None, :]  # (8, 1, 1, 6)

    def loss(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)[0].float().square().sum()

    function = loss if backend is None else torch.compile(loss, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        function(q, k, v).backward()
    return bool(torch.isfinite(q.grad).all())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rehearse", action="store_true",
                        help="compile with aot_eager (traces, generates no code: finite gradients), in seconds")
    args = parser.parse_args(argv)
    backend = "aot_eager" if args.rehearse else "inductor"
    print(f"torch {torch.__version__}; bf16 native on this CPU: {native_bf16(CPU)}")
    if not native_bf16(CPU) and not args.rehearse:
        print("this CPU does not compute bf16 natively: the fault is measured on one that does")
        return 3
    if not finite_gradients(None):
        print("the uncompiled gradients are not finite: the measurement itself is wrong")
        return 2
    finite = finite_gradients(backend)
    print(f"compiled with {backend}: gradients {'finite' if finite else 'hold a NaN'}")
    if args.rehearse:
        return 0 if finite else 2
    if finite:
        print("this torch computes them: the refusal in transformer/loop/run.py can go")
        return 1
    print("the fault is still there: keep the refusal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
