"""The DeFormer `question-answering` pipeline with a `RepresentationStore` (`store=`): it reads the entries
`hf-readonce encode` writes without running the passage encoder, writes entries `hf-readonce answer` reads, gives
the answers of the store-less pipeline, refuses a store made for another model before computing or writing anything,
and never rewrites what is stored."""

import copy
import json
import types

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.models.deformer_bert import pipeline_deformer_bert
from hf_readonce.models.deformer_bert.pipeline_deformer_bert import (
    DeformerQuestionAnsweringPipeline,
)
from hf_readonce.models.deformer_bert.pipeline_deformer_bert import (
    content_hash as pipeline_content_hash,
)
from hf_readonce.models.deformer_bert.pipeline_deformer_bert import (
    tokenizer_fingerprint as pipeline_tokenizer_fingerprint,
)
from hf_readonce.representations import DeformerBertAdapter, base, fill_store
from hf_readonce.representations.base import tokenizer_fingerprint
from hf_readonce.store import ReadOnlyStoreError, RepresentationStore, content_hash
from tests.conftest import tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS, WINDOWS

WINDOW_OPTIONS = ["--max-passage-length", str(WINDOWS["max_passage_len"]), "--doc-stride", str(WINDOWS["doc_stride"])]


def store_files(path):
    """Every file of a store except its lock and temporary folder, with its bytes (to prove nothing changed)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != ".lock" and "tmp" not in p.relative_to(path).parts}


@pytest.fixture
def qa(tokenizer):
    return DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer,
                                             max_question_len=WINDOWS["max_question_len"])


@pytest.fixture
def encoder_calls(qa, monkeypatch):
    """Rows passed to `qa.model.encode_passages`, one entry per call."""
    calls, original = [], qa.model.encode_passages

    def counting(input_ids, **kwargs):
        calls.append(input_ids.shape[0])
        return original(input_ids, **kwargs)

    monkeypatch.setattr(qa.model, "encode_passages", counting)
    return calls


def storeless(qa, **kwargs):
    return [qa(question=questions, context=context, **WINDOWS, **kwargs) for context, questions in
            zip(CONTEXTS, QUESTIONS)]


def flat(results):
    """The answer dicts of nested pipeline results, in order."""
    return [results] if isinstance(results, dict) else [a for r in results for a in flat(r)]


def assert_same_answers(got, expected):
    got, expected = flat(got), flat(expected)
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected):
        assert (a["answer"], a["start"], a["end"]) == (b["answer"], b["start"], b["end"])
        assert a["score"] == pytest.approx(b["score"], rel=1e-4, abs=1e-7)


def test_keys_are_the_adapters(qa, tokenizer):
    """The pipeline's own copies of the key logic (it may not import hf_readonce) agree with hf-readonce's."""
    adapter = DeformerBertAdapter(qa.model, tokenizer, max_passage_length=24, doc_stride=8)
    assert qa.store_settings(24, 8) == (adapter.fingerprint(), adapter.settings())
    assert pipeline_tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(tokenizer)
    for text in CONTEXTS + ["caf\u00e9 \ud800 surrogate"]:
        assert pipeline_content_hash(text) == content_hash(text)


def test_reads_a_store_filled_by_cli_encode_without_encoding(qa, encoder_calls, checkpoint, tmp_path):
    documents = tmp_path / "docs.jsonl"
    documents.write_text("".join(json.dumps({"id": f"d{i}", "context": c}) + "\n" for i, c in enumerate(CONTEXTS)))
    assert cli_main(["encode", str(checkpoint), "--store", str(tmp_path / "store"), "--documents", str(documents),
                     "--dtype", "fp32", "--device", "cpu", "--no-progress", *WINDOW_OPTIONS]) == 0
    store = RepresentationStore(tmp_path / "store", readonly=True)
    before = store_files(store.path)
    expected = storeless(qa, top_k=3)
    encoder_calls.clear()
    # no window settings given: the store's only space for this model supplies them (24 / 8)
    got = [qa(question=questions, context=context, store=store, top_k=3)
           for context, questions in zip(CONTEXTS, QUESTIONS)]
    assert encoder_calls == []  # every passage state came from the store
    assert_same_answers(got, expected)
    assert store_files(store.path) == before
    # the same with the store given to the constructor (HF convention: call arguments may be pipeline defaults)
    pipe = DeformerQuestionAnsweringPipeline(model=qa.model, tokenizer=qa.tokenizer, store=store, top_k=3,
                                             max_question_len=WINDOWS["max_question_len"])
    assert pipe(question=QUESTIONS[1], context=CONTEXTS[1]) == got[1] and encoder_calls == []
    # a context the store lacks is computed; a read-only store is not written
    extra = "Mansfield Park was published in 1814 by Thomas Egerton."
    assert qa(question="Who published it?", context=extra, store=store)["answer"]
    assert sum(encoder_calls) == 1 and store_files(store.path) == before


def test_writes_what_cli_answer_reads(qa, encoder_calls, checkpoint, tokenizer, tmp_path):
    store = RepresentationStore(tmp_path / "store")
    expected = storeless(qa)
    windows = [len(qa.preprocess({"context": c, "questions": ["q"]}, **WINDOWS)["window_ids"]) for c in CONTEXTS]
    encoder_calls.clear()
    got = [qa(question=questions, context=context, store=store, **WINDOWS)
           for context, questions in zip(CONTEXTS, QUESTIONS)]
    assert sum(encoder_calls) == sum(windows)  # computed once, as without a store
    assert_same_answers(got, expected)
    assert len(store) == len(CONTEXTS)
    # the entries are those of hf-readonce's adapter: same space, same tensors
    adapter = DeformerBertAdapter(qa.model, tokenizer, max_passage_length=24, doc_stride=8)
    for context, reference in zip(CONTEXTS, adapter.encode(CONTEXTS)):
        stored = store.get(adapter.fingerprint(), adapter.settings(), content_hash(context))
        assert sorted(stored) == sorted(reference)
        for name in ("input_ids", "offsets", "window_lengths"):
            assert torch.equal(stored[name], reference[name]), name
        assert stored["hidden_states"].dtype == torch.float32
        torch.testing.assert_close(stored["hidden_states"], reference["hidden_states"], rtol=1e-4, atol=1e-5)
    # a second call reads them back
    encoder_calls.clear()
    again = [qa(question=questions, context=context, store=store) for context, questions in zip(CONTEXTS, QUESTIONS)]
    assert encoder_calls == [] and again == got
    # `hf-readonce answer` reads the pipeline's entries (read-only: it would fail on a missing passage)
    questions = tmp_path / "questions.jsonl"
    rows = [{"id": f"{p}-{i}", "question": q, "context": c}
            for p, (c, qs) in enumerate(zip(CONTEXTS, QUESTIONS)) for i, q in enumerate(qs)]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = store_files(store.path)
    assert cli_main(["answer", str(checkpoint), "--store", str(store.path), "--questions", str(questions),
                     "--output", str(tmp_path / "preds.jsonl"), "--max-question-length", "16",
                     "--max-answer-length", "15", "--device", "cpu", "--no-progress"]) == 0
    predictions = [json.loads(line)["prediction_text"] for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert predictions == [answer["answer"] for answer in flat(got)]
    assert store_files(store.path) == before


def test_store_of_another_model_is_refused(qa, encoder_calls, tokenizer, tmp_path):
    store = RepresentationStore(tmp_path / "store")
    other = DeformerBertAdapter(tiny_model(seed=1), tokenizer, max_passage_length=24, doc_stride=8)
    fill_store(other, store, CONTEXTS)
    before = store_files(store.path)
    encoder_calls.clear()
    with pytest.raises(ValueError, match=r"only for other model\(s\) \(fingerprint " + other.fingerprint()[:16]):
        qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store)
    with pytest.raises(ValueError, match="not for this model"):  # explicit windows change nothing
        qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store, **WINDOWS)
    assert encoder_calls == [] and store_files(store.path) == before


def test_store_arguments_and_writes(qa, encoder_calls, tokenizer, tmp_path):
    with pytest.raises(TypeError, match="`store` must be a hf_readonce RepresentationStore"):
        qa(question="Who?", context=CONTEXTS[0], store=str(tmp_path))
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(ValueError, match="`store_dtype` must be one of"):
        qa(question="Who?", context=CONTEXTS[0], store=store, store_dtype="int8")
    with pytest.raises(TypeError, match="`update_store` must be a bool"):
        qa(question="Who?", context=CONTEXTS[0], store=store, update_store="yes")
    qa(question="Who?", context=CONTEXTS[1], store=store, update_store=False, **WINDOWS)
    assert len(store) == 0  # computed for the call only
    qa(question="Who?", context=CONTEXTS[1], store=store, store_dtype="float16", **WINDOWS)
    entry = next(store.entries())
    assert entry.tensors["hidden_states"]["dtype"] == "float16"
    before = store_files(store.path)
    # an existing entry is never rewritten, whatever the call's dtype
    qa(question="Who?", context=CONTEXTS[1], store=store, store_dtype="float32", **WINDOWS)
    assert store_files(store.path) == before
    # several window settings for this model and none given: which one is ambiguous
    qa(question="Who?", context=CONTEXTS[1], store=store, max_passage_len=20, doc_stride=4)
    with pytest.raises(ValueError, match="several window settings .* pass `max_passage_len` and `doc_stride`"):
        qa(question="Who?", context=CONTEXTS[1], store=store)
    # asked to write into a read-only store: refused before the passage encoder runs
    readonly = RepresentationStore(tmp_path / "store", readonly=True)
    encoder_calls.clear()
    with pytest.raises(ReadOnlyStoreError):
        qa(question="Who?", context=CONTEXTS[0], store=readonly, update_store=True, **WINDOWS)
    assert encoder_calls == []


def fresh_tokenizer():
    """A tokenizer no other test has called (the module-scoped one carries the truncation/padding state its last
    call left)."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def count_full_parses(module, monkeypatch) -> list:
    """Lengths of the tokenizer serializations `module` parses whole from now on (a parse of the small object
    before `"added_tokens"` is not counted)."""
    parsed = []

    def loads(text):
        if '"added_tokens"' in text:
            parsed.append(len(text))
        return json.loads(text)

    monkeypatch.setattr(module, "json", types.SimpleNamespace(loads=loads, dumps=json.dumps))
    return parsed


def test_repeated_store_calls_reuse_the_fingerprints(tokenizer, tmp_path, monkeypatch):
    """A second call with the same weights and tokenizer neither rehashes the weights (the model's fingerprint
    cache is kept) nor parses the tokenizer's JSON again, also when the truncation state the tokenizer carries
    changed in between; an edit through `.data` (no version counter bumped) or another tokenizer still changes the
    key, so the old entries are never served."""
    fresh = fresh_tokenizer()
    qa = DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=fresh,
                                           max_question_len=WINDOWS["max_question_len"])
    store = RepresentationStore(tmp_path / "store")
    qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store, **WINDOWS)
    cache = qa.model.bert._fingerprint_cache
    parsed = count_full_parses(pipeline_deformer_bert, monkeypatch)
    qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store, **WINDOWS)
    fresh("x", truncation=True, max_length=96)  # another truncation state left on the backend
    qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store, **WINDOWS)
    assert qa.model.bert._fingerprint_cache is cache  # the weights were not hashed again
    assert parsed == []  # nor the tokenizer's JSON parsed again
    fingerprint = qa.model.representation_fingerprint()
    qa.model.bert.embeddings.word_embeddings.weight.data.add_(1e-3)  # bumps no version counter
    with pytest.raises(ValueError, match=r"only for other model\(s\) \(fingerprint " + fingerprint[:16]):
        qa(question=QUESTIONS[0], context=CONTEXTS[0], store=store, **WINDOWS)
    assert qa.model.representation_fingerprint() != fingerprint
    other = copy.deepcopy(fresh)
    other.add_tokens(["zqxjk"])
    assert pipeline_deformer_bert.tokenizer_fingerprint(other) != pipeline_deformer_bert.tokenizer_fingerprint(
        fresh) == tokenizer_fingerprint(fresh) == tokenizer_fingerprint(tokenizer)
    assert pipeline_deformer_bert.tokenizer_fingerprint(other) == tokenizer_fingerprint(other)


@pytest.mark.parametrize("module", [pipeline_deformer_bert, base], ids=["pipeline", "hf_readonce"])
def test_tokenizer_fingerprint_ignores_truncation_and_padding(module, monkeypatch):
    """Calls that only change the truncation or padding state the tokenizer carries hit the fingerprint cache (no
    parse of the vocabulary-sized JSON, no new entry) and keep the fingerprint; an added token, or another
    normalizer, is parsed and gives another fingerprint; the cache holds no serialization-sized key."""
    from tokenizers import normalizers

    fresh = fresh_tokenizer()
    monkeypatch.setattr(module, "_TOKENIZER_FINGERPRINTS", {})  # nothing cached by other tests
    fingerprint = module.tokenizer_fingerprint(fresh)
    parsed = count_full_parses(module, monkeypatch)
    for options in ({"truncation": True, "max_length": 64}, {"truncation": True, "max_length": 96},
                    {"padding": "max_length", "max_length": 32}, {"truncation": "only_first", "max_length": 80}):
        fresh("some text", **options)
        assert module.tokenizer_fingerprint(fresh) == fingerprint
    assert parsed == []
    assert len(module._TOKENIZER_FINGERPRINTS) == 1
    assert all(len(str(key)) < 1000 for key in module._TOKENIZER_FINGERPRINTS)
    added = copy.deepcopy(fresh)
    added.add_tokens(["zqxjk"])
    assert module.tokenizer_fingerprint(added) != fingerprint
    assert len(parsed) == 1
    normalized = copy.deepcopy(fresh)
    normalized.backend_tokenizer.normalizer = normalizers.Lowercase()
    assert module.tokenizer_fingerprint(normalized) not in (fingerprint, module.tokenizer_fingerprint(added))
    assert len(parsed) == 2
    assert module.tokenizer_fingerprint(fresh) == fingerprint  # still the same after those


@pytest.mark.parametrize("module", [pipeline_deformer_bert, base], ids=["pipeline", "hf_readonce"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_device_checksum_sees_swapped_rows_and_single_values(module, dtype):
    """The checksum the weights digest takes of a parameter on an accelerator (run here on CPU tensors) changes
    when two embedding rows are swapped (the sums of every element and of every second one did not) and when one
    value changes, and comes back when the edit is undone."""
    torch.manual_seed(0)
    weight = tiny_model().bert.embeddings.word_embeddings.weight.detach().to(dtype)
    before = module.device_checksum(weight.reshape(-1))
    ints = weight.reshape(-1).view({2: torch.int16, 4: torch.int32}[weight.element_size()])
    sums = [ints.sum(dtype=torch.int64), ints[::2].sum(dtype=torch.int64)]  # the digest before this checksum
    assert before.dtype == torch.int64 and before.dim() == 0
    weight.data[[5, 7]] = weight.data[[7, 5]].clone()
    swapped = module.device_checksum(weight.reshape(-1))
    assert swapped != before
    assert [ints.sum(dtype=torch.int64), ints[::2].sum(dtype=torch.int64)] == sums  # blind to the swap
    weight.data[[5, 7]] = weight.data[[7, 5]].clone()
    assert module.device_checksum(weight.reshape(-1)) == before
    weight.data[3, 2] += 1
    assert module.device_checksum(weight.reshape(-1)) not in (before, swapped)
    # one-to-one in each value: the partner of 1.0 under the former mix (an arithmetic shift, two inputs per output)
    # gets another checksum
    mask, odd = (1 << 64) - 1, (-4658895280553007687) & ((1 << 64) - 1)
    mixed = (0x3FF0000000000000 * odd) & mask  # 1.0 (float64) at position 0, after the first multiplication
    sign = 1 - (mixed >> 63)
    bits = {63: sign}
    former = (mixed ^ ((mixed >> 31) | (((1 << 33) - 1) << 31 if mixed >> 63 else 0))) & mask
    for i in range(62, 32, -1):
        bits[i] = ((former >> i) & 1) ^ sign
    for i in range(32, -1, -1):
        bits[i] = ((former >> i) & 1) ^ bits[i + 31]
    partner = (sum(bit << i for i, bit in bits.items()) * pow(odd, -1, 1 << 64)) & mask
    values = torch.tensor([0x3FF0000000000000, partner - (1 << 64) if partner >> 63 else partner]).view(torch.float64)
    assert values[0] != values[1]
    assert module.device_checksum(values[:1]) != module.device_checksum(values[1:])
    chunked = torch.randn((1 << 22) + 5)  # more than one chunk: positions go on across chunks
    first = module.device_checksum(chunked)
    chunked[[0, (1 << 22) + 1]] = chunked[[(1 << 22) + 1, 0]].clone()
    assert module.device_checksum(chunked) != first


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@requires_cuda
@pytest.mark.parametrize("module", [pipeline_deformer_bert, base], ids=["pipeline", "hf_readonce"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8])
def test_device_checksum_on_cuda_equals_the_cpu_one(module, dtype):
    """On a GPU the checksum is computed where the tensor lies (int64 arithmetic modulo 2^64, the same on every
    device), so it equals the CPU's for the same values, over several chunks too; a swap still changes it there."""
    torch.manual_seed(0)
    values = (torch.randn((1 << 22) + 7) * 50).to(dtype)
    on_gpu = values.cuda()
    checksum = module.device_checksum(on_gpu)
    assert checksum.device.type == "cuda"
    assert checksum.item() == module.device_checksum(values).item()
    on_gpu[[3, (1 << 22) + 2]] = on_gpu[[(1 << 22) + 2, 3]].clone()
    if on_gpu[3] != on_gpu[(1 << 22) + 2]:
        assert module.device_checksum(on_gpu).item() != checksum.item()


@requires_cuda
def test_weights_digest_of_a_model_on_cuda_sees_edits(tokenizer):
    """The digest the store and the pipeline compare before rehashing, for parameters on a GPU: a swap of two
    embedding rows and a one-value edit change it, undoing them brings it back."""
    model = tiny_model().cuda()
    digests = (lambda: base.weights_digest(model), lambda: pipeline_deformer_bert._weights_digest(model))
    before = [digest() for digest in digests]
    weight = model.bert.embeddings.word_embeddings.weight
    with torch.no_grad():
        weight[[5, 7]] = weight[[7, 5]].clone()
        assert all(digest() != first for digest, first in zip(digests, before))
        weight[[5, 7]] = weight[[7, 5]].clone()
        assert [digest() for digest in digests] == before
        weight[3, 2] += 1
        assert all(digest() != first for digest, first in zip(digests, before))


@requires_cuda
def test_pipeline_on_cuda_with_a_store_answers_as_without(tokenizer, tmp_path):
    """A DeFormer pipeline on a GPU writes its passages to the store once and reads them back, answering as the same
    pipeline without a store."""
    qa = DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer, device=0,
                                           max_question_len=WINDOWS["max_question_len"])
    expected = storeless(qa)
    store = RepresentationStore(tmp_path / "store")
    got = [qa(question=questions, context=context, store=store, **WINDOWS)
           for context, questions in zip(CONTEXTS, QUESTIONS)]
    assert_same_answers(got, expected)
    assert len(store) == len(CONTEXTS)
    again = [qa(question=questions, context=context, store=store, **WINDOWS)
             for context, questions in zip(CONTEXTS, QUESTIONS)]
    assert_same_answers(again, expected)
