"""reproduce/longdoc_xsum.py --smoke: one encoder attention type from a tiny random BERT, two CPU steps, lead-1 and
lead-3 beside."""

from tests.reproduce.conftest import check_results, entry_point


def test_longdoc_xsum_smoke(tmp_path, data_dir, tiny_bert):
    longdoc = entry_point("longdoc_xsum")
    out, pack = tmp_path / "out", tmp_path / "pack"
    assert longdoc.main(["--smoke", "--warm_start", str(tiny_bert), "--types", "neighborhood", "--output_dir",
                         str(out), "--data_dir", str(data_dir), "--pack_dir", str(pack)]) == 0
    results = check_results(out / "results.json", rows=1)
    assert results["rows"][0]["encoder_attention_type"] == "neighborhood" and results["rows"][0]["train_steps"] == 2
    assert set(results["baselines"]) == {"lead_1", "lead_3"} and results["warm_start"] == str(tiny_bert)
    assert set(entry_point("_common").unpack(pack, tmp_path / "unpacked", only=["results.json"])[0].parent.iterdir())
