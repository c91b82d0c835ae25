# SPDX-License-Identifier: Apache-2.0
import os
import sys

sys.path.insert(0, os.environ.get("CUDA_AGENT_HARNESS_DIR",
                                  os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness")))
