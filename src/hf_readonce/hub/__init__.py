"""Sharing hf-readonce models on the Hugging Face Hub: [`publish`] assembles (and uploads) a repo folder with
safetensors weights, the model's code, its pipeline, its tokenizer, `representation_format.json` and a model card
built by [`build_model_card`] from a run's metrics.

Nothing here is imported by `import hf_readonce`; importing this package adds nothing heavy to what
`import hf_readonce` loads (`datasets`, the store and the pipelines load when a function runs).
"""

from .cards import EvalRow, build_model_card, card_from_metrics_file, qa_rows_from_metrics
from .publish import PublishResult, check_repo_id, publish, representation_format_for

__all__ = ["EvalRow", "PublishResult", "build_model_card", "card_from_metrics_file", "check_repo_id",
           "publish", "qa_rows_from_metrics", "representation_format_for"]
