"""Deprecated (a 0.1.0 import path): `hf_readonce.store.encode` moved to `hf_readonce.representations.fill`, `hf_readonce.tasks.jsonl`, `hf_readonce.tasks.question_answering_store` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.representations.fill import *  # noqa: F403
from hf_readonce.tasks.jsonl import *  # noqa: F403
from hf_readonce.tasks.question_answering_store import *  # noqa: F403

encode_documents = fill_store  # noqa: F405  (0.1.0 name of filling a store)

warnings.warn("`hf_readonce.store.encode` is deprecated (a 0.1.0 import path); import from hf_readonce.representations.fill / hf_readonce.tasks.jsonl / hf_readonce.tasks.question_answering_store.",
              DeprecationWarning, stacklevel=2)
