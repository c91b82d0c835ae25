# SPDX-License-Identifier: Apache-2.0
"""The evaluation harness of cuda-agent.

Long-lived worker processes (``worker/``) import torch once, then fork one child per
request; a request names a handler registered in ``registry.py``. The handlers of the
verifier live in ``checks/scan.py`` (static checks of a candidate's sources),
``verify/reference.py`` (the reference model and the comparison of outputs) and
``verify/candidate.py`` (the candidate, run under the forward guard of ``checks/guard.py``);
those of timing in ``timing/session.py``. The modules at the top (``channel``, ``tensorio``,
``models``, ``modules``, ``registry``) are shared and import none of the subpackages. The
host writes this package into a directory that no sandboxed process can modify, and never
imports it from a workspace.
"""

PROTOCOL_VERSION = 1
