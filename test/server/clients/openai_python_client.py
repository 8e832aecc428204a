# The OpenAI Python SDK (unmodified) against a rapid server: argv = base URL, model name.
# Prints one JSON object of what each call returned; openai-python.test.ts checks it.
import json
import sys
from typing import Literal

import openai
from pydantic import BaseModel, Field

base_url, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=60)
out = {"sdk": openai.__version__}
messages = [{"role": "user", "content": "Say hello"}]

out["models"] = [m.id for m in client.models.list().data]

# The fields the issue lists, as the SDK sends them; stream_options with stream false too.
r = client.chat.completions.create(
    model=model, messages=messages, max_completion_tokens=8, temperature=0,
    reasoning_effort="low", verbosity="low", prompt_cache_key="k1", prompt_cache_retention="24h",
    safety_identifier="s1", store=False, metadata={"app": "test"}, user="u1", service_tier="auto",
    modalities=["text"], prediction={"type": "content", "content": "hello"}, web_search_options={},
    stream_options={"include_usage": True},
)
out["chat"] = {"text": r.choices[0].message.content, "finish": r.choices[0].finish_reason, "completion_tokens": r.usage.completion_tokens}

text, usage = "", None
for c in client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0, stream=True,
                                        stream_options={"include_usage": True, "include_obfuscation": False}):
    if c.choices:
        text += c.choices[0].delta.content or ""
    if c.usage:
        usage = c.usage.completion_tokens
out["stream"] = {"text": text, "completion_tokens": usage}


class Weather(BaseModel):
    city: Literal["Oslo", "Lima"]
    days: int = Field(ge=1, le=7)


parsed = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "Weather?"}], response_format=Weather, max_tokens=64, temperature=0)
out["parsed"] = parsed.choices[0].message.parsed.model_dump()

tools = [{"type": "function", "function": {"name": "get_weather", "parameters": Weather.model_json_schema()}}]
t = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Weather in Lima?"}], tools=tools, tool_choice="required", max_tokens=64, temperature=0)
call = t.choices[0].message.tool_calls[0]
out["tool"] = {"name": call.function.name, "args": json.loads(call.function.arguments), "finish": t.choices[0].finish_reason}

c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=0, user="u1")
out["completion"] = {"text": c.choices[0].text, "finish": c.choices[0].finish_reason}

try:
    client.chat.completions.create(model=model, messages=messages, temperature="hot")
    out["bad"] = None
except openai.BadRequestError as e:
    out["bad"] = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

try:
    client.chat.completions.create(model="gpt-4o", messages=messages)
    out["unknown_model"] = None
except openai.NotFoundError as e:
    out["unknown_model"] = e.status_code

print(json.dumps(out))
