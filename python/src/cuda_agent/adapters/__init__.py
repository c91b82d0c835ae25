# SPDX-License-Identifier: Apache-2.0
"""Adapters of the service to training frameworks; each imports only what it needs."""
