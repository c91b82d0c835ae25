# SPDX-License-Identifier: Apache-2.0
"""What the harness checks, apart from running anything: the static checks of a candidate's
sources (``grammar`` and ``scan`` for model_new.py, ``cpp_scan`` for its C++ and CUDA),
what a candidate must leave alone while it runs (``guard``, ``integrity``, ``hygiene``),
and the comparison of outputs (``compare``). Nothing here imports ``verify``, ``timing`` or
``worker``: they use these checks, not the other way round."""
