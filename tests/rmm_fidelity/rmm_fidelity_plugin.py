"""pytest plugin of rmm_suite.py: puts the rename (rmm_shim) in place of `rmm` before RMM's
conftest imports it."""

import rmm_shim  # noqa: F401  (installs the `rmm` modules)
