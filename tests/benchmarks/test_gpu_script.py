"""benchmarks/gpu.py, rehearsed: every step of the GPU measurement runs on the CPU with tiny models and
leaves every figure in its file; the figures' arithmetic is checked on its own."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course.layout import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import gpu  # noqa: E402  (benchmarks/gpu.py)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    folder = tmp_path_factory.mktemp("gpu")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--rehearse", "--out",
                           str(folder / "results.json"), "--runs", str(folder / "runs")],
                          capture_output=True, text=True, cwd=folder, timeout=900)
    results = json.loads((folder / "results.json").read_text()) if (folder / "results.json").is_file() else {}
    return done, results


@pytest.mark.slow  # an end-to-end run: two trainings, a compilation, two decodings of the test words
def test_the_rehearsal_measures_every_figure(rehearsal):
    done, results = rehearsal
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("budget: at most ")
    assert results["rehearsal"] is True and results["errors"] == {} and results["stopped"] is None
    assert results["hardware"]["cpus"] >= 1 and results["hardware"]["torch"]
    g2p, test, gpt = results["g2p"], results["g2p_test"], results["gpt"]
    # 12 steps, unless a machine too busy for them reached the time limit first: then at least one evaluation
    assert 4 <= g2p["steps"] <= 12 and g2p["tokens_per_s"] > 0 and g2p["tflops_per_s"] > 0
    assert g2p["mfu"] == "unknown"  # a CPU has no entry in the peak table
    assert g2p["time_to_target"]["reached"] and 0 < g2p["time_to_target"]["seconds"] < g2p["seconds"]
    assert g2p["evaluations"] >= g2p["steps"] // 4 and g2p["evaluation_seconds"] > 0
    assert 1 <= g2p["batch_shapes"] <= 4 and 1 <= g2p["graphs_compiled"] <= 2  # few shapes, no compile per batch
    assert g2p["config"]["compile"] and g2p["config"]["bucket"] == 8
    for name in ("greedy", "beam 4"):
        figures = test[name]
        assert 0 <= figures["wer"] <= 100 and 0 <= figures["per"]
        # all 200 words, or on a machine too busy for them a random sample of whole chunks of 64, said so
        assert figures["words"] >= 64 and figures["complete"] == (figures["words"] == figures["of"] == 200)
    assert test["split_words"] == 11_994
    assert 1 <= gpt["steps"] <= 12 and gpt["tokens_per_s"] > 0 and 0 < gpt["bpc"] < 8 + 1e-9
    assert gpt["characters"] == 4000 and gpt["data"]["python"]
    assert "Rehearsal on the CPU" in results["markdown"] and "| G2P test WER / PER, beam 4 |" in results["markdown"]
    assert "--rehearse" in results["command"]
    attention = results["attention"]
    measured = {row["method"] for row in attention["rows"] if "skipped" not in row}
    assert measured == {"plain attention", "tiled_attention (course)", "fused kernel (PyTorch)"}
    assert all(row["agrees"] for row in attention["rows"] if "skipped" not in row)
    assert [row["T"] for row in attention["rows"] if "skipped" in row] == [512, 1024]  # plain, past a 1 MiB budget
    assert "| attention, T = 1,024, tiled_attention (course) (torch.float32) |" in results["markdown"]


def test_the_figures_arithmetic():
    assert gpu.utilisation(98.95, "NVIDIA H200")["mfu"] == pytest.approx(0.1)
    assert gpu.utilisation(50.0, "NVIDIA B200")["mfu"] == "unknown"
    log = [{"step": 1000, "elapsed_s": 10.0, "wer": 40.0}, {"step": 2000, "elapsed_s": 20.0, "wer": 24.0},
           {"step": 3000, "elapsed_s": 30.0, "wer": 22.0}]
    assert gpu.time_to_target(log, 25.0) | {} == {"target_wer": 25.0, "reached": True, "seconds": 20.0, "step": 2000,
                                                  "dev_wer": 24.0, "best_dev_wer": 22.0}
    assert gpu.time_to_target(log, 20.0)["reached"] is False
    windows = [{"tokens_per_s": 1.0, "tflops_per_s": 0.1}, *({"tokens_per_s": t, "tflops_per_s": 2 * t} for t in (4, 5, 6))]
    assert gpu.throughput(windows, None)["tokens_per_s"] == 5  # the first window, compiling, is left out


def test_a_decoding_stopped_by_its_limit_scores_a_random_sample():
    words = [f"w{i}" for i in range(100)]
    references = [[("A",)] for _ in words]
    full = gpu.score(words, references, lambda chunk: [["A"] for _ in chunk], seconds=60, chunk=10)
    assert full["complete"] and full["wer"] == 0 and full["words"] == 100
    cut = gpu.score(words, references, lambda chunk: [["B"] for _ in chunk], seconds=0.0, chunk=10)
    assert not cut["complete"] and cut["words"] == 10 and cut["wer"] == 100  # one chunk, then the limit


def test_the_budget_fits_one_ten_minute_command():
    assert gpu.GPU_BUDGET.total <= 9 * 60
    assert gpu.GPU_BUDGET.g2p_training == gpu.T.PRESETS["gpu"].time_limit
    assert gpu.GPU_BUDGET.gpt_training == gpu.G.PRESETS["gpu"].time_limit


def test_the_gpu_run_needs_no_package_of_the_instructor():
    """A bare GPU image has torch, numpy, tqdm and matplotlib, not nbformat or the course's other tools."""
    script = str(REPO / "benchmarks" / "gpu.py")
    code = ("import runpy, sys; sys.modules.update(dict.fromkeys(['nbformat', 'jupytext', 'nbgrader', 'yaml'], None)); "
            f"sys.argv = ['gpu.py', '--help']; runpy.run_path({script!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--rehearse" in done.stdout
