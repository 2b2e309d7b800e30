#!/usr/bin/env python3
"""Renders every (template, conversation, add_generation_prompt) case of a cases.json with
jinja2, configured as transformers' apply_chat_template configures it, and prints the results
as one JSON list: {"template", "conversation", "add_generation_prompt", "text" or "error"}.

chat_template_test.cpp compares these with runtime/data/chat_template.cpp's renders.
Usage: render_jinja.py tests/runtime/data/templates/cases.json
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def environment():
    # As transformers' _compile_jinja_template builds it (its AssistantTracker extension's
    # {% generation %} tag is not needed by these templates).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    cases_path = sys.argv[1]
    folder = os.path.dirname(cases_path)
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    results = []
    for tname, t in cases["templates"].items():
        with open(os.path.join(folder, t["file"]), encoding="utf-8", newline="") as f:
            template = env.from_string(f.read())
        for cname, conv in cases["conversations"].items():
            for agp in (False, True):
                result = {"template": tname, "conversation": cname, "add_generation_prompt": agp}
                kwargs = dict(t["special_tokens"])
                kwargs.update(conv.get("extra", {}))
                try:
                    result["text"] = template.render(
                        messages=conv["messages"], tools=conv.get("tools"), documents=None,
                        add_generation_prompt=agp, **kwargs)
                except Exception as e:  # noqa: BLE001 - any template error is a result
                    result["error"] = f"{type(e).__name__}: {e}"
                results.append(result)
    json.dump({"jinja2": jinja2.__version__, "python": sys.executable, "results": results},
              sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
