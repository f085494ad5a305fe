"""Deprecated (a 0.1.0 import path): `hf_readonce.deformer_qa` moved to `hf_readonce.recipes.deformer_qa` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.recipes.deformer_qa import *  # noqa: F403

warnings.warn("`hf_readonce.deformer_qa` is deprecated (a 0.1.0 import path); import from hf_readonce.recipes.deformer_qa.",
              DeprecationWarning, stacklevel=2)
