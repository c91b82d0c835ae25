# SPDX-License-Identifier: Apache-2.0
"""Validates Chat Completions JSON against the OpenAI schemas in
tests/data/openai_schemas/openai_chat_completions.schema.json.

    validate_openai_schema.py SCHEMA --requests DIR --responses DIR...

--requests:  every *.json in DIR must be a CreateChatCompletionRequest.
--responses: in each DIR, every *.json that is not an error body must be a
             CreateChatCompletionResponse, and every `data:` payload of every *.sse
             (except [DONE]) a CreateChatCompletionStreamResponse.

The schemas come from an OpenAPI 3.1 description that still marks optional nulls with
OpenAPI's `nullable: true`, which JSON Schema ignores; such nodes are rewritten into
`anyOf: [node, {type: null}]` before validating. Prints one line per file and exits 1
if any fails.
"""
import argparse
import glob
import json
import os
import sys

import jsonschema


def allow_nullable(node):
    if isinstance(node, list):
        return [allow_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: allow_nullable(value) for key, value in node.items()}
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


def validator_for(schema, name):
    document = dict(schema)
    document["$ref"] = "#/$defs/" + name
    return jsonschema.Draft202012Validator(document)


def sse_payloads(text):
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if data and "\n".join(data) != "[DONE]":
            yield "\n".join(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("schema")
    parser.add_argument("--requests", action="append", default=[])
    parser.add_argument("--responses", action="append", default=[])
    arguments = parser.parse_args()
    with open(arguments.schema) as stream:
        schema = allow_nullable(json.load(stream))
    request = validator_for(schema, "CreateChatCompletionRequest")
    response = validator_for(schema, "CreateChatCompletionResponse")
    chunk = validator_for(schema, "CreateChatCompletionStreamResponse")

    checked, failures = 0, []

    def check(validator, instance, where):
        nonlocal checked
        checked += 1
        errors = sorted(validator.iter_errors(instance), key=lambda error: list(error.path))
        if errors:
            error = errors[0]
            failures.append(f"{where}: {error.message} at {'/'.join(map(str, error.path))}")

    for directory in arguments.requests:
        for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
            with open(path) as stream:
                check(request, json.load(stream), path)
    for directory in arguments.responses:
        for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
            with open(path) as stream:
                body = json.load(stream)
            if "error" in body or body.get("object") == "error":
                continue
            check(response, body, path)
        for path in sorted(glob.glob(os.path.join(directory, "*.sse"))):
            with open(path) as stream:
                for number, payload in enumerate(sse_payloads(stream.read())):
                    body = json.loads(payload)
                    if "error" in body:
                        continue
                    check(chunk, body, f"{path} event {number}")

    for failure in failures:
        print("INVALID", failure)
    print(f"checked {checked} documents, {len(failures)} invalid")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
