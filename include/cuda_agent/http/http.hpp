// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Everything in the `http` component (target `cuda_agent::http`, needs libcurl): the
/// OpenAI-compatible and Anthropic LLM clients, their libcurl transport, and the factory
/// that builds any client from a spec string.

#include "cuda_agent/http/anthropic_client.hpp"
#include "cuda_agent/http/curl_transport.hpp"
#include "cuda_agent/http/make_client.hpp"
#include "cuda_agent/http/openai_client.hpp"
