"""Chapter 9's measurements, side by side in one run on this machine.

    python benchmarks/attention_hardware.py               T from 512 to 32,768, then 512 tokens written (minutes)
    python benchmarks/attention_hardware.py --quick       small sizes, in seconds: what the rehearsal test runs
    python benchmarks/attention_hardware.py --out F.json  the figures as JSON too

1. Attention of one head of d_k = 64 features over T tokens, (1, 1, T, 64) float32: the peak memory above
   what was held before the call and the time (:mod:`course.tools.peak_memory`) of plain attention
   (scores, softmax, weighted sum), the course's ``tiled_attention`` (blocks of 256 keys) and PyTorch's
   fused CPU kernel (``SDPBackend.FLASH_ATTENTION``). Plain attention runs only while its scores and
   weights fit in ``--budget-mib`` (2,048 by default): past it the row says so.
2. Writing: chapter 9's GPT (rotary positions) at the shape of chapter 7's CPU preset, untrained (the speed
   does not depend on the weights), writes ``--steps`` tokens after a 16-token prompt, greedily: reading the
   whole sequence again at every step, with a cache of h key/value heads, and with a grouped cache of one
   key/value head shared by the h query heads. Tokens per second and the cache's bytes per token.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (beside this file)

from course.tools.peak_memory import measure  # noqa: E402
from reference.hardware import tiled_attention  # noqa: E402
from transformer.gpt.model import GPTConfig  # noqa: E402
from transformer.gpt.variants import build_gpt, generate_cached  # noqa: E402

D_K, BLOCK = 64, 256


def plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (1, 1, T, T)
    return torch.softmax(scores, dim=-1) @ v


def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return tiled_attention(q, k, v, BLOCK)[0]


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)


def methods(block: int) -> dict[str, Callable[..., torch.Tensor]]:
    """The three ways of computing one attention, the course's in blocks of ``block`` keys."""
    return {"plain attention": plain, "tiled_attention (course)": lambda q, k, v: tiled_attention(q, k, v, block)[0],
            "fused kernel (PyTorch)": fused}


def cpu_figures(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> dict[str, float]:
    found = measure(fn, *args)
    return {"peak_mib": found.peak_bytes / 2**20, "ms": found.seconds * 1000}


def attention(lengths: Sequence[int], budget: int, block: int = BLOCK, figures: Callable[..., dict] = cpu_figures,
              device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
              seconds: float = math.inf) -> dict[str, object]:
    """A row per length and method: its ``figures`` (peak memory and time), or why it was not run; plain attention
    runs while its scores and weights fit in ``budget`` bytes, and nothing starts once ``seconds`` have passed."""
    rows: list[dict[str, object]] = []
    began = time.perf_counter()
    torch.manual_seed(0)
    for T in lengths:
        q, k, v = (torch.randn(1, 1, T, D_K, device=device, dtype=dtype) for _ in range(3))
        reference = None
        for name, fn in methods(block).items():
            if time.perf_counter() - began > seconds:
                return {"rows": rows, "stopped": f"the part's {seconds:.0f} s ran out"}
            needed = 2 * T * T * q.element_size()  # scores and weights alive at once
            if name == "plain attention" and needed > budget:
                rows.append({"T": T, "method": name, "skipped": f"needs {needed / 2**20:,.0f} MiB"})
                continue
            out = fn(q, k, v).float()  # the answer, and a first call before the measured ones
            found = figures(fn, q, k, v)
            reference = out if reference is None else reference
            atol = 1e-4 if dtype == torch.float32 else 3e-2
            rows.append({"T": T, "method": name, **found, "agrees": bool(torch.allclose(out, reference, atol=atol))})
    return {"rows": rows}


def writing(steps: int, shape: dict[str, int]) -> list[dict[str, object]]:
    torch.manual_seed(0)
    prompt = torch.randint(0, 256, (1, 16))
    rows = []
    for name, kv_heads, cached in (("no cache", 0, False), ("cache", shape["h"], True), ("grouped cache", 1, True)):
        torch.manual_seed(1)  # the same weights for the first two, whose tokens must then be the same
        model = build_gpt(GPTConfig(vocab_size=256, block_size=128, positions="rope", kv_heads=kv_heads, **shape)).eval()
        with torch.no_grad():
            start = time.perf_counter()
            if cached:
                tokens = generate_cached(model, prompt, steps)
            else:
                ids = prompt
                for _ in range(steps):
                    ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
                tokens = ids[:, 16:]
            seconds = time.perf_counter() - start
        heads = kv_heads or shape["h"]
        per_token = 2 * shape["N"] * heads * (shape["d_model"] // shape["h"]) * 4 if cached else 0
        rows.append({"method": name, "tokens_per_s": steps / seconds, "cache_bytes_per_token": per_token,
                     "tokens": tokens[0, :8].tolist()})
    return rows


def report(found: dict[str, object]) -> str:
    lines = [f"Machine: {found['machine']}", "", "| T | method | peak memory | time |", "|---:|---|---:|---:|"]
    for row in found["attention"]:  # type: ignore[union-attr]
        if "skipped" in row:
            lines.append(f"| {row['T']:,} | {row['method']} | not run: {row['skipped']} | |")
        else:
            lines.append(f"| {row['T']:,} | {row['method']} | {row['peak_mib']:,.1f} MiB | {row['ms']:,.1f} ms |")
    lines += ["", "| writing | tokens/s | cache bytes per token |", "|---|---:|---:|"]
    for row in found["writing"]:  # type: ignore[union-attr]
        lines.append(f"| {row['method']} | {row['tokens_per_s']:,.1f} | {row['cache_bytes_per_token']:,} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds, for the rehearsal")
    parser.add_argument("--budget-mib", type=int, default=2048, help="plain attention's memory budget")
    parser.add_argument("--steps", type=int, default=512, help="tokens to write")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    lengths = [256, 512, 1024] if args.quick else [512, 1024, 2048, 4096, 8192, 16384, 32768]
    shape = dict(d_model=32, h=4, N=1, d_ff=64) if args.quick else dict(d_model=128, h=4, N=4, d_ff=512)
    steps = min(args.steps, 16) if args.quick else args.steps
    found = {"machine": machine.cpu_line(), "threads": torch.get_num_threads(),
             "attention": attention(lengths, args.budget_mib << 20)["rows"], "writing": writing(steps, shape)}
    text = report(found)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**found, "markdown": text}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
