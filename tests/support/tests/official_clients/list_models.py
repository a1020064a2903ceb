"""Lists the models of pulse-provider-sim with the official Python clients of the four protocols.

Each client lists through its own models API, following pagination the way the client does
(Anthropic by `after_id`, Gemini by page token, both asked for pages of two), so a simulator list
in another shape, or one whose pages do not chain, fails here as it would in an application.

Prints one JSON line: {"openai": [ids], "anthropic": [ids], "gemini-v1beta": [ids],
"gemini-v1": [ids], "ollama": [names]}; exits 1 naming the client that failed.
"""

import argparse
import json
import sys
import traceback

TIMEOUT_SECS = 30.0


def openai_ids(base_url):
    import openai

    client = openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="sk-sim", timeout=TIMEOUT_SECS, max_retries=0
    )
    return [model.id for model in client.models.list()]


def anthropic_ids(base_url):
    import anthropic

    client = anthropic.Anthropic(
        base_url=base_url, api_key="sk-ant-sim", timeout=TIMEOUT_SECS, max_retries=0
    )
    ids = []
    for model in client.models.list(limit=2):
        if model.type != "model" or not model.display_name:
            raise ValueError(f"an unusable model entry: {model!r}")
        ids.append(model.id)
    return ids


def gemini_ids(base_url, api_version):
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="sim-gemini-key",
        http_options=types.HttpOptions(
            base_url=base_url, api_version=api_version, timeout=int(TIMEOUT_SECS * 1000)
        ),
    )
    ids = []
    for model in client.models.list(config=types.ListModelsConfig(page_size=2)):
        if not model.name.startswith("models/") or not model.input_token_limit:
            raise ValueError(f"an unusable model entry: {model!r}")
        ids.append(model.name.removeprefix("models/"))
    return ids


def ollama_names(base_url):
    import ollama

    client = ollama.Client(host=base_url, timeout=TIMEOUT_SECS)
    names = []
    for model in client.list().models:
        if not model.digest or model.details is None:
            raise ValueError(f"an unusable model entry: {model!r}")
        names.append(model.model)
    return names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    args = parser.parse_args()
    base_url = args.base_url.rstrip("/")
    listings = {
        "openai": lambda: openai_ids(base_url),
        "anthropic": lambda: anthropic_ids(base_url),
        "gemini-v1beta": lambda: gemini_ids(base_url, "v1beta"),
        "gemini-v1": lambda: gemini_ids(base_url, "v1"),
        "ollama": lambda: ollama_names(base_url),
    }
    out = {}
    for name, listing in listings.items():
        try:
            out[name] = listing()
        except Exception:  # noqa: BLE001 - any client failure fails the listing
            print(f"FAILED {name}:", file=sys.stderr)
            traceback.print_exc()
            sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
