"""The capstone's measured figures, in one run on one machine.

    python benchmarks/capstone.py                     the full measurement (about 25 minutes on CPU)
    python benchmarks/capstone.py --seconds 20 --test-words 200 --steps 5   a quick rehearsal

0. The classical baseline, Phonetisaurus (a benchmark dependency: see benchmarks/phonetisaurus_g2p.py),
   trained on the same training words and scored on the same test words with the same metric; its
   training and decoding time, CPU seconds and wall-clock.
1. CPU threads: training tokens/s of the CPU preset with 1 and 2 threads; the faster is used below.
2. The CPU preset trained for --seconds, beside PyTorch's nn.Transformer of the same size trained
   by the same loop for the same time: test WER/PER (stress removed, standard split).
3. Training tokens/s of the course model (the chapters' code; fused attention; fused layer norm) and
   nn.Transformer at the same configuration.
4. On a GPU, when there is one: the GPU preset trained for --seconds: WER/PER greedy and with
   beam search, the time it took, tokens/s and MFU.

Every figure printed was measured in this run; copy them, with the hardware line, into
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import phonetisaurus_g2p  # noqa: E402  (beside this file)
from machine import cpu_line  # noqa: E402  (beside this file)

from transformer.g2p import train as T  # noqa: E402
from transformer.g2p.data import G2PData, load  # noqa: E402
from transformer.g2p.evaluate import evaluate_run  # noqa: E402
from transformer.loop import make_optimizer  # noqa: E402


def hardware() -> str:
    line = f"{cpu_line()}, {torch.get_num_threads()} threads available to torch, torch {torch.__version__}"
    if torch.cuda.is_available():
        line += f", GPU {torch.cuda.get_device_name(0)}"
    return line


class Stepper:
    """One configuration's model and optimizer, trained step by step on the training loop's own batches
    (the task's batching and loss), without its records, evaluations and checkpoints."""

    def __init__(self, config: T.TrainConfig, device: torch.device, g2p: G2PData, threads: int = 0) -> None:
        self.config, self.device, self.threads = config, device, threads
        self.task = T.G2PTask(config, g2p)
        self.task.prepare()
        self.batches = self.task.epoch_batches(0)
        torch.manual_seed(0)
        self.model = self.task.build_model().to(device).train()
        # the loop's optimizer, at a fixed rate
        self.optimizer = make_optimizer(self.model, config.weight_decay, lr=1e-4, fused=config.fused_adam)

    def run(self, first: int, steps: int) -> float:
        """Train on batches first .. first + steps - 1; return tokens/s (source + target, padding excluded)."""
        if self.threads:
            torch.set_num_threads(self.threads)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        tokens, start = 0, time.perf_counter()
        for indices in self.batches[first : first + steps]:
            batch = self.task.make_batch(indices, self.device)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.bf16(self.device)):
                logits = self.model(*batch.inputs)
            loss = self.task.loss(logits, batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            tokens += batch.tokens
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return tokens / (time.perf_counter() - start)


#: the configurations whose training speed is compared, as overrides of a preset
#: PyTorch's own layers, in place of the chapters' (it takes no fused path of the course's)
NN_TRANSFORMER = {"implementation": "torch", "attention": "course", "norm": "course"}
#: what section 3 times, each as a change to a preset: every kernel path alone and together
VARIANTS = (
    ("course model, the chapters' code", {"attention": "course", "norm": "course", "fused_adam": False}),
    ("course model, fused attention", {"attention": "fused", "norm": "course", "fused_adam": False}),
    ("course model, fused layer norm", {"attention": "course", "norm": "fused", "fused_adam": False}),
    ("course model, fused Adam", {"attention": "course", "norm": "course", "fused_adam": True}),
    ("course model, fused layer norm + Adam", {"attention": "course", "norm": "fused", "fused_adam": True}),
    ("nn.Transformer", NN_TRANSFORMER),
)


def variants(base: T.TrainConfig) -> dict[str, T.TrainConfig]:
    """Each of :data:`VARIANTS` applied to ``base``."""
    return {name: dataclasses.replace(base, **overrides) for name, overrides in VARIANTS}


def tokens_a_second(stepper: Stepper, first: int, steps: int) -> float:
    return stepper.run(first, steps)


def seconds_a_step(stepper: Stepper, first: int, steps: int) -> float:
    started = time.perf_counter()
    stepper.run(first, steps)
    return (time.perf_counter() - started) / steps


def throughputs(steppers: dict[str, Stepper], steps: int, rounds: int,
                measure: Callable[[Stepper, int, int], float] = tokens_a_second) -> dict[str, float]:
    """Median training tokens/s of each configuration (or what ``measure`` returns for ``steps`` steps from
    batch ``first``), measured in interleaved rounds on the same batches.

    On a shared, noisy machine one measurement after the other compares two moments as much as two
    models; alternating them round by round, each round on the same batches, compares the models.
    """
    for stepper in steppers.values():
        stepper.run(0, 2)  # warm-up: first calls allocate and pick kernels
    speeds: dict[str, list[float]] = {name: [] for name in steppers}
    for r in range(rounds):
        first = 2 + r * steps
        for name, stepper in steppers.items():
            speeds[name].append(measure(stepper, first, steps))
    return {name: statistics.median(values) for name, values in speeds.items()}


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


def classical_baseline(g2p: G2PData, test_words: int, folder: Path) -> None:
    """Phonetisaurus on the capstone's split, scored as the course's model is."""
    limit = test_words or len(g2p.test.words)
    try:
        r = phonetisaurus_g2p.measure(g2p.train.pairs, list(g2p.test.words[:limit]),
                                      list(g2p.test.references[:limit]), folder)
    except phonetisaurus_g2p.Unavailable as missing:
        print(f"   skipped: {missing}")
        return
    print(f"   trained on {r['training_pronunciations']:,} pronunciations: {r['train_wall_seconds']:.0f} s wall-clock, "
          f"{r['train_cpu_seconds']:.0f} CPU s (its binaries use one core)")
    print(f"   decoded {r['words']:,} test words: {r['decode_wall_seconds']:.1f} s wall-clock, "
          f"{r['decode_cpu_seconds']:.1f} CPU s")
    print(f"   WER {r['wer']:.2f} %, PER {r['per']:.2f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="training time of each run (default 600)")
    parser.add_argument("--test-words", type=int, default=0,
                        help="score only N test words, drawn at random with seed 0 (default: all)")
    parser.add_argument("--steps", type=int, default=50, help="training steps of each throughput measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each throughput comparison")
    parser.add_argument("--skip-cpu-training", action="store_true")
    parser.add_argument("--skip-phonetisaurus", action="store_true", help="leave out the classical baseline")
    args = parser.parse_args()
    print(f"hardware: {hardware()}")
    g2p = load()
    cpu = torch.device("cpu")
    scratch = Path(tempfile.mkdtemp(prefix="capstone-benchmark-"))

    if not args.skip_phonetisaurus:
        print("\n0. the classical baseline: Phonetisaurus (joint-sequence WFST), the same split and metric")
        classical_baseline(g2p, args.test_words, scratch / "phonetisaurus")

    print(f"\n1. CPU threads (CPU preset, training tokens/s, median of {args.rounds} interleaved rounds of {args.steps} steps)")
    # one model of the CPU preset (which trains two at once, one process each): what is timed and compared here
    one_model = dataclasses.replace(T.PRESETS["cpu"], members=1)
    cpu_preset = dataclasses.replace(one_model, device="cpu")
    speeds = throughputs({threads: Stepper(cpu_preset, cpu, g2p, threads=threads) for threads in (1, 2)},
                         args.steps, args.rounds)
    for threads, speed in speeds.items():
        print(f"   {threads} thread(s): {speed:,.0f} tokens/s")
    best_threads = max(speeds, key=speeds.get)
    torch.set_num_threads(best_threads)
    print(f"   using {best_threads} thread(s) below")

    if not args.skip_cpu_training:
        print(f"\n2. CPU preset, {args.seconds:.0f} s of training each; test split (stress removed)")
        print(f"   {'model':34s} {'steps':>6s} {'greedy WER':>11s} {'PER':>7s} {'beam 4 WER':>11s} {'PER':>7s}")
        for name, folder, overrides in (("course model", "cpu-course", {}),
                                        ("nn.Transformer, same size", "cpu-torch", NN_TRANSFORMER)):
            config = dataclasses.replace(one_model, device="cpu", time_limit=args.seconds, threads=best_threads,
                                         eval_every=10**9, checkpoint_every=10**9, **overrides)
            r = trained(config, scratch / folder, args.test_words, beam=4)
            greedy, beam = r["decodings"]["greedy"], r["decodings"]["beam 4, alpha 0.6"]
            print(f"   {name:34s} {r['steps']:6d} {greedy['wer']:10.1f}% {greedy['per']:6.2f}% "
                  f"{beam['wer']:10.1f}% {beam['per']:6.2f}%   ({r['words']:,} words)")

    print(f"\n3. training throughput at the CPU preset's configuration (tokens/s, median of {args.rounds} interleaved rounds)")
    base = dataclasses.replace(one_model, device="cpu", threads=best_threads)
    for name, speed in throughputs({name: Stepper(config, cpu, g2p) for name, config in variants(base).items()},
                                   args.steps, args.rounds).items():
        print(f"   {name:34s} {speed:10,.0f}")

    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        print("\n   the same on the GPU, GPU preset configuration (bf16)")
        gpu_preset = dataclasses.replace(T.PRESETS["gpu"], device="cuda", attention="course")
        for name, speed in throughputs({name: Stepper(config, gpu, g2p) for name, config in variants(gpu_preset).items()},
                                       args.steps, args.rounds).items():
            print(f"   {name:34s} {speed:10,.0f}")
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
