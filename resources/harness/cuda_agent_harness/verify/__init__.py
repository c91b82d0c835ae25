# SPDX-License-Identifier: Apache-2.0
"""The verification of a candidate: the reference side (``reference``) and the candidate
side (``candidate``) of one verification, the channel between them (``session``), the plan
of calls the reference hands out (``plans``), and the handlers that judge a task rather
than a candidate (``audit``, ``operators``)."""
