"""The documents and the question every family's contract harness (`contract_harness` in
`tests/models/<family>/cases.py`) reads: one long enough to span several windows or segments."""

DOCUMENTS = [
    "Emma is a novel by Jane Austen, published in December 1815. It is about the perils of misconstrued romance.",
    "Persuasion was Austen's last completed novel. It was published at the end of 1817, "
    "six months after her death, and follows Anne Elliot. " * 3,
    "Northanger Abbey is a coming-of-age novel.",
]
QUESTION = "Who wrote the novel and when was it published?"


def counting_tokenizations(tokenizer, texts, monkeypatch) -> list:
    """The list each of `texts` is added to whenever `tokenizer` is called on it (alone or in a batch)."""
    tokenized = []
    call = type(tokenizer).__call__

    def counting(self, text=None, *args, **kwargs):
        tokenized.extend(t for t in (text if isinstance(text, (list, tuple)) else [text]) if t in texts)
        return call(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    return tokenized
