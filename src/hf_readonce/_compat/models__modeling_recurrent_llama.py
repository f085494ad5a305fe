"""Deprecated (a 0.1.0 import path): `hf_readonce.models.modeling_recurrent_llama` moved to `hf_readonce.models.recurrent.modeling_recurrent_llama` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.models.recurrent.modeling_recurrent_llama import *  # noqa: F403

warnings.warn("`hf_readonce.models.modeling_recurrent_llama` is deprecated (a 0.1.0 import path); import from hf_readonce.models.recurrent.modeling_recurrent_llama.",
              DeprecationWarning, stacklevel=2)
