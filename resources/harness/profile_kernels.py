# SPDX-License-Identifier: Apache-2.0
"""Top kernels of the reference model and of the candidate, from a workspace:

    python3 <harness>/profile_kernels.py [--target reference|candidate|both] [--compile] [--top N]

See cuda_agent_harness/timing/kernel_table.py for every option.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_agent_harness.timing.kernel_table import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
