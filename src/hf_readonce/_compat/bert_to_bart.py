"""Deprecated (a 0.1.0 import path): `hf_readonce.bert_to_bart` moved to `hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart import *  # noqa: F403

warnings.warn("`hf_readonce.bert_to_bart` is deprecated (a 0.1.0 import path); import from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart.",
              DeprecationWarning, stacklevel=2)
