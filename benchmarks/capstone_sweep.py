"""Search the CPU preset's settings by measurement: ten minutes of training per attempt, scored on dev.

    python benchmarks/capstone_sweep.py cooldown=0.3                      one attempt: the preset plus overrides
    python benchmarks/capstone_sweep.py cooldown=0.3 d_model=192,d_ff=768   attempts run one after another

    python benchmarks/capstone_sweep.py --budget d_model=192,d_ff=768 max_tokens=2048   steps worth ten minutes

Each attempt is ``python -m transformer.g2p train --preset cpu`` with the given settings (comma-separated
``field=value``), in ``runs/sweep/<settings>``, then the whole dev split decoded greedily. The settings are
chosen on dev; the test split is scored only for the preset finally kept (``benchmarks/capstone.py``), so that
the choice does not fit the test words. Every attempt appends one line to ``runs/sweep/attempts.jsonl``: the
settings, the steps trained, the dev WER and PER, and the load average before and after (the timings mean
something only when the machine was otherwise idle).

Attempts run for a number of steps rather than ten minutes, so that a busy machine slows them down without
changing what they compute. ``--budget`` says how many: it times each setting's training steps beside the
preset's, round by round on the same batches, and scales the steps the preset trains in ten minutes on two
idle cores (:data:`PRESET_STEPS`) by the ratio. The setting finally kept is then trained for ten minutes of
wall-clock time, on an idle machine, by ``benchmarks/capstone.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course.layout import REPO  # noqa: E402

SWEEP = REPO / "runs" / "sweep"
#: training steps of one of the CPU preset's two models in 600 s on two idle cores (the two side by side, one
#: thread each), evaluations included, rounded down: 5,898 and 5,894 measured on 2026-12-02 on the Intel Xeon the
#: course's machines now are (RESULTS.md, attempt 44; one model on two threads trained 6,958 there, attempt 27)
PRESET_STEPS = 5_890


def parse(settings: str) -> list[list[str]]:
    return [item.split("=", 1) for item in settings.split(",") if item]


def budgets(candidates: list[str], preset: str, steps: int, rounds: int) -> None:
    """Print each setting's seconds per training step beside the preset's, and the steps worth ten minutes."""
    import dataclasses

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from capstone import Stepper, seconds_a_step, throughputs

    from transformer.g2p import train as T
    from transformer.g2p.data import load

    base = dataclasses.replace(T.PRESETS[preset], members=1)  # one member's steps, on its own threads
    torch.set_num_threads(base.threads)
    g2p = load()
    configs = {"(the preset)": base}
    for settings in candidates:
        fields = {f.name: f for f in dataclasses.fields(base)}
        configs[settings] = dataclasses.replace(base, **{name: type(getattr(base, name))(value) if fields[name].type != "bool"
                                                        else value.lower() in ("1", "true") for name, value in parse(settings)})
    steppers = {name: Stepper(config, torch.device("cpu"), g2p) for name, config in configs.items()}
    # Alternating, on the same batches: a noisy machine slows every setting alike.
    per_step = throughputs(steppers, steps, rounds, measure=seconds_a_step)
    for name, value in per_step.items():
        budget = int(PRESET_STEPS * per_step["(the preset)"] / value)
        print(f"{name:40s} {value * 1000:7.1f} ms a step   {budget:6d} steps worth the preset's ten minutes",
              flush=True)


def attempt(settings: str, preset: str) -> dict:
    overrides = dict(parse(settings))
    named = overrides.pop("run_dir", "")  # a run_dir among the settings names the folder; otherwise the settings do
    run_dir = REPO / named if named else SWEEP / (settings.replace("=", "-").replace(",", "_") or preset)
    command = [sys.executable, "-m", "transformer.g2p", "train", "--preset", preset, "--run-dir", str(run_dir), "--quiet"]
    for name, value in overrides.items():
        command += [f"--{name.replace('_', '-')}", value]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True)
    trained = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    subprocess.run([sys.executable, "-m", "transformer.g2p", "evaluate", str(run_dir), "--split", "dev", "--beam", "1",
                    "--quiet", "--worst", "0"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    greedy = json.loads((run_dir / "evaluation-dev.json").read_text())["decodings"]["greedy"]
    train = json.loads((run_dir / "metrics.json").read_text())["train"]
    record = {"settings": settings or "(the preset)", "preset": preset, "steps": train[-1]["step"] if train else 0,
              "train_seconds": round(trained, 1), "dev_wer": round(greedy["wer"], 2), "dev_per": round(greedy["per"], 2),
              "tokens_per_s": round(sum(r["tokens_per_s"] for r in train[-20:]) / max(1, len(train[-20:]))),
              "load_before": round(load_before, 2), "load_after": round(load_after, 2),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    with (SWEEP / "attempts.jsonl").open("a") as log:
        log.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attempts", nargs="*", default=[""], help="comma-separated field=value overrides, one per attempt")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--budget", action="store_true", help="time the settings' steps beside the preset's instead")
    parser.add_argument("--steps", type=int, default=20, help="steps a round of --budget times")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --budget")
    args = parser.parse_args()
    if args.budget:
        budgets([a for a in args.attempts if a], args.preset, args.steps, args.rounds)
        return 0
    SWEEP.mkdir(parents=True, exist_ok=True)
    for settings in args.attempts:
        attempt(settings, args.preset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
