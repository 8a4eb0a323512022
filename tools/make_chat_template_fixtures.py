#!/usr/bin/env python3
"""Writes tests/data/chat_templates/*.json: each template there rendered by transformers.

The templates (*.jinja beside the fixtures) are written for rlforge in the structure of real
checkpoints' chat templates (Qwen2.5, Qwen3, Llama 3.x, Mistral, Gemma) plus one that
exercises every construct the C++ renderer supports. Each is rendered over the conversations
below with transformers' own path (render_jinja_template: its sandboxed jinja2 environment,
tojson override, raise_exception, loopcontrols), and the exact output -- or the message a
template raised -- is stored with the context the template saw. templating's
chat_template_fixtures_test renders the same contexts in C++ and requires identical bytes.

Usage (needs transformers and jinja2):
  $(python3 bench/bench_env.py) tools/make_chat_template_fixtures.py [OUT_DIR]
"""
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import _alias_reasoning_fields, render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "tests", "data", "chat_templates")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather — à jour",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
        "return": {"type": "number"},
    },
}
SUM_TOOL = {
    "type": "function",
    "function": {"name": "add", "description": "Adds.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}},
}
TOOLS = [WEATHER_TOOL, SUM_TOOL]

SYSTEM = {"role": "system", "content": "You are terse.\nAnswer in one line.  "}
USER = {"role": "user", "content": "What is 12+30?"}
USER2 = {"role": "user", "content": "  And héllo 😀 \"quoted\" <tag>\n\nnext line  "}
ASSISTANT = {"role": "assistant", "content": "42"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temp\": 21.5}"}

CONVERSATIONS = {
    "user": [USER],
    "system_user": [SYSTEM, USER],
    "multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "no_system_multi_turn": [USER, ASSISTANT, USER2, ASSISTANT],
    "tool_call": [SYSTEM, USER, CALL, TOOL_RESULT,
                  {"role": "assistant", "content": "It is 21.5 C in Paris."}],
    "tool_call_pending": [USER, CALL, TOOL_RESULT],
    "reasoning": [USER, {"role": "assistant", "reasoning_content": "\n12 plus 30 is 42.\n",
                         "content": "42"}, USER2,
                  {"role": "assistant", "reasoning_content": "Greeting.", "content": "Hi!"}],
    "think_in_content": [USER, {"role": "assistant",
                                "content": "<think>\nadd them\n</think>\n\n42"}],
    "bad_alternation": [USER, USER2],
}

TEMPLATE_KWARGS = {"bos_token": "<s>", "eos_token": "</s>"}


def variants(template):
    """(case suffix, conversation names, extra render kwargs) for one template."""
    base = [("", list(CONVERSATIONS), {})]
    tools = [("tools", ["user", "system_user", "tool_call", "tool_call_pending"], {"tools": TOOLS})]
    if template.startswith("qwen3"):
        return base + tools + [("no_thinking", ["user", "reasoning", "think_in_content"],
                                {"enable_thinking": False}),
                               ("thinking", ["user"], {"enable_thinking": True})]
    if template.startswith("llama3"):
        dated = {"date_string": "05 Dec 2025"}
        return [("", list(CONVERSATIONS), dated),
                ("tools", ["system_user", "tool_call"], dict(dated, tools=TOOLS)),
                ("tools_in_system", ["system_user", "tool_call"],
                 dict(dated, tools=TOOLS, tools_in_user_message=False))]
    if template.startswith("constructs"):
        return base + [("named", ["multi_turn"], {"user_name": "Ada"})]
    if template.startswith("qwen25") or template.startswith("mistral"):
        return base + tools
    return base


def render_case(source, messages, add_generation_prompt, extra):
    kwargs = dict(TEMPLATE_KWARGS, **extra)
    tools = kwargs.pop("tools", None)
    chat = _alias_reasoning_fields(json.loads(json.dumps(messages)))
    # The context exactly as transformers hands it to the template.
    context = dict(kwargs, messages=chat, tools=tools, documents=None,
                   add_generation_prompt=add_generation_prompt)
    try:
        rendered, _ = render_jinja_template(
            conversations=[messages], tools=tools, chat_template=source,
            add_generation_prompt=add_generation_prompt, **kwargs)
        return context, {"expected": rendered[0]}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is not jinja2.exceptions.TemplateError:  # only raise_exception's errors
            raise
        return context, {"error": str(e)}


def write_checkpoint(out_dir):
    """checkpoint/: a tiny checkpoint's tokenizer (the Qwen2-style test BPE) whose
    tokenizer_config.json carries qwen3_style.jinja as chat_template, and expected.json with the
    prompt ids transformers' apply_chat_template(add_generation_prompt=True, tokenize=True) gives
    for [system?, user]: what data.prompt_template: model must encode."""
    from transformers import PreTrainedTokenizerFast
    src = os.path.join(out_dir, "..", "tokenizer", "qwen2", "tokenizer.json")
    ckpt = os.path.join(out_dir, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    with open(src, encoding="utf-8") as f, open(os.path.join(ckpt, "tokenizer.json"), "w",
                                                 encoding="utf-8") as g:
        g.write(f.read())
    with open(os.path.join(out_dir, "qwen3_style.jinja"), encoding="utf-8") as f:
        template = f.read()
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
              "chat_template": template}
    with open(os.path.join(ckpt, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    tok = PreTrainedTokenizerFast(tokenizer_file=src, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")
    tok.chat_template = template
    cases = []
    for system in ("", "You add numbers."):
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": "12+30="}]
        enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        cases.append({"system": system, "user": "12+30=", "prompt_text": text,
                      "prompt_ids": list(enc["input_ids"])})
    with open(os.path.join(ckpt, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"generated_by": "tools/make_chat_template_fixtures.py", "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{ckpt}: tokenizer with chat_template, {len(cases)} expected prompts")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    write_checkpoint(out_dir)
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(out_dir, name), encoding="utf-8") as f:
            source = f.read()
        cases = []
        for suffix, conversations, extra in variants(name):
            for conv in conversations:
                for agp in (False, True):
                    context, result = render_case(source, CONVERSATIONS[conv], agp, extra)
                    label = "/".join(p for p in (conv, suffix, "gen" if agp else "") if p)
                    cases.append(dict(name=label, context=context, **result))
        fixture = {
            "template": name,
            "generated_by": f"tools/make_chat_template_fixtures.py (transformers "
                            f"{transformers.__version__}, jinja2 {jinja2.__version__})",
            "cases": cases,
        }
        path = os.path.join(out_dir, name[:-len(".jinja")] + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in c for c in cases)
        print(f"{path}: {len(cases)} cases ({errors} raise an error)")


if __name__ == "__main__":
    main()
