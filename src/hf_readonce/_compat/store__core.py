"""Deprecated (a 0.1.0 import path): `hf_readonce.store.core` moved to `hf_readonce.store` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.store import *  # noqa: F403

warnings.warn("`hf_readonce.store.core` is deprecated (a 0.1.0 import path); import from hf_readonce.store.",
              DeprecationWarning, stacklevel=2)
