"""Drives pulse-provider-sim with the official Python clients of the four protocols.

For each protocol (openai, anthropic, gemini, ollama) and each mode (stream, no stream) it holds
multi-turn conversations with `sim:diligent`, offering one read tool: the model calls the tool,
the driver sends the call and its result back with the client's own typed objects, until the
model answers in text. Conversations continue until the cell made at least `--min-requests`
requests. Every answer is checked the way an application would rely on it (ids present and fresh,
usage reported, stop reason consistent with the content); any client error or failed check ends
the run with exit status 1 and a line naming the protocol, mode and request.

On success it prints one JSON line: {"cells": [{"protocol", "stream", "requests",
"conversations", "tool_calls", "gemini_api_versions"?}]}.
"""

import argparse
import json
import sys
import traceback

MODEL = "sim:diligent"
TOOL_NAME = "get_status"
TOOL_DESCRIPTION = "Reads the current status of one host."
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"host": {"type": "string", "description": "the host name"}},
    "required": ["host"],
}
# The diligent model reads a bounded number of times, then answers; a conversation that goes on
# longer than this is a failure of the simulator, not a reason to keep asking.
MAX_TURNS = 8
TIMEOUT_SECS = 30.0


class CheckFailed(Exception):
    """A response the client accepted but an application could not use."""


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def tool_result(host):
    return f"status of {host}: healthy, load 0.4, last restart 3 days ago"


def host_of(arguments):
    check(isinstance(arguments, dict), f"tool arguments are not an object: {arguments!r}")
    host = arguments.get("host")
    check(isinstance(host, str) and host, f"tool arguments lack a host: {arguments!r}")
    return host


class Cell:
    """One protocol and mode: counts requests and remembers ids that must not repeat."""

    def __init__(self, protocol, stream):
        self.protocol = protocol
        self.stream = stream
        self.requests = 0
        self.conversations = 0
        self.tool_calls = 0
        self.response_ids = set()
        self.call_ids = set()
        self.extra = {}

    @property
    def mode(self):
        return "stream" if self.stream else "no stream"

    def fresh_response_id(self, response_id):
        check(isinstance(response_id, str) and response_id, f"no response id: {response_id!r}")
        check(response_id not in self.response_ids, f"response id {response_id!r} repeated")
        self.response_ids.add(response_id)

    def fresh_call_id(self, call_id):
        check(isinstance(call_id, str) and call_id, f"tool call without an id: {call_id!r}")
        check(call_id not in self.call_ids, f"tool call id {call_id!r} repeated")
        self.call_ids.add(call_id)
        self.tool_calls += 1

    def summary(self):
        out = {
            "protocol": self.protocol,
            "stream": self.stream,
            "requests": self.requests,
            "conversations": self.conversations,
            "tool_calls": self.tool_calls,
        }
        out.update(self.extra)
        return out


def user_prompt(cell, n):
    # Distinct first messages keep the simulator's per-conversation state apart.
    return f"[{cell.protocol} {cell.mode} #{n}] Check host db{n} and tell me whether it is healthy."


def finished(cell, text):
    check(text.startswith("Summary:"), f"final answer is not the summary: {text!r}")


# --- OpenAI -------------------------------------------------------------------------------------


def openai_conversation(cell, base_url, n):
    import openai

    client = openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="sk-sim", timeout=TIMEOUT_SECS, max_retries=0
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": TOOL_DESCRIPTION,
                "parameters": TOOL_SCHEMA,
            },
        }
    ]
    messages = [
        {"role": "system", "content": "You check hosts."},
        {"role": "user", "content": user_prompt(cell, n)},
    ]
    for _ in range(MAX_TURNS):
        cell.requests += 1
        if cell.stream:
            with client.chat.completions.stream(
                model=MODEL,
                messages=messages,
                tools=tools,
                stream_options={"include_usage": True},
            ) as stream:
                chunks = 0
                for event in stream:
                    if event.type == "chunk":
                        chunks += 1
                completion = stream.get_final_completion()
            check(chunks >= 2, f"stream had {chunks} chunk(s)")
        else:
            completion = client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools
            )
        cell.fresh_response_id(completion.id)
        check(completion.object == "chat.completion", f"object is {completion.object!r}")
        check(completion.created > 0, f"created is {completion.created!r}")
        check(completion.usage is not None, "no usage")
        check(completion.usage.prompt_tokens > 0, f"usage {completion.usage!r}")
        check(len(completion.choices) == 1, f"{len(completion.choices)} choices")
        choice = completion.choices[0]
        message = choice.message
        calls = message.tool_calls or []
        if not calls:
            check(choice.finish_reason == "stop", f"finish_reason {choice.finish_reason!r}")
            finished(cell, message.content or "")
            return
        check(choice.finish_reason == "tool_calls", f"finish_reason {choice.finish_reason!r}")
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ],
            }
        )
        for c in calls:
            cell.fresh_call_id(c.id)
            check(c.function.name == TOOL_NAME, f"called {c.function.name!r}")
            host = host_of(json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": tool_result(host)})
    raise CheckFailed(f"no final answer after {MAX_TURNS} turns")


# --- Anthropic ----------------------------------------------------------------------------------


def anthropic_conversation(cell, base_url, n):
    import anthropic

    client = anthropic.Anthropic(
        base_url=base_url, api_key="sk-ant-sim", timeout=TIMEOUT_SECS, max_retries=0
    )
    tools = [{"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}]
    messages = [{"role": "user", "content": user_prompt(cell, n)}]
    for _ in range(MAX_TURNS):
        cell.requests += 1
        args = dict(
            model=MODEL, max_tokens=1024, system="You check hosts.", messages=messages, tools=tools
        )
        if cell.stream:
            events = set()
            with client.messages.stream(**args) as stream:
                for event in stream:
                    events.add(event.type)
                message = stream.get_final_message()
            for required in ("message_start", "message_delta", "message_stop"):
                check(required in events, f"stream without {required}: {sorted(events)}")
        else:
            message = client.messages.create(**args)
        cell.fresh_response_id(message.id)
        check(message.type == "message", f"type {message.type!r}")
        check(message.role == "assistant", f"role {message.role!r}")
        check(message.usage.input_tokens > 0, f"usage {message.usage!r}")
        check(message.usage.output_tokens > 0, f"usage {message.usage!r}")
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            check(message.stop_reason == "end_turn", f"stop_reason {message.stop_reason!r}")
            text = "".join(b.text for b in message.content if b.type == "text")
            finished(cell, text)
            return
        check(message.stop_reason == "tool_use", f"stop_reason {message.stop_reason!r}")
        # The assistant turn goes back as the client returned it.
        messages.append({"role": "assistant", "content": message.content})
        results = []
        for c in calls:
            cell.fresh_call_id(c.id)
            check(c.name == TOOL_NAME, f"called {c.name!r}")
            results.append(
                {"type": "tool_result", "tool_use_id": c.id, "content": tool_result(host_of(c.input))}
            )
        messages.append({"role": "user", "content": results})
    raise CheckFailed(f"no final answer after {MAX_TURNS} turns")


# --- Gemini -------------------------------------------------------------------------------------

# Conversations alternate between the two API versions the client can be configured with.
GEMINI_API_VERSIONS = ("v1beta", "v1")


def gemini_conversation(cell, base_url, n):
    from google import genai
    from google.genai import types

    api_version = GEMINI_API_VERSIONS[n % len(GEMINI_API_VERSIONS)]
    cell.extra.setdefault("gemini_api_versions", {}).setdefault(api_version, 0)
    client = genai.Client(
        api_key="sim-gemini-key",
        http_options=types.HttpOptions(
            base_url=base_url, api_version=api_version, timeout=int(TIMEOUT_SECS * 1000)
        ),
    )
    config = types.GenerateContentConfig(
        system_instruction="You check hosts.",
        tools=[
            types.Tool(
                function_declarations=[
                    # Both ways the client takes a schema: its own typed one, or plain JSON.
                    types.FunctionDeclaration(
                        name=TOOL_NAME,
                        description=TOOL_DESCRIPTION,
                        parameters_json_schema=TOOL_SCHEMA,
                    )
                    if n % 2 == 0
                    else types.FunctionDeclaration(
                        name=TOOL_NAME,
                        description=TOOL_DESCRIPTION,
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={
                                "host": types.Schema(
                                    type=types.Type.STRING, description="the host name"
                                )
                            },
                            required=["host"],
                        ),
                    )
                ]
            )
        ],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text=user_prompt(cell, n))])]
    for _ in range(MAX_TURNS):
        cell.requests += 1
        cell.extra["gemini_api_versions"][api_version] += 1
        if cell.stream:
            chunks = list(
                client.models.generate_content_stream(
                    model=MODEL, contents=contents, config=config
                )
            )
            check(len(chunks) >= 1, "empty stream")
            parts = []
            for chunk in chunks:
                check(chunk.candidates, f"chunk without candidates: {chunk!r}")
                content = chunk.candidates[0].content
                parts.extend((content and content.parts) or [])
            last = chunks[-1]
        else:
            last = client.models.generate_content(model=MODEL, contents=contents, config=config)
            check(last.candidates, f"response without candidates: {last!r}")
            parts = list(last.candidates[0].content.parts or [])
        check(last.response_id, "no responseId")
        cell.fresh_response_id(last.response_id)
        candidate = last.candidates[0]
        check(candidate.finish_reason == types.FinishReason.STOP, f"finish {candidate.finish_reason!r}")
        usage = last.usage_metadata
        check(usage is not None and (usage.prompt_token_count or 0) > 0, f"usage {usage!r}")
        calls = [p for p in parts if p.function_call is not None]
        if not calls:
            finished(cell, "".join(p.text or "" for p in parts if not p.thought))
            return
        # The model turn goes back whole, thought signatures included.
        contents.append(types.Content(role="model", parts=parts))
        responses = []
        for p in calls:
            call = p.function_call
            cell.fresh_call_id(call.id)
            check(call.name == TOOL_NAME, f"called {call.name!r}")
            check(
                isinstance(p.thought_signature, bytes) and p.thought_signature,
                f"function call {call.id!r} without a thought signature",
            )
            responses.append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call.id,
                        name=call.name,
                        response={"result": tool_result(host_of(call.args))},
                    )
                )
            )
        contents.append(types.Content(role="user", parts=responses))
    raise CheckFailed(f"no final answer after {MAX_TURNS} turns")


# --- Ollama -------------------------------------------------------------------------------------


def ollama_conversation(cell, base_url, n):
    import ollama

    client = ollama.Client(host=base_url, timeout=TIMEOUT_SECS)
    tools = [
        {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": TOOL_DESCRIPTION,
                "parameters": TOOL_SCHEMA,
            },
        }
    ]
    messages = [
        {"role": "system", "content": "You check hosts."},
        {"role": "user", "content": user_prompt(cell, n)},
    ]
    for _ in range(MAX_TURNS):
        cell.requests += 1
        if cell.stream:
            text, calls, last = "", [], None
            for part in client.chat(model=MODEL, messages=messages, tools=tools, stream=True):
                check(last is None or not last.done, "a part after the done part")
                text += part.message.content or ""
                calls.extend(part.message.tool_calls or [])
                last = part
            check(last is not None and last.done, "stream ended without its done part")
        else:
            last = client.chat(model=MODEL, messages=messages, tools=tools, stream=False)
            check(last.done, "answer not done")
            text, calls = last.message.content or "", list(last.message.tool_calls or [])
        check(last.model == MODEL, f"model {last.model!r}")
        check(last.created_at, "no created_at")
        check(last.done_reason == "stop", f"done_reason {last.done_reason!r}")
        check((last.prompt_eval_count or 0) > 0, f"prompt_eval_count {last.prompt_eval_count!r}")
        check((last.eval_count or 0) > 0, f"eval_count {last.eval_count!r}")
        if not calls:
            finished(cell, text)
            return
        messages.append(ollama.Message(role="assistant", content=text, tool_calls=calls))
        for c in calls:
            cell.tool_calls += 1
            check(c.function.name == TOOL_NAME, f"called {c.function.name!r}")
            host = host_of(dict(c.function.arguments))
            messages.append({"role": "tool", "tool_name": c.function.name, "content": tool_result(host)})
    raise CheckFailed(f"no final answer after {MAX_TURNS} turns")


CONVERSATIONS = {
    "openai": openai_conversation,
    "anthropic": anthropic_conversation,
    "gemini": gemini_conversation,
    "ollama": ollama_conversation,
}


def run_cell(cell, base_url, min_requests):
    conversation = CONVERSATIONS[cell.protocol]
    while cell.requests < min_requests:
        try:
            conversation(cell, base_url, cell.conversations)
        except Exception as e:  # every failure is reported with where it happened
            kind = "check failed" if isinstance(e, CheckFailed) else type(e).__name__
            print(
                f"FAILED {cell.protocol} ({cell.mode}) request {cell.requests} "
                f"(conversation {cell.conversations}): {kind}: {e}",
                file=sys.stderr,
            )
            if not isinstance(e, CheckFailed):
                traceback.print_exc(file=sys.stderr)
            return False
        cell.conversations += 1
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="http://127.0.0.1:PORT of the simulator")
    parser.add_argument("--min-requests", type=int, default=15, help="requests per protocol and mode")
    parser.add_argument(
        "--protocol", action="append", choices=sorted(CONVERSATIONS), help="default: all four"
    )
    args = parser.parse_args()
    base_url = args.base_url.rstrip("/")
    cells = [
        Cell(protocol, stream)
        for protocol in (args.protocol or list(CONVERSATIONS))
        for stream in (False, True)
    ]
    failed = [c for c in cells if not run_cell(c, base_url, args.min_requests)]
    if failed:
        names = ", ".join(f"{c.protocol} ({c.mode})" for c in failed)
        print(f"FAILED cells: {names}", file=sys.stderr)
        return 1
    print(json.dumps({"cells": [c.summary() for c in cells]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
