"""Deprecated (a 0.1.0 import path): `hf_readonce.training` moved to `hf_readonce.tasks.trainers` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.tasks.trainers import *  # noqa: F403

warnings.warn("`hf_readonce.training` is deprecated (a 0.1.0 import path); import from hf_readonce.tasks.trainers.",
              DeprecationWarning, stacklevel=2)
