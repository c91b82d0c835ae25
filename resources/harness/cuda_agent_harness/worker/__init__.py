# SPDX-License-Identifier: Apache-2.0
"""A warm worker process that serves requests, each in a child forked for it: ``startup``
(the entry point, ``main``), ``dispatch`` (the request loop and the protocol), ``children``
(one child's pipes and context), ``processes`` (reaping and ending what children leave
behind), and the worker's own handlers (``basic``)."""
