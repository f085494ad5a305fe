"""The readtwice_bert family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`), and
`contract_harness`, the adapter's store round trip (`tests/representations/test_contract.py`)."""

import inspect

import torch

from hf_readonce import ReadTwiceBertConfig, ReadTwiceBertForQuestionAnswering
from hf_readonce.tasks.readtwice_qa import ReadTwiceQACollator, capitalized_mentions, prepare_readtwice_qa_features
from tests.hub.family_cases import FamilyCase
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS
from tests.hub.test_pipeline_readtwice import tiny_readtwice
from tests.representations.contract import DOCUMENTS, QUESTION

READTWICE_DOCUMENT = " ".join(CONTEXTS)  # about 110 tokens: several 24-token segments


def _readtwice():
    model = tiny_readtwice(False)
    model.config.max_question_length = 12
    return model


CASES = [
    FamilyCase("readtwice_bert", _readtwice, "AutoModelForQuestionAnswering", f"""
enc = tokenizer({READTWICE_DOCUMENT!r}, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True,
                padding=True, return_tensors="pt")
q = tokenizer({QUESTIONS[0][0]!r}, return_tensors="pt")
out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, token_type_ids=torch.ones_like(enc.input_ids),
            question_input_ids=q.input_ids)
outputs = {{"start_logits": out.start_logits, "end_logits": out.end_logits}}
""", [("question-answering", [], {"question": QUESTIONS[0], "context": READTWICE_DOCUMENT, "top_k": 2})],
        "question-answering", "readtwice"),
]


def contract_harness(tokenizer):
    torch.manual_seed(0)
    model = ReadTwiceBertForQuestionAnswering(ReadTwiceBertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, segment_length=24, segment_overlap=6,
        memory_type="entity", memory_top_k=3, span_length=4, question_in_first_read=False)).eval()
    with torch.no_grad():  # zero at initialisation: make the memories' segment positions matter
        model.bert.memory_attention.relative_segment_scores.normal_()
    settings = {"mention_fn": capitalized_mentions}  # segments, overlap and memory type come from the config

    def check(adapter, read):
        examples = [{"question": QUESTION, "context": text} for text in DOCUMENTS]
        features = prepare_readtwice_qa_features(tokenizer, examples, 24, 6, question_in_first_read=False,
                                                 mention_fn=capitalized_mentions)
        assert read.first_read_hidden_state.shape[0] == sum(f.num_segments for f in features) > len(DOCUMENTS)
        batch = ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=True, with_labels=False)(features)
        itself = model(**batch)  # the model's own first read of every segment
        questions = {key: value for key, value in batch.items() if key.startswith("question_")}
        from_store = model(document_states=read, **questions)
        assert from_store.group_ids.tolist() == itself.group_ids.tolist()
        # rows are [question; segment]; the stored segments are padded to the longest one stored, so compare the
        # real tokens only
        mask = torch.cat([batch["question_attention_mask"][batch["document_ids"]], batch["attention_mask"]], dim=1)
        width = min(from_store.start_logits.shape[1], itself.start_logits.shape[1])
        real = mask[:, :width].bool()
        assert int(real.sum()) == int(mask.sum())
        for name in ("start_logits", "end_logits"):
            torch.testing.assert_close(getattr(from_store, name)[:, :width][real],
                                       getattr(itself, name)[:, :width][real], atol=1e-5, rtol=0)

    return model, settings, check


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`: the paper setup
    (every row a segment), summary-token memories."""
    return ReadTwiceBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                               intermediate_size=37, max_position_embeddings=64, num_second_read_layers=1,
                               memory_type="sts", span_length=4, segment_length=12, segment_overlap=2,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import BertModel

    return BertModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: five segments of two documents, answer positions (QA) or masked-token labels (MLM)
    where the class computes a loss."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (5, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[4, -3:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
              "document_ids": torch.tensor([0, 0, 0, 1, 1])}
    if isinstance(model, ReadTwiceBertForQuestionAnswering):
        inputs.update(start_positions=torch.tensor([-1, 3, -1, 2, -1]), end_positions=torch.tensor([-1, 5, -1, 4, -1]))
    elif "labels" in inspect.signature(model.forward).parameters:
        labels = torch.full_like(ids, -100)
        labels[:, 3] = ids[:, 3]
        inputs["labels"] = labels
    return inputs


def common_output_lengths(config, model_class):
    """Output field -> how many tensors it holds with `output_hidden_states=True`, `output_attentions=True`: BERT₁'s
    embeddings and layers, H³, BERT₂'s layers."""
    return {"hidden_states": config.num_hidden_layers + 1 + 1 + config.num_second_read_layers,
            "attentions": config.num_hidden_layers + config.num_second_read_layers}
