"""Deprecated (a 0.1.0 import path): `hf_readonce.store.adapters` moved to `hf_readonce.representations.base`, `hf_readonce.representations.registry`, `hf_readonce.representations.deformer_bert`, `hf_readonce.representations.readonce_bart` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.representations.base import *  # noqa: F403
from hf_readonce.representations.deformer_bert import *  # noqa: F403
from hf_readonce.representations.readonce_bart import *  # noqa: F403
from hf_readonce.representations.registry import *  # noqa: F403

DeformerStoreAdapter = DeformerBertAdapter  # noqa: F405  (0.1.0 name)
ReadOnceStoreAdapter = ReadOnceBartAdapter  # noqa: F405  (0.1.0 name)

warnings.warn("`hf_readonce.store.adapters` is deprecated (a 0.1.0 import path); import from hf_readonce.representations.base / hf_readonce.representations.registry / hf_readonce.representations.deformer_bert / hf_readonce.representations.readonce_bart.",
              DeprecationWarning, stacklevel=2)
