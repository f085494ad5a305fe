"""Deprecated (a 0.1.0 import path): `hf_readonce.models.modeling_recurrence` moved to `hf_readonce.models.recurrent.modeling_recurrence` (issue 10, the package layout). This shim
only re-exports the new module(s) so that 0.1.0 code keeps working; import from the new place."""

import warnings

from hf_readonce.models.recurrent.configuration_recurrence import set_recurrence_config  # noqa: E402,F401
from hf_readonce.models.recurrent.modeling_recurrence import *  # noqa: F403

warnings.warn("`hf_readonce.models.modeling_recurrence` is deprecated (a 0.1.0 import path); import from hf_readonce.models.recurrent.modeling_recurrence.",
              DeprecationWarning, stacklevel=2)
