"""The deformer_bert family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`), and
`contract_harness`, the adapter's store round trip (`tests/representations/test_contract.py`)."""

import torch

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.tasks.question_answering import pad_batch, pair_inputs
from tests.conftest import tiny_model
from tests.hub.family_cases import FamilyCase
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS
from tests.representations.contract import DOCUMENTS, QUESTION

DEFORMER_SETTINGS = {"max_question_length": 16, "max_passage_length": 24, "doc_stride": 8}


def _deformer():
    model = tiny_model()
    for name, value in DEFORMER_SETTINGS.items():
        setattr(model.config, name, value)
    return model


CASES = [
    FamilyCase("deformer_bert", _deformer, "AutoModelForQuestionAnswering", f"""
enc = tokenizer({QUESTIONS[0][0]!r}, {CONTEXTS[0]!r}, return_tensors="pt")
out = model(**enc)
outputs = {{"start_logits": out.start_logits, "end_logits": out.end_logits}}
""", [("question-answering", [], {"question": QUESTIONS[0], "context": CONTEXTS[0], "top_k": 2})],
        "question-answering", "deformer"),
]


def contract_harness(tokenizer):
    torch.manual_seed(0)
    model = DeformerBertForQuestionAnswering(DeformerBertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=128, num_decomposed_layers=2)).eval()
    settings = {"max_passage_length": 32, "doc_stride": 8}  # the long document spans several windows

    def check(adapter, read):
        windows = [w for doc in adapter.windows(DOCUMENTS) for w in doc]
        question = tokenizer(QUESTION)["input_ids"]
        assert read.last_hidden_state.shape[0] == len(windows) > len(DOCUMENTS)
        questions = torch.tensor([question] * len(windows))
        cached = model(input_ids=questions, attention_mask=torch.ones_like(questions), passage_states=read)
        pairs = [pair_inputs(question, window) for window in windows]
        inputs = {key: pad_batch([p[key] for p in pairs], 0) for key in ("input_ids", "token_type_ids",
                                                                          "attention_mask")}
        full = model(**inputs)
        for row, window in enumerate(windows):  # same positions: question, then the window's tokens
            n = len(question) + len(window.input_ids)
            for name in ("start_logits", "end_logits"):
                torch.testing.assert_close(getattr(cached, name)[row, :n], getattr(full, name)[row, :n],
                                           atol=1e-5, rtol=0)

    return model, settings, check


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`."""
    return DeformerBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=37, max_position_embeddings=64, num_decomposed_layers=2,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import BertModel

    return BertModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: `[CLS] question [SEP] passage [SEP]` pairs (token types 0 then 1, one padded),
    answer spans where the class computes a loss."""
    ids = torch.randint(5, model.config.vocab_size, (2, 14), generator=torch.Generator().manual_seed(seed))
    types = torch.tensor([[0] * 5 + [1] * 9] * 2)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    inputs = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    if isinstance(model, DeformerBertForQuestionAnswering):
        inputs.update(start_positions=torch.tensor([6, 8]), end_positions=torch.tensor([7, 10]))
    return inputs


def common_output_lengths(config, model_class):
    """Output field -> how many tensors it holds with `output_hidden_states=True`, `output_attentions=True`."""
    return {"hidden_states": config.num_hidden_layers + 1, "attentions": config.num_hidden_layers}
