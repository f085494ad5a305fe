"""mean_qa: an hf-readonce model family of its own package (the example of docs/contributing.md).

Extractive QA where each passage is read once: BERT reads the passage alone and its token states are stored; a
question is read alone too and mean-pooled, and every passage token scores as an answer start or end against it.
`models/mean_qa/` travels with published checkpoints; `family` holds the representation adapter and the
`register_family(...)` call, and `qa` the function `hf-readonce answer` runs. The package's entry point (group
`hf_readonce.families`, in its pyproject.toml) names `mean_qa_family.family`, so installing the package registers
the family in every process that imports hf-readonce.
"""
