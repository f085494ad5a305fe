"""Model cards: `model_cards/` generated from the recorded metrics are up to date (regenerated and diffed), every card's
metadata parses with `huggingface_hub.ModelCard.load`, and the generated cards' model-index values are the recorded
metrics."""

import importlib.util
import json

import pytest

from hf_readonce.hub.cards import EvalRow, build_model_card, qa_rows_from_metrics
from tests.conftest import REPO_ROOT

CARDS = REPO_ROOT / "model_cards"


def generator():
    spec = importlib.util.spec_from_file_location("model_cards_generate", CARDS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_cards_are_up_to_date():
    module = generator()
    rendered = module.render_all()
    assert set(rendered) == {"minilm-qa-reference.md", "deformer-minilm-qa-reference.md", "readonce-bart-minilm-qa.md",
                             "deformer-minilm-l6-quoref.md", "block-attention-smollm2-135m-quoref.md",
                             "longdoc-bart-minilm-xsum.md", "recurrent-smollm2-135m-austen.md",
                             "readtwice-minilm-quoref.md"}
    for name, text in rendered.items():
        assert (CARDS / name).read_text() == text, f"{name} differs from its metrics: run python model_cards/generate.py"
    assert sorted(set(rendered) | set(module.HAND_WRITTEN)) == sorted(p.name for p in CARDS.glob("*.md"))


def test_every_card_parses_and_carries_the_required_metadata():
    from huggingface_hub import ModelCard

    for path in sorted(CARDS.glob("*.md")):
        data = ModelCard.load(path).data
        assert data.library_name == "transformers", path.name
        assert data.pipeline_tag in ("question-answering", "text2text-generation", "text-generation",
                                     "summarization"), path.name
        assert "hf-readonce" in data.tags and data.base_model, path.name
        if path.name != "minilm-qa-reference.md":  # the one plain-BERT checkpoint needs no remote code
            assert "custom_code" in data.tags, path.name
        for result in data.eval_results or []:
            assert result.metric_value is not None and result.metric_name, (path.name, result)
        names = [(r.dataset_type, r.metric_name) for r in data.eval_results or []]
        assert len(names) == len(set(names)), f"{path.name}: two results with one name"


def test_model_index_values_are_the_recorded_metrics():
    from huggingface_hub import ModelCard

    metrics = json.loads((REPO_ROOT / "checkpoints/minilm-qa-reference/metrics.json").read_text())
    card = ModelCard.load(CARDS / "minilm-qa-reference.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    disfl, quoref = metrics["validation"]["disfl_qa"], metrics["validation"]["quoref"]
    assert got == {("disfl_qa", "EM"): disfl["eval_exact_match"], ("disfl_qa", "F1"): disfl["eval_f1"],
                   ("disfl_qa", "HasAns F1"): disfl["eval_HasAns_f1"], ("disfl_qa", "NoAns EM"): disfl["eval_NoAns_exact"],
                   ("quoref", "EM"): quoref["eval_exact_match"], ("quoref", "F1"): quoref["eval_f1"]}
    shipped = json.loads((REPO_ROOT / "checkpoints/deformer-minilm-qa-reference/metrics.json").read_text())
    card = ModelCard.load(CARDS / "deformer-minilm-qa-reference.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got == {("disfl_qa", "EM"): shipped["cached_exact_match"], ("disfl_qa", "F1"): shipped["cached_f1"],
                   ("disfl_qa", "HasAns F1"): shipped["cached_HasAns_f1"],
                   ("disfl_qa", "NoAns EM"): shipped["cached_NoAns_exact"]}
    k8 = json.loads((REPO_ROOT / "benchmarks/results/readonce_learning_h100/qa_k8_lr1e-4.json").read_text())
    card = ModelCard.load(CARDS / "readonce-bart-minilm-qa.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got == {(d, m): k8[f"eval_{d}_{key}"] for d in ("disfl_qa", "quoref")
                   for m, key in (("EM", "exact_match"), ("F1", "f1"))}
    kd = json.loads((REPO_ROOT / "benchmarks/results/quoref_table/deformer_kd.json").read_text())
    card = ModelCard.load(CARDS / "deformer-minilm-l6-quoref.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got == {("quoref", "EM"): kd["cached_exact_match"], ("quoref", "F1"): kd["cached_f1"]}
    block = json.loads((REPO_ROOT / "benchmarks/results/block_attention_qa_h100/eval_block_stored.json").read_text())
    card = ModelCard.load(CARDS / "block-attention-smollm2-135m-quoref.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got == {("quoref", "EM"): block["eval_stored_exact_match"], ("quoref", "F1"): block["eval_stored_f1"]}
    longdoc = json.loads((REPO_ROOT / "benchmarks/results/xsum_table/neighborhood.json").read_text())
    card = ModelCard.load(CARDS / "longdoc-bart-minilm-xsum.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    xsum = "EdinburghNLP/xsum"  # the model-index names the data set as the card's `datasets` does
    assert got == {(xsum, "ROUGE-1"): longdoc["eval_rouge1"], (xsum, "ROUGE-2"): longdoc["eval_rouge2"],
                   (xsum, "ROUGE-L"): longdoc["eval_rougeL"], (xsum, "perplexity"): longdoc["eval_perplexity"]}
    assert card.data.datasets == [xsum] and "XSum test articles via GEM" in card.data.eval_results[0].dataset_name
    text = (CARDS / "longdoc-bart-minilm-xsum.md").read_text()
    lead3 = longdoc["eval_baselines"]["lead_3"]["rougeL"]
    assert f"{lead3:.2f}" in text  # lead-3 stands beside the model
    austen = REPO_ROOT / "benchmarks/results/austen_table2"
    card = ModelCard.load(CARDS / "recurrent-smollm2-135m-austen.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    for overlap in (0, 5, 30):  # one recurrent model per evaluation overlap (the paper's protocol)
        run = json.loads((austen / f"recurrent_ov{overlap}.json").read_text())
        assert [k for k in run if k.startswith("test_")] == [f"test_persuasion_overlap{overlap}"]
    # this checkpoint is the overlap-0 model: its model-index holds its own score, not the other two models'
    own = json.loads((austen / "recurrent_ov0.json").read_text())["test_persuasion_overlap0"]["token_perplexity"]
    assert got == {("austen", "token perplexity, overlap 0"): own}
    baseline = json.loads((austen / "baseline.json").read_text())
    text = (CARDS / "recurrent-smollm2-135m-austen.md").read_text()
    assert f"{baseline['test_persuasion_overlap30']['token_perplexity']:.2f}" in text  # the baseline stands beside
    readtwice = REPO_ROOT / "benchmarks/results/readtwice_table"
    entity, segment_independent = (json.loads((readtwice / f"{row}.json").read_text()) for row in ("e", "baseline"))
    card = ModelCard.load(CARDS / "readtwice-minilm-quoref.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got == {("quoref", "EM"): entity["eval_exact_match"], ("quoref", "F1"): entity["eval_f1"]}
    assert entity["model"] == "readtwice-entity" and segment_independent["model"] == "baseline"
    text = (CARDS / "readtwice-minilm-quoref.md").read_text()
    for shown in (segment_independent["eval_f1"], entity["first_span_baseline_f1"]):
        assert f"{shown:.2f}" in text  # the segment-independent and trivial baselines stand beside


def test_builder_inputs_and_errors():
    rows = qa_rows_from_metrics({"cached_exact_match": 10.0, "cached_f1": 12.5, "cached_NoAns_total": 3,
                                 "cached_HasAns_f1": 9.0, "cached_NoAns_exact": 50.0},
                                "squad_v2", "SQuAD 2.0", prefix="cached_",
                                baselines={"always_empty": {"f1": 33.3, "NoAns_exact": 100.0}})
    assert [(r.metric_name, r.value, r.baselines) for r in rows] == [
        ("EM", 10.0, {}), ("F1", 12.5, {"always-empty": 33.3}), ("HasAns F1", 9.0, {}),
        ("NoAns EM", 50.0, {"always-empty": 100.0})]
    with pytest.raises(ValueError, match="no eval_exact_match or eval_f1"):
        qa_rows_from_metrics({"f1": 3}, "x", "X")
    card = build_model_card(repo_id="a/b", model_type="deformer_bert", title="T", summary="S",
                            eval_rows=[EvalRow("quoref", "Quoref", "validation", "f1", "F1", 20.0)])
    assert "custom_code" in card.data.tags and card.data.eval_results[0].metric_value == 20.0
    with pytest.raises(ValueError, match="`model_type` must be one of"):
        build_model_card(repo_id="a/b", model_type="gpt9", title="T", summary="S")
    with pytest.raises(ValueError, match="`repo_id` must be 'owner/name'"):
        build_model_card(repo_id="ab", model_type="deformer_bert", title="T", summary="S")
    with pytest.raises(ValueError, match="`title` must be a non-empty str"):
        build_model_card(repo_id="a/b", model_type="deformer_bert", title=" ", summary="S")


def test_metrics_files_of_every_task_fill_the_card_with_their_baselines(tmp_path):
    """A summarization run's results (ROUGE, lead-1/lead-3 under `eval_baselines`) and a generative QA run's (its
    baselines under `eval_baselines`) give their rows with the baselines beside; a metrics file without the data set
    it scored is refused rather than published under a placeholder id."""
    from hf_readonce.hub.cards import card_from_metrics_file

    longdoc = tmp_path / "longdoc_results.json"
    longdoc.write_text(json.dumps({"eval_rouge1": 30.5, "eval_rouge2": 9.25, "eval_rougeL": 22.0, "eval_loss": 3.1,
                                   "eval_baselines": {"lead_1": {"rouge1": 21.35}, "lead_3": {"rouge1": 24.19,
                                                                                              "rouge2": 4.02,
                                                                                              "rougeL": 12.02}}}))
    card = card_from_metrics_file(longdoc, dataset_type="EdinburghNLP/xsum", dataset_name="XSum",
                                  repo_id="a/b", model_type="longdoc_bart", title="T", summary="S")
    values = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert values == {("EdinburghNLP/xsum", "ROUGE-1"): 30.5, ("EdinburghNLP/xsum", "ROUGE-2"): 9.25,
                      ("EdinburghNLP/xsum", "ROUGE-L"): 22.0}
    assert "| XSum, validation | ROUGE-1 | **30.50** | 21.35 | 24.19 |" in card.text and "lead-3" in card.text
    readonce = tmp_path / "readonce_results.json"
    readonce.write_text(json.dumps({"eval_exact_match": 5.0, "eval_f1": 11.0,
                                    "eval_baselines": {"first_span": {"exact_match": 0.0, "f1": 4.96}}}))
    card = card_from_metrics_file(readonce, dataset_type="squad", repo_id="a/b", model_type="readonce_bart",
                                  title="T", summary="S")
    assert "| squad, validation | F1 | **11.00** | 4.96 |" in card.text
    assert card.data.pipeline_tag == "text2text-generation"  # a QA run: the family's own tag
    summarized = tmp_path / "readonce_summarization.json"
    summarized.write_text(json.dumps({"eval_rouge1": 20.0, "eval_rouge2": 3.0, "eval_rougeL": 15.0,
                                      "eval_perplexity": 41.5,
                                      "eval_baselines": {"lead_3": {"rouge1": 19.0, "rouge2": 1.5, "rougeL": 12.0}}}))
    card = card_from_metrics_file(summarized, dataset_type="EdinburghNLP/xsum", repo_id="a/b",
                                  model_type="readonce_bart", title="T", summary="S")
    assert card.data.pipeline_tag == "summarization"  # a summarization run of a family that has that pipeline
    assert "| EdinburghNLP/xsum, validation | perplexity (gold summaries) | **41.50** |" in card.text
    with pytest.raises(ValueError, match="needs `dataset_type`"):
        card_from_metrics_file(readonce, dataset_type=None, repo_id="a/b", model_type="readonce_bart", title="T",
                               summary="S")
    (tmp_path / "loss.json").write_text(json.dumps({"eval_loss": 2.0}))
    with pytest.raises(ValueError, match="holds no numeric scores under .eval_."):
        card_from_metrics_file(tmp_path / "loss.json", dataset_type="x", repo_id="a/b", model_type="readonce_bart",
                               title="T", summary="S")


def test_metrics_file_cards_show_the_examples_scored_and_the_readonce_stages(tmp_path):
    """The number of examples a run scored stands beside the split (a `--max_eval_samples 4` run is not shown as
    the whole split), and the ReadOnce recipe's per-stage training seconds and steps fill the Training section."""
    from hf_readonce.hub.cards import card_from_metrics_file

    readonce = tmp_path / "readonce_results.json"
    readonce.write_text(json.dumps({
        "eval_rouge1": 20.0, "eval_rouge2": 3.0, "eval_rougeL": 15.0, "eval_examples": 4,
        "eval_baselines": {"lead_3": {"rouge1": 19.0, "rouge2": 1.5, "rougeL": 12.0}}, "stage1_train_seconds": 120.4,
        "stage1_train_steps": 150,
        "stage2_train_seconds": 30.0, "stage2_train_steps": 1}))
    card = card_from_metrics_file(readonce, dataset_type="EdinburghNLP/xsum", dataset_name="XSum", repo_id="a/b",
                                  model_type="readonce_bart", title="T", summary="S")
    assert "| XSum, validation (4 documents) | ROUGE-1 | **20.00** | 19.00 |" in card.text
    assert "## Training" in card.text and "- Wall time: 150 s" in card.text
    assert ("- Budget: stage 1 (document encoder and model trained jointly): 150 steps, 120 s; stage 2 (on stored "
            "representations, document encoder frozen): 1 step, 30 s") in card.text
    assert card.data.eval_results[0].dataset_split == "validation"
    longdoc = tmp_path / "longdoc_results.json"
    longdoc.write_text(json.dumps({"eval_rouge1": 30.5, "eval_examples": 1, "eval_perplexity": 9.0,
                                   "train_seconds": 12.0, "train_steps": 2,
                                   "eval_baselines": {"lead_3": {"rouge1": 19.0}}}))
    card = card_from_metrics_file(longdoc, dataset_type="EdinburghNLP/xsum", dataset_name="XSum", repo_id="a/b",
                                  model_type="longdoc_bart", title="T", summary="S")
    assert "| XSum, validation (1 document) | ROUGE-1 | **30.50** | 19.00 |" in card.text
    assert "| XSum, validation (1 document) | perplexity (gold summaries) | **9.00** |" in card.text
    assert "- Budget: 2 steps" in card.text and "- Wall time: 12 s" in card.text
    qa = tmp_path / "eval_results.json"  # run_deformer_qa.py / the demo: `eval_questions` beside `cached_` scores
    qa.write_text(json.dumps({"cached_exact_match": 5.0, "cached_f1": 11.0, "eval_questions": 1296}))
    card = card_from_metrics_file(qa, dataset_type="disfl_qa", dataset_name="Disfl-QA", repo_id="a/b",
                                  model_type="deformer_bert", title="T", summary="S",
                                  training={"budget": "given by hand"})
    assert "| Disfl-QA, validation (1,296 questions) | F1 | **11.00** |" in card.text
    assert "- Budget: given by hand" in card.text


@pytest.mark.parametrize("baselines", [None, {"lead_1": {"rouge1": 21.0, "rouge2": 2.0, "rougeL": 12.0}},
                                       {"lead_3": {"rouge1": 24.0, "rouge2": 4.0}}])
def test_a_rouge_score_without_lead_3_beside_it_is_refused(tmp_path, baselines):
    """A summarization metrics file whose ROUGE scores lack lead-3 gave a card with the bare scores (and a sentence
    saying lead-1 and lead-3 were scored beside them): refused, naming the scores without it."""
    from hf_readonce.hub.cards import card_from_metrics_file, summarization_rows_from_metrics

    scores = {"eval_rouge1": 30.5, "eval_rouge2": 9.25, "eval_rougeL": 22.0}
    metrics = tmp_path / "results.json"
    metrics.write_text(json.dumps({**scores, **({"eval_baselines": baselines} if baselines else {})}))
    alone = "eval_rouge1, eval_rouge2, eval_rougeL" if not baselines or "lead_3" not in baselines else "eval_rougeL"
    with pytest.raises(ValueError, match=f"metrics file {metrics}: no lead-3 score beside {alone}: "):
        card_from_metrics_file(metrics, dataset_type="EdinburghNLP/xsum", repo_id="a/b", model_type="longdoc_bart",
                               title="T", summary="S")
    with pytest.raises(ValueError, match="record lead-3 on the same documents under `baselines`"):
        summarization_rows_from_metrics(scores, "EdinburghNLP/xsum", "XSum", baselines=baselines)
