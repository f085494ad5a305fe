"""benchmarks/bench_longdoc.py: its FLOP bounds reproduce the issue's figures at bart-base dimensions, type specs
are validated, and a tiny in-process smoke run completes (no timing is asserted)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, load_benchmark

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import harness  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_longdoc")


def test_flop_bounds_at_bart_base_dimensions(bench):
    args = bench.parser().parse_args([])  # bart-base: d 768, ffn 3072, 12 heads, 6 layers, r = 100
    full, neighborhood = bench.parse_type("full"), bench.parse_type("neighborhood")
    # issue 13: "the FLOP bound at bart-base dimensions is about 1.8x" at 4k and "about 4.3x" at 16k
    assert bench.bounds(neighborhood, full, 4096, args)["forward_bound"] == pytest.approx(1.81, abs=0.01)
    assert bench.bounds(neighborhood, full, 16384, args)["forward_bound"] == pytest.approx(4.37, abs=0.01)
    assert bench.bounds(neighborhood, full, 1024, args)["forward_bound"] < 1.2
    led = bench.bounds(bench.parse_type("led"), full, 4096, args)
    assert led["forward_bound"] == bench.bounds(neighborhood, full, 4096, args)["forward_bound"]
    # training adds the decoder, which reads all n encoder states: a lower bound than the forward's
    train = bench.bounds(neighborhood, full, 4096, args)["train_bound"]
    assert 1 < train < 1.81
    # the blocked kernel computes b + 2r = 232 keys per query, not 201
    assert 1 < bench.bounds(neighborhood, full, 4096, args)["forward_kernel_bound"] < 1.81
    shared = bench.layer_flops(bench.parse_type("convolutional"), 4096, 768, 3072, 12, 100, 3, 3)
    per_head = bench.layer_flops(bench.parse_type("convolutional_per_head"), 4096, 768, 3072, 12, 100, 3, 3)
    assert per_head < shared < bench.layer_flops(full, 4096, 768, 3072, 12, 100, 3, 3)
    assert bench.parse_type("neighborhood:r=50") == {"type": "neighborhood", "name": "neighborhood:r=50", "r": 50}


@pytest.mark.parametrize("spec", ["sparse", "neighborhood:q=3", "neighborhood:r=x"])
def test_bad_type_specs_raise_naming_the_flag(bench, spec):
    with pytest.raises(SystemExit, match="--types"):
        bench.parse_type(spec)


def test_smoke_run_in_process(bench, tmp_path):
    doc = bench.main(["--lengths", "24", "--types", "neighborhood,full,convolutional_per_head,led", "--d_model",
                      "16", "--heads", "2", "--ffn", "24", "--layers", "1", "--vocab_size", "50", "--radius", "3",
                      "--target_length", "4", "--repeats", "2", "--in_process", "--no_train", "--json",
                      str(tmp_path / "bench.json")])
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved == doc and harness.validate(saved) == []
    names = [m["name"] for m in saved["measurements"]]
    # full leads every round (the baseline first); each type: its time, then its ratio to full with the FLOP bound
    assert names == ["forward full @24", "forward neighborhood @24", "forward neighborhood / full @24",
                     "forward convolutional_per_head @24", "forward convolutional_per_head / full @24",
                     "forward led @24", "forward led / full @24"]
    ratio = saved["measurements"][2]
    assert ratio["unit"] == "x" and ratio["n"] == 2 and ratio["bound"]["kind"] == "flop"
    assert ratio["bound"]["value"] == pytest.approx(
        bench.bounds(bench.parse_type("neighborhood"), bench.parse_type("full"), 24,
                     bench.parser().parse_args(["--d_model", "16", "--ffn", "24", "--layers", "1", "--radius", "3",
                                                "--heads", "2", "--vocab_size", "50", "--target_length", "4"]))
        ["forward_bound"])
    assert saved["measurements"][0]["repeats"] and saved["command"].startswith("python benchmarks/bench_longdoc.py")


@pytest.mark.parametrize(("argv", "option"), [(["--lengths", "16385"], "--lengths"),
                                             (["--lengths", "4k"], "--lengths"),
                                             (["--types", "full,sparse"], "--types"),
                                             (["--repeats", "0"], "--repeats")])
def test_bad_input_exits_naming_the_option(argv, option):
    """Run as a user would: exit status 2, the option named on stderr, no traceback."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_longdoc.py"), *argv],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and option in done.stderr and "Traceback" not in done.stderr


def test_sweep_plot_of_a_smoke_sweep(bench, tmp_path):
    bench.main(["--lengths", "24", "--types", "full,neighborhood:r=2,neighborhood:r=5,led:r=3,convolutional:k=2:s=2,"
                "convolutional_per_head:k=4:s=4", "--d_model", "16", "--heads", "2", "--ffn", "24", "--layers", "1",
                "--vocab_size", "50", "--radius", "3", "--target_length", "4", "--repeats", "1", "--in_process",
                "--no_train", "--sweep_plot", str(tmp_path / "sweep.png")])
    assert (tmp_path / "sweep.png").stat().st_size > 0


@pytest.mark.parametrize("length", [64, 70])  # 70: not a multiple of the kernel's query block (16)
@pytest.mark.parametrize("spec", ["full", "neighborhood", "neighborhood:r=20", "convolutional", "convolutional:k=5:s=3",
                                  "convolutional_per_head", "neighborhood_convolutional", "led"])
def test_flop_formulas_are_what_torch_counts(bench, spec, length):
    """`kernel_layer_flops` equals torch's FLOP counter (`harness.count_flops`) on the encoder forward the benchmark
    times, for every type; `layer_flops` (the band bound) equals it where no kernel computes beyond the band (full,
    convolutional) and stays below it elsewhere; `decoder_flops` equals the training call's forward minus its
    encoder (LongDoc's decoder; LED's scores t(t - 1) / 2 more self-attention pairs a layer, left out). Tiny
    dimensions (d 32, 4 heads, ffn 48, 2 + 2 layers, r 5, kernel = stride 3)."""
    import torch

    args = bench.parser().parse_args(["--d_model", "32", "--heads", "4", "--ffn", "48", "--layers", "2", "--radius",
                                      "5", "--kernel", "3", "--stride", "3", "--target_length", "6", "--vocab_size",
                                      "101"])
    kind = bench.parse_type(spec)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 101, (1, length), generator=generator)
    mask, labels = torch.ones_like(ids), torch.randint(3, 101, (1, 6), generator=generator)
    model = bench.build(kind, args, length).eval()
    with torch.no_grad():
        encoder = harness.count_flops(lambda: model.get_encoder()(input_ids=ids, attention_mask=mask))
        whole = harness.count_flops(lambda: model(input_ids=ids, attention_mask=mask, labels=labels))
    settings = (32, 48, 4, 5, 3, 3)
    assert encoder == 2 * bench.kernel_layer_flops(kind, length, *settings)
    band = 2 * bench.layer_flops(kind, length, *settings)
    assert encoder == band if kind["type"] in ("full", "convolutional", "convolutional_per_head") else encoder > band
    decoder = bench.decoder_flops(length, 6, 32, 48, 2, 101)
    assert whole - encoder == decoder + (2 * 6 * 5 * 32 * 2 if kind["type"] == "led" else 0)
