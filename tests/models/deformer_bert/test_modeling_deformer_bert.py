"""DeFormer-BERT: equivalence with BERT, passage cache, losses, Trainer, LoRA, checkpointing, save/load, remote code."""

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    BertConfig,
    BertForQuestionAnswering,
    Trainer,
    TrainingArguments,
)

import hf_readonce
from hf_readonce import (
    DeformerBertConfig,
    DeformerBertForQuestionAnswering,
    DeformerBertModel,
    DeformerDistillationTrainer,
    DeformerPassageOutput,
)
from tests.conftest import refuses_unread_keyword, run_without_hf_readonce

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_deformer(k=2, seed=0, **overrides):
    torch.manual_seed(seed)
    return DeformerBertForQuestionAnswering(DeformerBertConfig(num_decomposed_layers=k, **{**TINY, **overrides})).eval()


def make_pairs(q_lens, p_lens, seed=1):
    """Pair encodings [CLS] q [SEP] p [SEP] (right padded) and their question/passage parts."""
    g = torch.Generator().manual_seed(seed)
    pairs, questions, passages = [], [], []
    for q, p in zip(q_lens, p_lens):
        question = [2] + torch.randint(5, 99, (q - 2,), generator=g).tolist() + [3]
        passage = torch.randint(5, 99, (p - 1,), generator=g).tolist() + [3]
        questions.append(question)
        passages.append(passage)
        pairs.append((question, passage))
    width = max(len(a) + len(b) for a, b in pairs)
    ids = torch.zeros(len(pairs), width, dtype=torch.long)
    types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, (a, b) in enumerate(pairs):
        ids[i, : len(a) + len(b)] = torch.tensor(a + b)
        types[i, len(a) : len(a) + len(b)] = 1
        mask[i, : len(a) + len(b)] = 1

    def pad(rows):
        out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
        m = torch.zeros_like(out)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r)
            m[i, : len(r)] = 1
        return out, m

    return (ids, types, mask), pad(questions), pad(passages)


# ----------------------------------------------------------------------------------------------- config
def test_config_defaults_and_validation():
    assert DeformerBertConfig().num_decomposed_layers == 9  # 3/4 of BERT-base, the paper's k=9
    assert DeformerBertConfig(num_hidden_layers=6).num_decomposed_layers == 4
    assert DeformerBertConfig(num_hidden_layers=6, num_decomposed_layers=0).num_decomposed_layers == 0
    for bad in (-1, 7):
        with pytest.raises(ValueError, match="num_decomposed_layers"):
            DeformerBertConfig(num_hidden_layers=6, num_decomposed_layers=bad)
    with pytest.raises(ValueError, match="num_decomposed_layers"):
        DeformerBertConfig(num_hidden_layers=6, num_decomposed_layers=2.0)
    with pytest.raises(ValueError, match="passage_position_offset"):
        DeformerBertConfig(passage_position_offset=512)
    with pytest.raises(ValueError, match="distillation_temperature"):
        DeformerBertConfig(distillation_temperature=0)
    with pytest.raises(ValueError, match="kd_loss_weight"):
        DeformerBertConfig(kd_loss_weight=-1)
    assert DeformerBertConfig(max_passage_length=64, doc_stride=62).doc_stride == 62
    with pytest.raises(ValueError, match=r"`doc_stride` must be < max_passage_length - 1 = 63 .*got 100"):
        DeformerBertConfig(max_passage_length=64, doc_stride=100)
    for kwargs, name in (({"allow_no_answer": "no"}, "allow_no_answer"), ({"allow_no_answer": 1}, "allow_no_answer"),
                         ({"null_score_diff_threshold": "x"}, "null_score_diff_threshold"),
                         ({"distillation_temperature": "2"}, "distillation_temperature"),
                         ({"kd_loss_weight": None}, "kd_loss_weight"), ({"lrs_loss_weight": float("nan")}, "lrs")):
        with pytest.raises(ValueError, match=name):
            DeformerBertConfig(**kwargs)
    assert DeformerBertConfig(allow_no_answer=False, null_score_diff_threshold=-1).null_score_diff_threshold == -1


def test_from_pretrained_fields_are_validated(tmp_path):
    """`from_pretrained(bert, field=value)` (the documented way to build a DeFormer from a BERT checkpoint) builds the
    config with the given fields, so a bad value raises the config's ValueError naming it instead of being set
    unchecked (only k was checked again, by the model)."""
    BertConfig(**TINY).save_pretrained(tmp_path)
    for kwargs, name in (({"passage_position_offset": -3}, "passage_position_offset"),
                         ({"max_passage_length": 64, "doc_stride": 100}, "doc_stride"),
                         ({"allow_no_answer": "no"}, "allow_no_answer"), ({"kd_loss_weight": -1}, "kd_loss_weight")):
        with pytest.raises(ValueError, match=name):
            DeformerBertConfig.from_pretrained(tmp_path, **kwargs)
        with pytest.raises(ValueError, match=name):
            DeformerBertForQuestionAnswering.from_pretrained(tmp_path, **kwargs)
    config = DeformerBertConfig.from_pretrained(tmp_path, num_decomposed_layers=1, max_passage_length=32, doc_stride=8)
    assert (config.num_decomposed_layers, config.max_passage_length, config.doc_stride) == (1, 32, 8)
    # BERT fields given beside (num_hidden_layers=6 with k=5) are checked together, not against the saved 4 layers
    config = DeformerBertConfig.from_pretrained(tmp_path, num_hidden_layers=6, num_decomposed_layers=5)
    assert (config.num_hidden_layers, config.num_decomposed_layers) == (6, 5)
    assert DeformerBertConfig.from_pretrained(tmp_path, num_hidden_layers=8).num_decomposed_layers == 6  # 3n/4
    with pytest.raises(ValueError, match="passage_position_offset"):
        DeformerBertConfig.from_pretrained(tmp_path, max_position_embeddings=8, passage_position_offset=10)

def test_auto_classes_registered():
    config = AutoConfig.for_model("deformer_bert", **TINY, num_decomposed_layers=1)
    assert isinstance(config, DeformerBertConfig)
    assert isinstance(AutoModelForQuestionAnswering.from_config(config), DeformerBertForQuestionAnswering)


# ----------------------------------------------------------------------------------------------- equivalence
def test_k0_equals_bert_for_question_answering():
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(BertConfig(**TINY)).eval()
    deformer = tiny_deformer(k=0)
    deformer.load_state_dict(bert.state_dict())
    (ids, types, mask), _, _ = make_pairs([5, 7, 4], [9, 6, 11])
    expected = bert(ids, attention_mask=mask, token_type_ids=types)
    got = deformer(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(got.start_logits, expected.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.end_logits, expected.end_logits, atol=1e-5, rtol=0)


def test_k0_takes_bert_positional_order_position_ids_and_inputs_embeds():
    """A drop-in for `BertForQuestionAnswering`: its arguments in its positional order (`position_ids` 4th,
    `inputs_embeds` 5th, then `start_positions`, `end_positions`), and both honoured at k = 0. Before, the 4th
    positional argument was read as `start_positions`, and `position_ids=` / `inputs_embeds=` by keyword were
    swallowed by `**kwargs` (the logits did not change) or refused."""
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(BertConfig(**TINY)).eval()
    deformer = tiny_deformer(k=0)
    deformer.load_state_dict(bert.state_dict())
    (ids, types, mask), _, _ = make_pairs([5, 7, 4], [9, 6, 11])
    positions = torch.arange(ids.shape[1]).flip(0).unsqueeze(0)  # not the default numbering
    starts, ends = torch.tensor([1, 2, 3]), torch.tensor([2, 4, 3])
    expected = bert(ids, mask, types, positions, None, starts, ends)
    got = deformer(ids, mask, types, positions, None, starts, ends)
    plain = deformer(ids, mask, types)
    assert not torch.allclose(got.start_logits, plain.start_logits, atol=1e-4)  # the positions are used
    for name in ("loss", "start_logits", "end_logits"):
        torch.testing.assert_close(getattr(got, name), getattr(expected, name), atol=1e-5, rtol=0)
    embeds = bert.bert.embeddings.word_embeddings(ids)
    expected = bert(None, mask, types, None, embeds)
    got = deformer(None, mask, types, None, embeds)
    torch.testing.assert_close(got.start_logits, expected.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.start_logits, plain.start_logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [1, 2])
def test_decomposed_inputs_embeds_equal_input_ids_and_position_ids_refused(k):
    """With k > 0 `inputs_embeds` replaces the lookup of `input_ids` (pair and cached paths); `position_ids` is
    refused, since the decomposition numbers question and passage itself (§3)."""
    model = tiny_deformer(k=k)
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 8], [12, 7])
    words = model.bert.embeddings.word_embeddings
    torch.testing.assert_close(model(inputs_embeds=words(ids), attention_mask=mask, token_type_ids=types).start_logits,
                               model(ids, mask, types).start_logits, atol=1e-6, rtol=0)
    cache = model.encode_passages(p_ids, attention_mask=p_mask)
    torch.testing.assert_close(
        model(inputs_embeds=words(q_ids), attention_mask=q_mask, passage_states=cache).start_logits,
        model(q_ids, q_mask, passage_states=cache).start_logits, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="position_ids.*num_decomposed_layers=0"):
        model(ids, mask, types, torch.arange(ids.shape[1]).unsqueeze(0))
    with pytest.raises(ValueError, match="position_ids"):
        model(q_ids, q_mask, position_ids=torch.arange(q_ids.shape[1]).unsqueeze(0), passage_states=cache)


def test_input_ids_and_inputs_embeds_bad_combinations():
    model, plain = tiny_deformer(k=2), tiny_deformer(k=0)
    (ids, types, mask), _, _ = make_pairs([5], [7])
    embeds = model.bert.embeddings.word_embeddings(ids)
    with pytest.raises(ValueError, match="exactly one"):
        model(attention_mask=mask, token_type_ids=types)
    with pytest.raises(ValueError, match="exactly one"):
        model(ids, mask, types, inputs_embeds=embeds)
    with pytest.raises(ValueError, match="inputs_embeds.*hidden_size=32"):
        model(inputs_embeds=embeds[..., :8], attention_mask=mask, token_type_ids=types)
    with pytest.raises(ValueError, match="attention_mask.*inputs_embeds"):
        model(inputs_embeds=embeds, attention_mask=mask[:, :-1], token_type_ids=types)
    with pytest.raises(ValueError, match="position_ids.*sequence_length"):
        plain(ids, mask, types, torch.arange(ids.shape[1] - 1).unsqueeze(0))


def test_k_positive_differs_from_bert():
    """Guard against a decomposition that silently does nothing."""
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(BertConfig(**TINY)).eval()
    deformer = tiny_deformer(k=2)
    deformer.load_state_dict(bert.state_dict())
    (ids, types, mask), _, _ = make_pairs([5, 7], [9, 6])
    assert not torch.allclose(deformer(ids, mask, types).start_logits, bert(ids, mask, types).start_logits, atol=1e-4)


def test_from_pretrained_bert_checkpoint_keeps_weights(tmp_path):
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(BertConfig(**TINY))
    bert.save_pretrained(tmp_path)
    deformer = DeformerBertForQuestionAnswering.from_pretrained(tmp_path, num_decomposed_layers=3)
    assert deformer.config.num_decomposed_layers == 3
    theirs, ours = bert.state_dict(), deformer.state_dict()
    assert set(theirs) == set(ours)  # the decomposition adds no parameters
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, atol=0, rtol=0)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_cached_equals_uncached(k):
    model = tiny_deformer(k=k)
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 8, 3], [12, 7, 10])
    full = model(ids, attention_mask=mask, token_type_ids=types)
    cache = model.encode_passages(p_ids, attention_mask=p_mask)
    assert isinstance(cache, DeformerPassageOutput)
    assert cache.last_hidden_state.shape == (3, 12, 32)
    cached = model(input_ids=q_ids, attention_mask=q_mask, passage_states=cache)
    q_width = q_ids.shape[1]
    for i in range(3):
        q, p = int(q_mask[i].sum()), int(p_mask[i].sum())
        for name in ("start_logits", "end_logits"):
            a, b = getattr(full, name)[i], getattr(cached, name)[i]
            torch.testing.assert_close(b[:q], a[:q], atol=1e-5, rtol=0)
            torch.testing.assert_close(b[q_width : q_width + p], a[q : q + p], atol=1e-5, rtol=0)


def test_passage_states_do_not_depend_on_question():
    model = tiny_deformer(k=2)
    passage = torch.randint(5, 99, (1, 10))
    states = []
    for q_len in (3, 9):
        question = torch.cat([torch.tensor([[2]]), torch.randint(5, 99, (1, q_len)), torch.tensor([[3]])], 1)
        ids = torch.cat([question, passage], 1)
        types = torch.cat([torch.zeros_like(question), torch.ones_like(passage)], 1)
        out = model.bert(ids, token_type_ids=types, output_hidden_states=True)
        states.append(out.hidden_states[2][:, question.shape[1] :])  # after layer k=2
    torch.testing.assert_close(states[0], states[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(model.encode_passages(passage).last_hidden_state, states[0], atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------- bad input
def test_passage_state_mismatches_are_errors():
    model = tiny_deformer(k=2)
    _, (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    cache = model.encode_passages(p_ids, attention_mask=p_mask)
    with pytest.raises(ValueError, match="num_decomposed_layers=1"):
        model(q_ids, q_mask, passage_states=DeformerPassageOutput(
            last_hidden_state=cache.last_hidden_state, attention_mask=p_mask, num_decomposed_layers=1))
    with pytest.raises(ValueError, match="another model"):
        tiny_deformer(k=2, seed=7)(q_ids, q_mask, passage_states=cache)
    with pytest.raises(ValueError, match="hidden size"):
        model(q_ids, q_mask, passage_states=DeformerPassageOutput(last_hidden_state=torch.zeros(2, 8, 16)))
    with pytest.raises(TypeError, match="DeformerPassageOutput"):
        model(q_ids, q_mask, passage_states=cache.last_hidden_state)
    with pytest.raises(ValueError, match="2 passages for 1 questions"):
        model(q_ids[:1], q_mask[:1], passage_states=cache)


def test_other_bad_inputs():
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5], [7])
    with pytest.raises(ValueError, match="token_type_ids"):
        model(ids, attention_mask=mask)
    with pytest.raises(ValueError, match="no question token"):
        model(ids, attention_mask=mask, token_type_ids=torch.ones_like(ids))
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=mask[:, :-1], token_type_ids=types)
    with pytest.raises(ValueError, match="empty"):
        model.encode_passages(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.encode_passages(torch.randint(5, 99, (1, 65)))
    with pytest.raises(ValueError, match="num_decomposed_layers > 0"):
        tiny_deformer(k=0).encode_passages(torch.randint(5, 99, (1, 5)))


def test_compiled_forward_is_one_graph_that_still_checks_its_inputs():
    """`torch.compile(fullgraph=True)` of a pair forward: one graph (a Python branch on a tensor value, e.g. the
    no-question check, would split it and fail here), eager's logits, and the input checks still run (as graph ops:
    a `RuntimeError` with the eager `ValueError`'s message)."""
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        eager, got = (m(ids, token_type_ids=types, attention_mask=mask) for m in (model, compiled))
        torch.testing.assert_close(got.start_logits, eager.start_logits, atol=1e-6, rtol=0)
        torch.testing.assert_close(got.end_logits, eager.end_logits, atol=1e-6, rtol=0)
        no_question = types.clone()
        no_question[1] = 1
        with pytest.raises(RuntimeError, match="no question token"):
            compiled(ids, token_type_ids=no_question, attention_mask=mask)


def test_inputs_that_are_no_tensors_or_no_integer_ids_are_named():
    """Lists, numpy arrays, float or bool ids failed deep inside torch (an `AttributeError` or the embedding's
    "Expected tensor ... Long"), and `encode_passages` took `token_type_ids` of another shape: each is named."""
    import numpy as np

    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5], [7])
    passage = torch.randint(5, 99, (2, 6))
    for call, words in ((lambda: model(ids.numpy(), mask, types), "`input_ids` must be a torch.Tensor, got ndarray"),
                        (lambda: model(ids.tolist(), mask, types), "`input_ids` must be a torch.Tensor, got list"),
                        (lambda: model(ids, mask.numpy(), types), "`attention_mask` must be a torch.Tensor"),
                        (lambda: model(ids, mask, types.float()), "`token_type_ids` must hold integer token ids"),
                        (lambda: model.encode_passages(passage.float()), "`input_ids` must hold integer token ids"),
                        (lambda: model.encode_passages(passage.bool()), "`input_ids` must hold integer token ids"),
                        (lambda: model.encode_passages(passage, attention_mask=np.ones((2, 6))),
                         "`attention_mask` must be a torch.Tensor")):
        with pytest.raises(TypeError, match=words):
            call()
    with pytest.raises(ValueError, match=r"`token_type_ids` shape \(2, 12\) != `input_ids` shape \(2, 6\)"):
        model.encode_passages(passage, token_type_ids=torch.ones(2, 12, dtype=torch.long))


def test_span_labels_that_cannot_be_read_are_named():
    """Answer-span labels are read as `BertForQuestionAnswering` reads them, `(batch,)` or `(batch, 1)` integer
    indices; one without the other (no loss, silently, before) or another shape or dtype is a `ValueError`."""
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    starts, ends = torch.tensor([6, 7]), torch.tensor([8, 9])
    assert model(ids, mask, types, start_positions=starts[:, None], end_positions=ends[:, None]).loss is not None
    for kwargs, words in (({"start_positions": starts}, "`start_positions` was given without its pair"),
                          ({"end_positions": ends}, "`end_positions` was given without its pair"),
                          ({"start_positions": starts.float(), "end_positions": ends}, "integer tensor"),
                          ({"start_positions": torch.stack([starts, starts], 1), "end_positions": ends},
                           r"`start_positions` must have shape \(2,\)"),
                          ({"start_positions": starts, "end_positions": ends[:1]}, r"got \(1,\)")):
        with pytest.raises(ValueError, match=words):
            model(ids, mask, types, **kwargs)


# ----------------------------------------------------------------------------------------------- losses
def test_auxiliary_losses():
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    starts, ends = torch.tensor([6, 7]), torch.tensor([8, 9])
    plain = model(ids, mask, types, start_positions=starts, end_positions=ends, output_hidden_states=True)
    same = model(ids, mask, types, start_positions=starts, end_positions=ends, teacher_start_logits=plain.start_logits,
                 teacher_end_logits=plain.end_logits, teacher_hidden_states=plain.hidden_states)
    torch.testing.assert_close(same.loss, plain.loss, atol=1e-5, rtol=0)  # KD and LRS vanish on itself
    teacher = tiny_deformer(k=0, seed=3)
    t = teacher(ids, mask, types, output_hidden_states=True)
    kd_only = model(ids, mask, types, start_positions=starts, end_positions=ends,
                    teacher_start_logits=t.start_logits, teacher_end_logits=t.end_logits)
    both = model(ids, mask, types, start_positions=starts, end_positions=ends, teacher_start_logits=t.start_logits,
                 teacher_end_logits=t.end_logits, teacher_hidden_states=t.hidden_states)
    assert kd_only.loss > plain.loss and both.loss > kd_only.loss
    expected_kd = (model.distillation_loss(plain.start_logits, t.start_logits, mask.bool())
                   + model.distillation_loss(plain.end_logits, t.end_logits, mask.bool())) / 2
    torch.testing.assert_close(kd_only.loss - plain.loss, expected_kd, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="teacher logits shape"):
        model(ids, mask, types, start_positions=starts, end_positions=ends,
              teacher_start_logits=t.start_logits[:, :-1], teacher_end_logits=t.end_logits)
    for alone in ({"teacher_start_logits": t.start_logits}, {"teacher_end_logits": t.end_logits}):
        with pytest.raises(ValueError, match=f"`{next(iter(alone))}` was given without its pair"):  # L_kd dropped
            model(ids, mask, types, start_positions=starts, end_positions=ends, **alone)


def test_losses_follow_the_authors_code():
    """L_kd = T^2 KL(teacher || student) (the authors' `kl_div_loss`: sum teacher * (log teacher - log student)) and
    L_lrs = mean over the upper layers k+1..n of the per-element squared error over each example's real tokens,
    averaged over the examples (their `mean_squared_error` per upper-encoder output, over fixed-length rows that weigh
    the same, divided by the number of upper layers)."""
    model = tiny_deformer(k=1)  # 4 layers: upper layers 2..4
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    student = model(ids, mask, types, output_hidden_states=True)
    t = tiny_deformer(k=0, seed=3)(ids, mask, types, output_hidden_states=True)
    real = mask.bool()
    temperature = model.config.distillation_temperature
    expected = 0.0
    for b in range(ids.shape[0]):
        p_t = torch.softmax(t.start_logits[b][real[b]] / temperature, -1)
        p_s = torch.softmax(student.start_logits[b][real[b]] / temperature, -1)
        expected += (p_t * (p_t.log() - p_s.log())).sum()
    expected = expected / ids.shape[0] * temperature**2
    torch.testing.assert_close(model.distillation_loss(student.start_logits, t.start_logits, real), expected,
                               atol=1e-5, rtol=1e-5)
    n = model.config.num_hidden_layers
    per_layer = [torch.stack([((student.hidden_states[i][b] - t.hidden_states[i][b])[real[b]] ** 2).mean()
                              for b in range(ids.shape[0])]).mean() for i in range(2, n + 1)]
    lrs = model.layerwise_similarity_loss(student.hidden_states, t.hidden_states, real)
    torch.testing.assert_close(lrs, torch.stack(per_layer).mean(), atol=1e-6, rtol=1e-5)
    # the output of the last decomposed layer (index k) is not compared, and k = n leaves nothing to align
    n_layers = model.config.num_hidden_layers
    assert tiny_deformer(k=n_layers).layerwise_similarity_loss(student.hidden_states, t.hidden_states, real) == 0


def test_distillation_loss_of_a_batch_is_the_mean_of_its_halves():
    """Rows of different lengths: the loss (span + L_kd + L_lrs) of a batch is the mean of its halves' losses, as
    `DistributedDataParallel` (each process a half, gradients averaged) and `Trainer`'s gradient accumulation (each
    micro-batch's loss divided by their number) read it (an L_lrs over all the batch's tokens at once would weigh the
    half with more tokens more)."""
    model = tiny_deformer(k=1).train()
    teacher = tiny_deformer(k=0, seed=3)
    (ids, types, mask), _, _ = make_pairs([5, 6, 4, 7], [3, 4, 12, 13])
    starts, ends = torch.tensor([3, 4, 5, 6]), torch.tensor([4, 5, 6, 7])

    def loss(rows):
        with torch.no_grad():
            t = teacher(ids[rows], mask[rows], types[rows], output_hidden_states=True)
        return model(ids[rows], mask[rows], types[rows], start_positions=starts[rows], end_positions=ends[rows],
                     teacher_start_logits=t.start_logits, teacher_end_logits=t.end_logits,
                     teacher_hidden_states=t.hidden_states).loss

    whole, halves = loss(slice(0, 4)), (loss(slice(0, 2)) + loss(slice(2, 4))) / 2
    torch.testing.assert_close(whole, halves, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layerwise_loss_of_half_precision_states_counts_in_float32(dtype):
    """An example whose real tokens x hidden units exceed float16's largest number (65,504) keeps its L_lrs in a
    half-precision model (a count of inf divided its squared error to 0), and bfloat16 states give float32's figure
    to their own rounding; the loss keeps the states' dtype."""
    model = tiny_deformer(k=1)
    n, hidden = model.config.num_hidden_layers, model.config.hidden_size
    length = 65_504 // hidden + 16  # rows of one example are over 65,504 elements
    g = torch.Generator().manual_seed(0)
    student = tuple(torch.randn(2, length, hidden, generator=g) for _ in range(n + 1))
    teacher = tuple(s + 0.1 * torch.randn(s.shape, generator=g) for s in student)
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, length // 2:] = False
    expected = model.layerwise_similarity_loss(student, teacher, mask)
    got = model.layerwise_similarity_loss(tuple(s.to(dtype) for s in student), tuple(t.to(dtype) for t in teacher),
                                          mask)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), expected, rtol=1e-2, atol=0)


def test_distillation_trainer_step(tmp_path):
    student = tiny_deformer(k=2).train()
    teacher = tiny_deformer(k=0, seed=5)
    (ids, types, mask), _, _ = make_pairs([5, 6, 4, 7], [7, 8, 9, 6])
    rows = [{"input_ids": ids[i], "token_type_ids": types[i], "attention_mask": mask[i],
             "start_positions": torch.tensor(6), "end_positions": torch.tensor(7)} for i in range(4)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to="none",
                             use_cpu=True, save_strategy="no", learning_rate=1e-2,
                             remove_unused_columns=False)
    before = {n: p.detach().clone() for n, p in student.named_parameters()}
    trainer = DeformerDistillationTrainer(model=student, args=args, train_dataset=rows, teacher_model=teacher)
    assert trainer.label_names == ["start_positions", "end_positions"]
    seen = {}
    original = student.forward

    def spy(*a, **kw):
        seen.update({key: kw.get(key) is not None for key in ("teacher_start_logits", "teacher_hidden_states")})
        return original(*a, **kw)

    student.forward = spy
    result = trainer.train()
    assert seen == {"teacher_start_logits": True, "teacher_hidden_states": True}
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert any(not torch.equal(before[n], p) for n, p in student.named_parameters())
    assert all(not p.requires_grad for p in teacher.parameters())
    with pytest.raises(TypeError, match="teacher_model"):
        DeformerDistillationTrainer(model=student, args=args, train_dataset=rows)
    # a checkpoint path, as the example script's --teacher_model_name_or_path takes (it raised "'str' object has no
    # attribute 'to'")
    with pytest.raises(TypeError, match="`teacher_model` must be a model .* got str: load a checkpoint path first"):
        DeformerDistillationTrainer(model=student, args=args, train_dataset=rows, teacher_model="path/to/teacher")
    plain = Trainer(model=student, args=args)
    assert plain.label_names == ["start_positions", "end_positions"]
    assert plain.model_accepts_loss_kwargs is False  # batch-mean loss: Trainer scales for gradient accumulation


@pytest.mark.parametrize("bf16", [False, True])
def test_distillation_teacher_reads_in_the_training_precision(tmp_path, bf16):
    student = tiny_deformer(k=2).train()
    teacher = tiny_deformer(k=0, seed=5)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    rows = [{"input_ids": ids[i], "token_type_ids": types[i], "attention_mask": mask[i],
             "start_positions": torch.tensor(6), "end_positions": torch.tensor(7)} for i in range(2)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, report_to="none",
                             use_cpu=True, save_strategy="no", remove_unused_columns=False, bf16=bf16)
    trainer = DeformerDistillationTrainer(model=student, args=args, train_dataset=rows, teacher_model=teacher)
    seen = []
    original = teacher.forward
    teacher.forward = lambda *a, **kw: seen.append(torch.is_autocast_enabled("cpu")) or original(*a, **kw)
    trainer.train()
    assert seen == [bf16]  # under --bf16 the teacher runs in autocast like the student, else in fp32


def test_gradient_checkpointing_same_gradients():
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    grads = []
    for checkpointing in (False, True):
        model = tiny_deformer(k=2).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.bert.encoder.layer)
        out = model(ids, mask, types, start_positions=torch.tensor([6, 7]), end_positions=torch.tensor([8, 9]))
        out.loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_lora_query_value():
    from peft import LoraConfig, get_peft_model

    model = tiny_deformer(k=2)
    peft_model = get_peft_model(model, LoraConfig(target_modules=["query", "value"], r=4, lora_alpha=8))
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    out = peft_model(input_ids=ids, attention_mask=mask, token_type_ids=types,
                     start_positions=torch.tensor([6, 7]), end_positions=torch.tensor([8, 9]))
    out.loss.backward()
    assert all(p.grad is not None for n, p in peft_model.named_parameters() if p.requires_grad)
    cache = peft_model.base_model.model.encode_passages(p_ids, attention_mask=p_mask)
    assert peft_model(input_ids=q_ids, attention_mask=q_mask, passage_states=cache).start_logits.shape[1] == 14


@pytest.mark.parametrize("k", [0, 2])
def test_peft_question_answering_wrapper_is_refused_where_it_drops_token_type_ids(k):
    """peft's `PeftModelForQuestionAnswering` (`task_type="QUESTION_ANS"`) takes `token_type_ids` and `position_ids`
    as its own parameters and hands neither on: at k = 0 (plain BERT) a pair was read as segment 0 only, other logits
    without a word; at k > 0 the model asked for the `token_type_ids` the caller had given. Both are refused, naming
    the wrapper and the way round it; the cached path (a question alone, segment 0) is not."""
    from peft import LoraConfig, get_peft_model

    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    pair = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    base = tiny_deformer(k=k)
    expected = base(**pair).start_logits
    if k == 0:  # what dropping them did
        assert not torch.allclose(base(input_ids=ids, attention_mask=mask).start_logits, expected)
    config = LoraConfig(task_type="QUESTION_ANS", target_modules=["query", "value"], r=4)
    peft_model = get_peft_model(tiny_deformer(k=k), config).eval()
    received = []
    peft_model.get_base_model().register_forward_pre_hook(
        lambda module, args, kwargs: received.append(sorted(kwargs)), with_kwargs=True)
    with pytest.raises(ValueError, match=r'task_type="QUESTION_ANS".*modules_to_save=\["qa_outputs"\]'):
        peft_model(**pair)
    assert "input_ids" in received[0] and "token_type_ids" not in received[0]  # what peft hands on
    torch.testing.assert_close(peft_model.get_base_model()(**pair).start_logits, expected)  # called with them
    with pytest.raises(ValueError, match=r"Calling the wrapped model itself .*pass its `token_type_ids`"):
        peft_model.get_base_model()(input_ids=ids, attention_mask=mask)  # it cannot tell who calls it
    if k:
        states = peft_model.encode_passages(p_ids, attention_mask=p_mask)
        torch.testing.assert_close(
            peft_model(input_ids=q_ids, attention_mask=q_mask, passage_states=states).start_logits,
            base(input_ids=q_ids, attention_mask=q_mask,
                 passage_states=base.encode_passages(p_ids, attention_mask=p_mask)).start_logits)


def test_peft_adapters_that_keep_the_model_forward_are_not_refused():
    """Only peft's question-answering wrapper drops `token_type_ids`: a plain-BERT DeFormer called without them (one
    segment) under a `PeftModel` without a task type, or with a `QUESTION_ANS`-typed LoRA injected the way
    transformers' `model.add_adapter` does (`_hf_peft_config_loaded`, then peft's `inject_adapter_in_model`; the
    model's own `forward` is called), answers as the model does."""
    from peft import LoraConfig, get_peft_model, inject_adapter_in_model

    (ids, _, mask), _, _ = make_pairs([5, 6], [7, 8])
    with torch.no_grad():
        expected = tiny_deformer(k=0)(input_ids=ids, attention_mask=mask).start_logits
        untyped = get_peft_model(tiny_deformer(k=0), LoraConfig(target_modules=["query", "value"], r=4)).eval()
        torch.testing.assert_close(untyped(input_ids=ids, attention_mask=mask).start_logits, expected)
        model = tiny_deformer(k=0)
        model._hf_peft_config_loaded = True  # what `add_adapter` sets before injecting (it needs peft >= 0.22)
        inject_adapter_in_model(LoraConfig(task_type="QUESTION_ANS", target_modules=["query", "value"], r=4), model)
        assert model.peft_config["default"].task_type == "QUESTION_ANS"
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).start_logits, expected)


def test_lora_without_task_type_round_trip_and_cached_passages(tmp_path):
    """The way round the QA wrapper (docs/models/deformer_bert.md): a `PeftModel` without a task type and the QA head
    in `modules_to_save` hands `token_type_ids` on; trained one `Trainer` step, saved, reloaded, merged and loaded
    with `trust_remote_code=True`, the logits stay the trained ones. Passage states encoded through the wrapper answer
    as its pairs do, and states of the same weights with the adapter disabled are refused (the fingerprint holds the
    adapters' state, not only their weights)."""
    from peft import LoraConfig

    from tests.models.peft_checks import lora_round_trip

    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    pair = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    rows = [{**{key: value[i] for key, value in pair.items()}, "start_positions": torch.tensor(6 + i),
             "end_positions": torch.tensor(8 + i)} for i in range(2)]
    config = LoraConfig(target_modules=["query", "value"], modules_to_save=["qa_outputs"], r=4, lora_alpha=8)
    peft_model, _ = lora_round_trip(lambda: tiny_deformer(k=2), config, pair, rows, AutoModelForQuestionAnswering,
                                    tmp_path, output="start_logits")
    with torch.no_grad():
        full = peft_model(**pair).start_logits
        states = peft_model.encode_passages(p_ids, attention_mask=p_mask)
        cached = peft_model(input_ids=q_ids, attention_mask=q_mask, passage_states=states).start_logits
        for i in range(2):
            q, p = int(q_mask[i].sum()), int(p_mask[i].sum())
            torch.testing.assert_close(cached[i, :q], full[i, :q], atol=1e-5, rtol=0)
            torch.testing.assert_close(cached[i, q_ids.shape[1]:q_ids.shape[1] + p], full[i, q:q + p], atol=1e-5, rtol=0)
        with peft_model.disable_adapter():
            without = peft_model.encode_passages(p_ids, attention_mask=p_mask)
        assert not torch.allclose(without.last_hidden_state, states.last_hidden_state)
        with pytest.raises(ValueError, match="re-encode the passages"):
            peft_model(input_ids=q_ids, attention_mask=q_mask, passage_states=without)


def test_fingerprint_tells_apart_adapter_states_of_the_same_weights():
    """Every adapter's weights stay in the model, so what tells their passage states apart is the adapters' state
    (`_peft_adapter_state`): switching between two adapters already there (`set_adapter`), a LoRA scale
    (`set_scale`) and disabling an adapter that is only a `modules_to_save` copy of the embeddings each give another
    fingerprint, and the states encoded before are refused; going back gives the first fingerprint again."""
    from peft import LoraConfig, get_peft_model

    _, _, (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    q_ids, q_mask = torch.tensor([[2, 7, 3], [2, 9, 3]]), torch.ones(2, 3, dtype=torch.long)

    def refused(model, states):
        with pytest.raises(ValueError, match="re-encode the passages"):
            model(input_ids=q_ids, attention_mask=q_mask, passage_states=states)

    lora = dict(target_modules=["query", "value"], r=4, lora_alpha=8, init_lora_weights=False)
    model = get_peft_model(tiny_deformer(k=2), LoraConfig(**lora)).eval()
    model.add_adapter("other", LoraConfig(**lora))
    with torch.no_grad():
        first, states = model.representation_fingerprint(), model.encode_passages(p_ids, attention_mask=p_mask)
        model.set_adapter("other")
        assert model.representation_fingerprint() != first
        other = model.encode_passages(p_ids, attention_mask=p_mask)
        assert not torch.allclose(other.last_hidden_state, states.last_hidden_state)
        refused(model, states)
        model.set_adapter("default")
        assert model.representation_fingerprint() == first
        refused(model, other)

        layers = [module for module in model.modules() if hasattr(module, "set_scale") and hasattr(module, "scaling")]
        assert layers
        for layer in layers:
            layer.set_scale("default", 0.5)
        assert model.representation_fingerprint() != first
        refused(model, states)
        for layer in layers:
            layer.set_scale("default", 1.0)
        assert model.representation_fingerprint() == first

    # the LoRA layer is above the cached layers: only the embeddings' copy is on the passages' path
    saved = get_peft_model(tiny_deformer(k=2), LoraConfig(target_modules=["qa_outputs"], modules_to_save=["embeddings"],
                                                          r=4)).eval()
    with torch.no_grad():
        saved.get_base_model().bert.embeddings.modules_to_save["default"].word_embeddings.weight.add_(0.5)
        adapted = saved.encode_passages(p_ids, attention_mask=p_mask)
        with saved.disable_adapter():
            plain = saved.encode_passages(p_ids, attention_mask=p_mask)
            assert plain.model_fingerprint != adapted.model_fingerprint
            refused(saved, adapted)
        assert not torch.allclose(plain.last_hidden_state, adapted.last_hidden_state)
        refused(saved, plain)


# ----------------------------------------------------------------------------------------------- save / load
def test_save_load_round_trip(tmp_path):
    model = tiny_deformer(k=2)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["config.json", "configuration_deformer_bert.py", "model.safetensors",
                     "modeling_deformer_bert.py"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "deformer_bert" and config["num_decomposed_layers"] == 2
    assert config["auto_map"]["AutoModelForQuestionAnswering"].endswith("DeformerBertForQuestionAnswering")
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, DeformerBertForQuestionAnswering)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    torch.testing.assert_close(loaded(ids, mask, types).start_logits, model(ids, mask, types).start_logits,
                               atol=0, rtol=0)


def test_remote_code_without_hf_readonce(tmp_path):
    model = tiny_deformer(k=2)
    model.save_pretrained(tmp_path / "ckpt")
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 6], [7, 8])
    torch.save({"ids": ids, "types": types, "mask": mask, "q": q_ids, "qm": q_mask, "p": p_ids, "pm": p_mask,
                "expected": model(ids, mask, types).start_logits}, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import torch
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from transformers import AutoModelForQuestionAnswering
        model = AutoModelForQuestionAnswering.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        assert type(model).__name__ == "DeformerBertForQuestionAnswering", type(model)
        assert "hf_readonce" not in type(model).__module__, type(model).__module__
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        got = model(d["ids"], d["mask"], d["types"]).start_logits
        torch.testing.assert_close(got, d["expected"], atol=1e-6, rtol=0)
        cache = model.encode_passages(d["p"], attention_mask=d["pm"])
        cached = model(input_ids=d["q"], attention_mask=d["qm"], passage_states=cache)
        print("OK", cached.start_logits.shape)
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_package_version_and_exports():
    assert hf_readonce.__version__
    for name in hf_readonce.__all__:
        assert getattr(hf_readonce, name) is not None
    assert Path(hf_readonce.__file__).parent.name == "hf_readonce"


def test_return_dict_false_gives_bert_qa_tuple():
    """`@can_return_tuple`, as `BertForQuestionAnswering`: (loss,) start, end, without the `None`s."""
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5, 6], [7, 8])
    out = model(ids, mask, types, return_dict=False)
    assert len(out) == 2 and torch.equal(out[0], model(ids, mask, types).start_logits)
    positions = torch.tensor([1, 2])
    loss, start, end = model(ids, mask, types, start_positions=positions, end_positions=positions, return_dict=False)
    assert loss.dim() == 0 and start.shape == end.shape == ids.shape


def test_float_ids_an_empty_batch_and_a_pair_with_passage_states_are_refused_by_name():
    model = tiny_deformer(k=2)
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 8], [12, 7])
    with pytest.raises(TypeError, match="`input_ids` must hold integer token ids"):
        model(ids.float(), attention_mask=mask, token_type_ids=types)
    with pytest.raises(ValueError, match="is empty"):
        model(torch.zeros(0, 5, dtype=torch.long))
    cache = model.encode_passages(p_ids, attention_mask=p_mask)
    with pytest.raises(ValueError, match="would read the passage twice"):  # the pair itself, beside its stored passage
        model(ids, attention_mask=mask, token_type_ids=types, passage_states=cache)
    out = model(q_ids, attention_mask=q_mask, token_type_ids=torch.zeros_like(q_ids), passage_states=cache)
    assert out.start_logits.shape[0] == 2


def test_a_misspelled_keyword_argument_is_a_type_error_naming_it():
    """`**kwargs` took any name: `passage_state=` (for `passage_states=`) ran the pair without the cached passage."""
    model = tiny_deformer(k=2)
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 8], [12, 7])
    cache = model.encode_passages(p_ids, attention_mask=p_mask)
    q_types = torch.zeros_like(q_ids)
    for call, message in [
            (lambda: model(q_ids, q_mask, q_types, passage_state=cache),
             "DeformerBertForQuestionAnswering.forward() got an unexpected keyword argument 'passage_state'. "
             "Did you mean 'passage_states'?"),
            (lambda: model.bert(q_ids, token_type_ids=q_types, attention_masks=q_mask, passage_states=cache),
             "DeformerBertModel.forward() got an unexpected keyword argument 'attention_masks'. "
             "Did you mean 'attention_mask'?"),
            (lambda: model(ids, mask, types, xyzzy=1),
             "DeformerBertForQuestionAnswering.forward() got an unexpected keyword argument 'xyzzy'")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    # what transformers passes (`TransformersKwargs`, `return_dict`), and a `None`, which changes nothing
    expected = model(q_ids, q_mask, q_types, passage_states=cache).start_logits
    out = model(q_ids, q_mask, q_types, passage_states=cache, return_dict=True, output_attentions=False,
                use_cache=False, passage_state=None)
    torch.testing.assert_close(out.start_logits, expected)


# keywords `TransformersKwargs` (or transformers' plumbing) lets through that neither model reads: each changed nothing
UNREAD = {"cu_seq_lens_q": torch.tensor([0, 6, 13], dtype=torch.int32),
          "cu_seq_lens_k": torch.tensor([0, 6, 13], dtype=torch.int32), "max_length_q": 7, "max_length_k": 7,
          "seq_idx": torch.zeros(1, 13, dtype=torch.int32), "is_causal": True, "output_router_logits": True,
          "logits_to_keep": 1, "num_items_in_batch": torch.tensor(2), "debug_io": True, "debug_io_dir": "debug",
          "prune_layers": 1}


@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_keyword_it_does_not_read_is_refused_naming_it(name, k):
    """The keywords of `TransformersKwargs` that reach no layer that reads them were accepted and ran as without
    them: flash attention's packing arguments (a flattened batch read as one sequence, each packed sequence attending
    to the others), `is_causal=True` (causal only in the layers SDPA gave no mask), `num_items_in_batch` (the loss is
    a batch mean), `logits_to_keep`, `output_router_logits`, transformers' I/O debugger options."""
    model = tiny_deformer(k=k)
    (ids, types, mask), _, _ = make_pairs([6], [7])
    for call in (lambda: model(ids, mask, types, **{name: UNREAD[name]}),
                 lambda: model.bert(ids, mask, types, **{name: UNREAD[name]})):
        with refuses_unread_keyword(name, f"got `{name}`, which it does not support"):
            call()
    # the values that ask for what the model does anyway pass: a bidirectional read, every position's logits
    expected = model(ids, mask, types).start_logits
    torch.testing.assert_close(model(ids, mask, types, is_causal=False, logits_to_keep=0, output_router_logits=False,
                                     debug_io=False).start_logits, expected)


def test_the_accepted_keywords_follow_the_installed_transformers_kwargs(monkeypatch):
    """`TransformersKwargs` is read at run time, bases included: a key a later transformers adds is accepted."""
    from typing import TypedDict

    from transformers.utils import TransformersKwargs

    from hf_readonce.models.deformer_bert import modeling_deformer_bert as modeling

    accepted = modeling._accepted_keywords(DeformerBertForQuestionAnswering, "forward")
    assert set(TransformersKwargs.__optional_keys__) <= accepted
    assert {"passage_states", "return_dict", "num_items_in_batch", "use_cache"} <= accepted

    class Base(TypedDict, total=False):
        a_base_key: int

    class Later(Base, total=False):
        a_later_key: int

    modeling._accepted_keywords.cache_clear()
    monkeypatch.setattr(modeling, "TransformersKwargs", Later)
    try:
        assert {"a_base_key", "a_later_key"} <= modeling._accepted_keywords(DeformerBertForQuestionAnswering, "forward")
        model = tiny_deformer(k=2)
        (ids, types, mask), _, _ = make_pairs([5], [7])
        model(ids, mask, types, a_later_key=1)  # accepted
        with pytest.raises(TypeError) as error:  # not suggested: `TransformersKwargs` is transformers' plumbing
            model(ids, mask, types, a_later_keys=1)
        assert str(error.value).endswith("unexpected keyword argument 'a_later_keys'")
    finally:
        modeling._accepted_keywords.cache_clear()


def test_the_hint_for_an_unexpected_keyword_names_an_argument_a_user_writes():
    """The hint was drawn from every accepted name, `TransformersKwargs`' internals included: `max_length=` (a
    `generate()` option) was answered "Did you mean 'max_length_q'?", flash attention's varlen length, and a
    tokenizer's `length` (`return_length=True`) the same; `idx=` got `seq_idx`."""
    model = tiny_deformer(k=2)
    (ids, types, mask), _, _ = make_pairs([5], [7])
    prefix = "DeformerBertForQuestionAnswering.forward() got an unexpected keyword argument"
    for name, hint in [("max_length", ""), ("length", ""), ("seq_len", ""), ("idx", ""),
                       ("passage_state", ". Did you mean 'passage_states'?"),
                       ("return_dic", ". Did you mean 'return_dict'?"),
                       ("output_attention", ". Did you mean 'output_attentions'?"),
                       ("teacher_start_logit", ". Did you mean 'teacher_start_logits'?")]:
        with pytest.raises(TypeError) as error:
            model(ids, mask, types, **{name: 1})
        assert str(error.value) == f"{prefix} '{name}'{hint}"


def eager(model):
    model.set_attn_implementation("eager")
    return model


def test_output_attentions_at_k0_are_bert_s():
    """`output_attentions=True` returned no weights (a warning and `attentions=None`); with k = 0 they are
    `BertForQuestionAnswering`'s, layer by layer, and nothing else of the output changes."""
    torch.manual_seed(0)
    bert = eager(BertForQuestionAnswering(BertConfig(**TINY)).eval())
    deformer = eager(tiny_deformer(k=0))
    deformer.load_state_dict(bert.state_dict())
    (ids, types, mask), _, _ = make_pairs([5, 7, 4], [9, 6, 11])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
        got = deformer(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
        plain = deformer(ids, attention_mask=mask, token_type_ids=types)
    assert plain.attentions is None
    assert len(got.attentions) == len(expected.attentions) == TINY["num_hidden_layers"]
    for ours, theirs in zip(got.attentions, expected.attentions):
        assert ours.shape == (3, TINY["num_attention_heads"], ids.shape[1], ids.shape[1])
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert torch.equal(got.start_logits, plain.start_logits) and torch.equal(got.end_logits, plain.end_logits)


def test_decomposed_layers_attend_within_each_segment_as_bert_reads_it_alone():
    """Lower layers 1..k (§3, eq. 5): one full-sequence matrix, block diagonal; its question block is BERT's
    attention over the question alone, its passage block BERT's over the passage alone (token type 1, positions
    from `passage_position_offset`). Upper layers attend jointly (rows sum to 1 over the whole pair)."""
    from transformers import BertModel

    k = 2
    deformer = eager(tiny_deformer(k=k))
    bert = eager(BertModel(BertConfig(**TINY), add_pooling_layer=False).eval())
    bert.load_state_dict(deformer.bert.state_dict())
    (ids, types, mask), (q_ids, _), (p_ids, _) = make_pairs([5, 5], [7, 7])
    offset = deformer.config.passage_position_offset
    with torch.no_grad():
        attentions = deformer(ids, mask, types, output_attentions=True).attentions
        alone_q = bert(q_ids, output_attentions=True).attentions
        alone_p = bert(p_ids, token_type_ids=torch.ones_like(p_ids), output_attentions=True,
                       position_ids=torch.arange(7)[None] + offset).attentions
    assert len(attentions) == TINY["num_hidden_layers"]
    question = slice(0, 5)
    passage = slice(5, 12)
    for layer in range(k):
        weights = attentions[layer]
        assert weights.shape == (2, TINY["num_attention_heads"], 12, 12)
        assert torch.all(weights[..., question, passage] == 0) and torch.all(weights[..., passage, question] == 0)
        torch.testing.assert_close(weights[..., question, question], alone_q[layer], atol=1e-6, rtol=0)
        torch.testing.assert_close(weights[..., passage, passage], alone_p[layer], atol=1e-6, rtol=0)
    for weights in attentions[k:]:
        assert torch.all(weights[..., question, passage] > 0) and torch.all(weights[..., passage, question] > 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, TINY["num_attention_heads"], 12))


def test_attentions_with_passage_states_are_the_joint_layers():
    """With cached passages, the n - k joint layers, equal to the pair encoding's (same layout here: no padding);
    `return_dict=False` keeps them in the tuple; the logits do not depend on the switch."""
    k = 3
    model = eager(tiny_deformer(k=k))
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 5], [7, 7])
    with torch.no_grad():
        full = model(ids, mask, types, output_attentions=True).attentions
        cache = model.encode_passages(p_ids, attention_mask=p_mask)
        cached = model(q_ids, q_mask, passage_states=cache, output_attentions=True)
        plain = model(q_ids, q_mask, passage_states=cache)
        as_tuple = model(q_ids, q_mask, passage_states=cache, output_attentions=True, return_dict=False)
    assert len(cached.attentions) == TINY["num_hidden_layers"] - k
    for ours, pair in zip(cached.attentions, full[k:]):
        torch.testing.assert_close(ours, pair, atol=1e-5, rtol=0)
    assert torch.equal(cached.start_logits, plain.start_logits)
    assert len(as_tuple) == 3 and all(torch.equal(a, b) for a, b in zip(as_tuple[2], cached.attentions))


def test_attentions_follow_the_config_and_sdpa_warns_as_for_bert(monkeypatch):
    model = eager(tiny_deformer(k=2))
    (ids, types, mask), _, _ = make_pairs([5], [7])
    model.config.output_attentions = True
    with torch.no_grad():
        assert len(model(ids, mask, types).attentions) == TINY["num_hidden_layers"]
        assert model(ids, mask, types, output_attentions=False).attentions is None
    model.config.output_attentions = False
    model.set_attn_implementation("sdpa")  # no weights: transformers' warning, an empty tuple, as BertModel's
    from transformers.integrations import sdpa_attention

    said = []
    monkeypatch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
    with torch.no_grad():
        assert model(ids, mask, types, output_attentions=True).attentions == ()
    assert said and "output_attentions" in said[0]


def test_encode_passages_returns_the_lower_layers_attentions_of_bert_on_the_passage_alone():
    """`encode_passages` took no `output_attentions` (a TypeError) and ignored `config.output_attentions` (no field):
    now the k decomposed layers' weights, each BertModel's on the passage read alone (token type 1, positions from
    `passage_position_offset`, padding included) and the passage block of the pair encoding's lower layers; the
    states and the fingerprint do not depend on the switch, and such an output still serves `passage_states`."""
    from transformers import BertModel

    k = 2
    model = eager(tiny_deformer(k=k))
    bert = eager(BertModel(BertConfig(**TINY), add_pooling_layer=False).eval())
    bert.load_state_dict(model.bert.state_dict())
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 5], [7, 4])
    offset = model.config.passage_position_offset
    with torch.no_grad():
        plain = model.encode_passages(p_ids, attention_mask=p_mask)
        cached = model.encode_passages(p_ids, attention_mask=p_mask, output_attentions=True)
        alone = bert(p_ids, attention_mask=p_mask, token_type_ids=torch.ones_like(p_ids), output_attentions=True,
                     position_ids=torch.arange(p_ids.shape[1])[None] + offset).attentions
        pair = model(ids, mask, types, output_attentions=True).attentions
        with_states = model(q_ids, q_mask, passage_states=cached)
        without = model(q_ids, q_mask, passage_states=plain)
    assert plain.attentions is None
    assert len(cached.attentions) == k
    for layer, weights in enumerate(cached.attentions):
        assert weights.shape == (2, TINY["num_attention_heads"], 7, 7)
        torch.testing.assert_close(weights, alone[layer], atol=1e-6, rtol=0)
        # row 0 has no padding, so its pair encoding's passage block is this matrix (positions 5..11)
        torch.testing.assert_close(weights[0], pair[layer][0, :, 5:12, 5:12], atol=1e-6, rtol=0)
        assert torch.all(weights[1, :, :4, 4:] == 0)  # padding keys of the shorter passage
    assert torch.equal(cached.last_hidden_state, plain.last_hidden_state)
    assert cached.model_fingerprint == plain.model_fingerprint
    assert torch.equal(with_states.start_logits, without.start_logits)


@pytest.mark.parametrize("k", [0, 2])
def test_forward_output_switches_are_bools_or_none_for_the_config(k):
    """The model's and the QA head's `forward` read `output_attentions` / `output_hidden_states` with `bool()`: a
    string `"False"` returned the weights, a list of hidden-state indices all the states (transformers 5.24 would
    keep only those selected), without a word; and the QA head read `output_hidden_states=None` as False, so
    `config.output_hidden_states=True` returned none (`BertForQuestionAnswering` returns them). Now a non-bool is a
    TypeError naming the argument, and `None` is the config's, as in the encode paths."""
    model = eager(tiny_deformer(k=k))
    (ids, types, mask), _, _ = make_pairs([4, 5], [6, 3])
    with torch.no_grad():
        plain = model(ids, attention_mask=mask, token_type_ids=types)
        model.config.output_hidden_states = model.config.output_attentions = True
        for run in (model, model.bert):
            from_config = run(ids, attention_mask=mask, token_type_ids=types)
            assert len(from_config.hidden_states) == 5 and len(from_config.attentions) == 4
            asked_none = run(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=None,
                             output_attentions=None)
            assert len(asked_none.hidden_states) == 5 and len(asked_none.attentions) == 4
            off = run(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=False,
                      output_attentions=False)
            assert off.hidden_states is None and off.attentions is None
        assert torch.equal(from_config.last_hidden_state, model.bert(ids, attention_mask=mask,
                                                                     token_type_ids=types).last_hidden_state)
    assert torch.equal(off.last_hidden_state, from_config.last_hidden_state)
    model.config.output_hidden_states = model.config.output_attentions = False
    for name, value in [("output_attentions", "False"), ("output_attentions", torch.tensor(True)),
                        ("output_hidden_states", "False"), ("output_hidden_states", [-1]),
                        ("output_hidden_states", 1)]:
        for run in (model, model.bert):
            with pytest.raises(TypeError, match=f"`{name}` must be a bool"):
                run(ids, attention_mask=mask, token_type_ids=types, **{name: value})
    assert plain.hidden_states is None


def test_encode_passages_attentions_follow_the_config_and_sdpa_warns_as_for_bert(monkeypatch):
    model = eager(tiny_deformer(k=3))
    _, _, (p_ids, p_mask) = make_pairs([5], [7])
    model.config.output_attentions = True
    with torch.no_grad():
        assert len(model.encode_passages(p_ids, p_mask).attentions) == 3
        assert len(model.bert.encode_passages(p_ids, p_mask).attentions) == 3
        assert model.encode_passages(p_ids, p_mask, output_attentions=False).attentions is None
    model.config.output_attentions = False
    with pytest.raises(TypeError, match="`output_attentions` must be a bool"):
        model.encode_passages(p_ids, p_mask, output_attentions="False")
    model.set_attn_implementation("sdpa")  # no weights: transformers' warning, an empty tuple, as BertModel's
    from transformers.integrations import sdpa_attention

    said = []
    monkeypatch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
    with torch.no_grad():
        assert model.encode_passages(p_ids, p_mask, output_attentions=True).attentions == ()
    assert said and "output_attentions" in said[0]


def test_encode_passages_returns_the_lower_layers_hidden_states_of_bert_on_the_passage_alone():
    """`encode_passages` took no `output_hidden_states` (a TypeError) and ignored `config.output_hidden_states` (no
    field): now the passage's embeddings and the k decomposed layers' outputs, the first k + 1 `hidden_states` of
    BertModel on the passage read alone (token type 1, positions from `passage_position_offset`) and the passage
    block of the pair encoding's lower layers, in a new last field; the states and the fingerprint do not depend on
    the switch, and such an output still serves `passage_states`."""
    from transformers import BertModel

    k = 2
    model = tiny_deformer(k=k)
    bert = BertModel(BertConfig(**TINY), add_pooling_layer=False).eval()
    bert.load_state_dict(model.bert.state_dict())
    (ids, types, mask), (q_ids, q_mask), (p_ids, p_mask) = make_pairs([5, 5], [7, 4])
    offset = model.config.passage_position_offset
    with torch.no_grad():
        plain = model.encode_passages(p_ids, attention_mask=p_mask)
        cached = model.encode_passages(p_ids, attention_mask=p_mask, output_hidden_states=True)
        alone = bert(p_ids, attention_mask=p_mask, token_type_ids=torch.ones_like(p_ids), output_hidden_states=True,
                     position_ids=torch.arange(p_ids.shape[1])[None] + offset).hidden_states
        pair = model(ids, mask, types, output_hidden_states=True).hidden_states
        with_states = model(q_ids, q_mask, passage_states=cached)
        without = model(q_ids, q_mask, passage_states=plain)
    assert plain.hidden_states is None
    assert len(cached.hidden_states) == k + 1
    for layer, states in enumerate(cached.hidden_states):
        assert states.shape == (2, 7, TINY["hidden_size"])
        real = p_mask.bool()
        torch.testing.assert_close(states[real], alone[layer][real], atol=1e-5, rtol=0)
        # row 0 has no padding, so its pair encoding's passage block is this one (positions 5..11)
        torch.testing.assert_close(states[0], pair[layer][0, 5:12], atol=1e-5, rtol=0)
    assert torch.equal(cached.hidden_states[-1], cached.last_hidden_state)
    # a new last field: the fields before it, and so every tuple position, are those of the output without it
    assert list(cached.keys()) == [*plain.keys(), "hidden_states"]
    assert torch.equal(cached.last_hidden_state, plain.last_hidden_state)
    assert cached.model_fingerprint == plain.model_fingerprint
    assert torch.equal(with_states.start_logits, without.start_logits)


def test_encode_passages_hidden_states_follow_the_config_and_come_with_the_attentions():
    model = tiny_deformer(k=3)
    _, _, (p_ids, p_mask) = make_pairs([5], [7])
    with torch.no_grad():
        plain = model.encode_passages(p_ids, p_mask)
        model.config.output_hidden_states = True
        for encode in (model.encode_passages, model.bert.encode_passages):
            out = encode(p_ids, p_mask)
            assert len(out.hidden_states) == 4 and out.attentions is None
            assert torch.equal(out.last_hidden_state, plain.last_hidden_state)
            assert encode(p_ids, p_mask, output_hidden_states=False).hidden_states is None
        model.set_attn_implementation("eager")
        both = model.encode_passages(p_ids, p_mask, output_attentions=True)  # SDPA gives the states too (above)
    assert len(both.attentions) == 3 and len(both.hidden_states) == 4
    assert list(both.keys())[-2:] == ["attentions", "hidden_states"]
    model.config.output_hidden_states = False
    for value in (1, "False", [-1]):
        with pytest.raises(TypeError, match="`output_hidden_states` must be a bool"):
            model.encode_passages(p_ids, p_mask, output_hidden_states=value)


def test_hidden_states_with_passage_states_are_the_joint_layers_input_and_outputs():
    """With `passage_states`, `hidden_states` holds n - k + 1 tensors over question + passage: the joint layers'
    input (the question's layer-k states, then the stored passage's) and the outputs of layers k+1..n."""
    model = tiny_deformer(k=2)
    n = model.config.num_hidden_layers
    question, passage = torch.randint(5, 90, (2, 5)), torch.randint(5, 90, (2, 7))
    stored = model.encode_passages(passage, attention_mask=torch.ones_like(passage))
    out = model.bert(input_ids=question, attention_mask=torch.ones_like(question), passage_states=stored,
                     output_hidden_states=True)
    assert len(out.hidden_states) == n - 2 + 1
    assert all(h.shape == (2, 12, model.config.hidden_size) for h in out.hidden_states)
    torch.testing.assert_close(out.hidden_states[0][:, 5:], stored.last_hidden_state)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


def test_flash_attention_is_refused_as_its_mask_drops_the_segments():
    # transformers' flash attention mask keeps the padding only: the decomposed lower layers' segment mask would be
    # dropped and the question would attend to the passage there, so the model refuses flash attention
    from transformers.masking_utils import create_bidirectional_mask

    from hf_readonce.models.deformer_bert.modeling_deformer_bert import _segment_mask_function

    config = DeformerBertConfig(num_decomposed_layers=2, **TINY)
    segments = torch.tensor([[0, 0, 0, 1, 1, 1]])
    mask_arguments = dict(inputs_embeds=torch.zeros(1, 6, TINY["hidden_size"]),
                          attention_mask=torch.ones(1, 6, dtype=torch.long),
                          and_mask_function=_segment_mask_function(segments))
    config._attn_implementation = "sdpa"
    assert not create_bidirectional_mask(config=config, **mask_arguments)[0, 0, 0, 3]  # a question token, a passage key
    config._attn_implementation = "flash_attention_2"
    assert create_bidirectional_mask(config=config, **mask_arguments) is None  # nothing but padding, here none
    for model_class in (DeformerBertModel, DeformerBertForQuestionAnswering):
        with pytest.raises(ValueError, match="Flash Attention"):
            model_class._from_config(DeformerBertConfig(num_decomposed_layers=2, **TINY),
                                     attn_implementation="flash_attention_2")
