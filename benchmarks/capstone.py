"""The capstone's measured figures, in one run on one machine.

    python benchmarks/capstone.py                     the full measurement (about 25 minutes on CPU)
    python benchmarks/capstone.py --seconds 20 --test-words 200 --steps 5   a quick rehearsal

1. CPU threads: training tokens/s of the CPU preset with 1 and 2 threads; the faster is used below.
2. The CPU preset trained for --seconds, beside PyTorch's nn.Transformer of the same size trained
   by the same loop for the same time: test WER/PER (stress removed, standard split).
3. Training tokens/s of the course model (course attention, fused attention) and nn.Transformer
   at the same configuration.
4. On a GPU, when there is one: the GPU preset trained for --seconds: WER/PER greedy and with
   beam search, the time it took, tokens/s and MFU.

Every figure printed was measured in this run; copy them, with the hardware line, into
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference.capstone import label_smoothed_cross_entropy, length_batches  # noqa: E402
from transformer import data as g2p_data  # noqa: E402
from transformer import train as T  # noqa: E402
from transformer.evaluate import evaluate_run  # noqa: E402
from transformer.g2p import Vocabularies, encode_pairs, make_batch  # noqa: E402


def hardware() -> str:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = f"{names[0]} ({len(names)} logical CPUs)" if names else cpu
    line = f"{cpu}, {torch.get_num_threads()} threads available to torch, torch {torch.__version__}"
    if torch.cuda.is_available():
        line += f", GPU {torch.cuda.get_device_name(0)}"
    return line


def throughput(config: T.TrainConfig, steps: int, device: torch.device, g2p: g2p_data.G2PData) -> float:
    """Training tokens/s (source + target, padding excluded) over ``steps`` steps after two of warm-up."""
    vocabs = Vocabularies.make(config.share_embeddings, config.stress)
    examples = encode_pairs(g2p.train.pairs, vocabs)
    batches = length_batches(examples.lengths, config.max_tokens, seed=0)[: steps + 2]
    torch.manual_seed(0)
    model = T.build_model(config, vocabs).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    tokens, start = 0, 0.0
    for i, batch in enumerate(batches):
        if i == 2:
            if device.type == "cuda":
                torch.cuda.synchronize()
            tokens, start = 0, time.perf_counter()
        src, tgt_in, tgt_out = (t.to(device) for t in make_batch(examples, batch, vocabs))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16"):
            logits = model(src, tgt_in)
        loss = label_smoothed_cross_entropy(logits.float(), tgt_out, config.label_smoothing, vocabs.target.pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += int((src != 0).sum()) + int((tgt_out != 0).sum())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def trained(config: T.TrainConfig, folder: Path, test_words: int, beam: int) -> dict:
    started = time.perf_counter()
    result = T.train(dataclasses.replace(config, run_dir=str(folder)), progress=False)
    seconds = time.perf_counter() - started
    scores = evaluate_run(folder, "test", beam=beam, alpha=0.6, limit=test_words, device=config.device, worst=0,
                          progress=False)
    rates = [r for r in result.metrics["train"][1:]]  # the first window includes start-up
    return {
        "steps": result.step, "seconds": seconds, "decodings": scores["decodings"], "words": scores["words"],
        "tokens_per_s": sum(r["tokens_per_s"] for r in rates) / max(len(rates), 1),
        "mfu": (sum(r.get("mfu", 0.0) for r in rates) / max(len(rates), 1)) if rates and "mfu" in rates[0] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="training time of each run (default 600)")
    parser.add_argument("--test-words", type=int, default=0, help="score only the first N test words (default: all)")
    parser.add_argument("--steps", type=int, default=50, help="training steps of each throughput measurement")
    parser.add_argument("--skip-cpu-training", action="store_true")
    args = parser.parse_args()
    print(f"hardware: {hardware()}")
    g2p = g2p_data.load()
    cpu = torch.device("cpu")
    scratch = Path(tempfile.mkdtemp(prefix="capstone-benchmark-"))

    print("\n1. CPU threads (CPU preset, training tokens/s)")
    speeds = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        speeds[threads] = throughput(dataclasses.replace(T.PRESETS["cpu"], device="cpu"), args.steps, cpu, g2p)
        print(f"   {threads} thread(s): {speeds[threads]:,.0f} tokens/s")
    best_threads = max(speeds, key=speeds.get)
    torch.set_num_threads(best_threads)
    print(f"   using {best_threads} thread(s) below")

    if not args.skip_cpu_training:
        print(f"\n2. CPU preset, {args.seconds:.0f} s of training each; test split (stress removed)")
        print(f"   {'model':34s} {'steps':>6s} {'greedy WER':>11s} {'PER':>7s} {'beam 4 WER':>11s} {'PER':>7s}")
        for name, implementation in (("course model", "course"), ("nn.Transformer, same size", "torch")):
            config = dataclasses.replace(T.PRESETS["cpu"], device="cpu", time_limit=args.seconds, threads=best_threads,
                                         implementation=implementation, eval_every=10**9, checkpoint_every=10**9)
            r = trained(config, scratch / f"cpu-{implementation}", args.test_words, beam=4)
            greedy, beam = r["decodings"]["greedy"], r["decodings"]["beam 4, alpha 0.6"]
            print(f"   {name:34s} {r['steps']:6d} {greedy['wer']:10.1f}% {greedy['per']:6.2f}% "
                  f"{beam['wer']:10.1f}% {beam['per']:6.2f}%   ({r['words']:,} words)")

    print("\n3. training throughput at the CPU preset's configuration (tokens/s)")
    base = dataclasses.replace(T.PRESETS["cpu"], device="cpu")
    for name, overrides in (("course model, course attention", {}), ("course model, fused attention", {"attention": "fused"}),
                            ("nn.Transformer", {"implementation": "torch"})):
        speed = throughput(dataclasses.replace(base, **overrides), args.steps, cpu, g2p)
        print(f"   {name:34s} {speed:10,.0f}")

    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        print("\n   the same on the GPU, GPU preset configuration (bf16)")
        for name, overrides in (("course model, course attention", {"attention": "course"}),
                                ("course model, fused attention", {"attention": "fused"}),
                                ("nn.Transformer", {"implementation": "torch", "attention": "course"})):
            config = dataclasses.replace(T.PRESETS["gpu"], device="cuda", **overrides)
            print(f"   {name:34s} {throughput(config, args.steps, gpu, g2p):10,.0f}")
        print(f"\n4. GPU preset, {args.seconds:.0f} s of training; test split (stress removed)")
        config = dataclasses.replace(T.PRESETS["gpu"], device="cuda", time_limit=args.seconds, attention="fused")
        r = trained(config, scratch / "gpu", args.test_words, beam=4)
        greedy, beam = r["decodings"]["greedy"], r["decodings"]["beam 4, alpha 0.6"]
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "unknown (device not in the peak table)"
        print(f"   {r['steps']} steps in {r['seconds']:.0f} s; {r['tokens_per_s']:,.0f} tokens/s; MFU {mfu}")
        print(f"   greedy: WER {greedy['wer']:.1f} %, PER {greedy['per']:.2f} %; "
              f"beam 4: WER {beam['wer']:.1f} %, PER {beam['per']:.2f} %  ({r['words']:,} words)")
    else:
        print("\n4. no GPU on this machine: nothing measured for the GPU preset")
    print(f"\nrun folders: {scratch}")


if __name__ == "__main__":
    main()
