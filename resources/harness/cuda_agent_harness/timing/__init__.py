# SPDX-License-Identifier: Apache-2.0
"""Timing a candidate against eager PyTorch and torch.compile.

The engine times one contender on one device: ``contender_timer`` (the recipe of a sample),
``sampling`` (the regimes), ``lead_policy`` (the lead ahead of each sample), ``devices``
(CPU and CUDA), ``input_sets`` (fresh inputs per sample), ``estimates`` (what the samples
say). A session interleaves the contenders across two processes: ``session`` (the entry
point), ``reference_side`` and ``candidate_side``, ``wire`` (their FIFOs), ``request`` (what
a request asks for), ``report`` and ``staleness``; ``trusted_clock`` and ``arena`` time the
candidate from the trusted side, and ``baseline_cache`` keeps baselines between sessions.
``kernel_table`` shows where the time goes, kernel by kernel."""
