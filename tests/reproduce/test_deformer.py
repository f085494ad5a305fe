"""reproduce/deformer.py --smoke: a k = 1 DeFormer distilled from a tiny random teacher for a few CPU steps, chosen
on calibration, exported, scored and packed."""

from tests.reproduce.conftest import check_results, entry_point


def test_deformer_smoke(tmp_path, data_dir, tiny_teacher):
    deformer = entry_point("deformer")
    out, pack = tmp_path / "out", tmp_path / "pack"
    assert deformer.main(["--smoke", "--teacher", str(tiny_teacher), "--ks", "1", "--output_dir", str(out),
                          "--data_dir", str(data_dir), "--pack_dir", str(pack), "--pack_k", "1"]) == 0
    results = check_results(out / "results.json", rows=1)
    row = results["rows"][0]
    assert row["num_decomposed_layers"] == 1 and row["chosen_by"] == "calibration_f1"
    assert row["chosen"] in row["candidates"] and "calibration_f1" in row
    assert {"always_empty", "first_span"} <= set(results["baselines"])
    common = entry_point("_common")
    unpacked = {p.name for p in common.unpack(pack, tmp_path / "unpacked")}
    assert {"config.json", "model.safetensors", "results.json", "model_card.md"} <= unpacked
