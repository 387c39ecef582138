#!/usr/bin/python3
"""Reference renders for lily's Jinja engine, made with Python jinja2 exactly as transformers sets it up for
chat templates: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, `tojson` = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), `raise_exception` and
`strftime_now` globals.

  jinja_oracle.py render IN.json OUT.json
      IN: [{"template": SOURCE, "context": {...}}, ...]  OUT: [{"rendered": S} | {"raised": MSG} | {"error": MSG}]
  jinja_oracle.py gen TEMPLATE.jinja SEED COUNT OUT.json
      generates COUNT chat contexts (deterministic for SEED) and renders them with TEMPLATE:
      OUT: [{"context": {...}, "rendered": S} | {"context": ..., "raised": MSG} | ...]
Exit status 3 when jinja2 is not importable.
"""
import json
import random
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)


class TemplateRaised(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def render(env, source, context):
    try:
        if source not in _compiled:
            _compiled[source] = env.from_string(source)
        return {"rendered": _compiled[source].render(**context)}
    except TemplateRaised as e:
        return {"raised": str(e)}
    except Exception as e:  # any other template error
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ---------------------------------------------------------------- conversation generator

WORDS = ["hello", "weather", "Paris", "naïve", "café", "日本語", "テスト", "😀", "emoji 🚀", "tab\there", "quote \"q\"",
         "it's", "back\\slash", "<b>html</b>", "{{ not jinja }}", "{% raw %}", "x" * 40, "multi\nline", "  padded  ",
         "\nleading newline", "trailing newline\n", "Ünïcödé", "Привет", "مرحبا", "1 + 1 = 2", "100%", "a & b"]


def text(rng, n=None):
    n = n or rng.randint(1, 6)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def schema(rng, depth=0):
    kind = rng.choice(["string", "integer", "number", "boolean", "array", "object"] if depth < 2 else ["string", "integer"])
    s = {"type": kind}
    if rng.random() < 0.5:
        s["description"] = text(rng, 3)
    if kind == "string" and rng.random() < 0.3:
        s["enum"] = ["celsius", "fahrenheit", "kelvin"]
    if kind == "array":
        s["items"] = schema(rng, depth + 1)
    if kind == "object":
        s["properties"] = {"p%d" % k: schema(rng, depth + 1) for k in range(rng.randint(1, 3))}
        s["required"] = list(s["properties"])[:1]
    return s


def tool(rng, k):
    props = {"arg_%d" % j: schema(rng) for j in range(rng.randint(0, 4))}
    fn = {"name": "tool_%d_%s" % (k, rng.choice(["search", "get_weather", "run", "lookup"])),
          "description": text(rng, 4),
          "parameters": {"type": "object", "properties": props, "required": list(props)[: rng.randint(0, len(props))]}}
    return {"type": "function", "function": fn}


def arg_value(rng, depth=0):
    r = rng.random()
    if r < 0.35 or depth > 1:
        return text(rng, 2)
    if r < 0.5:
        return rng.randint(-1000, 100000)
    if r < 0.6:
        return rng.choice([0.5, 3.14159, -2.0, 1e-05, 1e21, 100.0])
    if r < 0.7:
        return rng.choice([True, False, None])
    if r < 0.85:
        return {"k%d" % j: arg_value(rng, depth + 1) for j in range(rng.randint(0, 3))}
    return [arg_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def content(rng, allow_parts):
    if allow_parts and rng.random() < 0.2:
        return [{"type": "text", "text": text(rng)} for _ in range(rng.randint(1, 3))]
    return text(rng)


def tool_call(rng, string_args):
    args = {"arg_%d" % j: arg_value(rng) for j in range(rng.randint(0, 3))}
    fn = {"name": "tool_%d" % rng.randint(0, 3), "arguments": json.dumps(args) if string_args else args}
    return {"type": "function", "function": fn} if rng.random() < 0.8 else fn


def conversation(rng, qwen35, index):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": content(rng, qwen35)})
    for _ in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": content(rng, qwen35)})
        if rng.random() < 0.8:
            a = {"role": "assistant", "content": text(rng)}
            r = rng.random()
            if r < 0.3:
                a["reasoning_content"] = text(rng)
            elif r < 0.5:
                a["content"] = "<think>\n" + text(rng) + "\n</think>\n\n" + text(rng)
            if rng.random() < 0.35:
                a["tool_calls"] = [tool_call(rng, not qwen35 and rng.random() < 0.5) for _ in range(rng.randint(1, 3))]
                if rng.random() < 0.3:
                    a["content"] = ""
                msgs.append(a)
                for _ in range(rng.randint(1, 3)):
                    msgs.append({"role": "tool", "content": text(rng)})
                if rng.random() < 0.7:
                    msgs.append({"role": "assistant", "content": text(rng)})
            else:
                msgs.append(a)
    ctx = {"messages": msgs}
    if rng.random() < 0.4:
        ctx["tools"] = [tool(rng, k) for k in range(rng.randint(1, 3))]
    ctx["add_generation_prompt"] = rng.random() < 0.6
    r = rng.random()
    if r < 0.33:
        ctx["enable_thinking"] = False
    elif r < 0.66:
        ctx["enable_thinking"] = True
    # Error paths, every few cases: misplaced system message, no user query, unknown role.
    if index % 11 == 5:
        msgs.append({"role": "system", "content": "late system"})
    elif index % 11 == 8:
        ctx["messages"] = [m for m in msgs if m["role"] != "user"] or [{"role": "system", "content": "S"}]
    elif index % 11 == 10:
        msgs.append({"role": "narrator", "content": "?"})
    return ctx


def main():
    env = make_env()
    if len(sys.argv) == 4 and sys.argv[1] == "render":
        cases = json.load(open(sys.argv[2], encoding="utf-8"))
        out = [render(env, c["template"], c["context"]) for c in cases]
    elif len(sys.argv) == 6 and sys.argv[1] == "gen":
        source = open(sys.argv[2], encoding="utf-8").read()
        rng = random.Random(int(sys.argv[3]))
        qwen35 = "render_content" in source
        out = []
        for k in range(int(sys.argv[4])):
            ctx = conversation(rng, qwen35, k)
            out.append({"context": ctx, **render(env, source, ctx)})
        sys.argv[3] = sys.argv[5]
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
