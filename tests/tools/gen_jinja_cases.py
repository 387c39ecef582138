#!/usr/bin/python3
"""Regenerates tests/jinja_feature_cases.inc: feature-by-feature Jinja cases with the exact output of jinja2
(transformers' settings, see jinja_oracle.py). Run: /usr/bin/python3 tests/tools/gen_jinja_cases.py"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from jinja_oracle import make_env, render  # noqa: E402

D = {"d": {"b": 2, "a": 1, "n": None, "l": [1, "x"]}, "l": [3, 1, 2], "s": "Hello World", "users": [
    {"name": "ann", "age": 31, "admin": True}, {"name": "Bob", "age": 25, "admin": False},
    {"name": "cy", "age": 40, "admin": True}]}

CASES = [
    # text, whitespace control, trim_blocks / lstrip_blocks
    ("text_only", "plain text\n", {}),
    ("trailing_newline_dropped", "a\n\n", {}),
    ("crlf_normalised", "a\r\nb\r\n{{ 1 }}\r\n", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n  {{ 1 }}  {% if 1 %}y{% endif %}\n", {}),
    ("minus_strips", "a  \n  {{- 1 -}}  \n  b {%- if true -%}   c   {%- endif -%}  d", {}),
    ("plus_disables_lstrip", "  {%+ if true %}x{% endif +%}\ny", {}),
    ("comment", "a {# comment #} b\n  {#- c -#}  \nc{# x #}\nd", {}),
    ("raw", "{% raw %}{{ x }}{% endraw %}", {}),
    ("var_no_trim", "{{ 1 }}\n{{ 2 }}\n", {}),
    # printing values
    ("print_types", "{{ 1 }}|{{ 1.0 }}|{{ 2.5e-7 }}|{{ 1e22 }}|{{ true }}|{{ none }}|{{ 'x' }}|{{ [1, 'a', none, 1.5] }}|{{ {'a': 1, 'b': 'c'} }}|{{ (1,) }}|{{ (1, 2) }}", {}),
    ("print_repr_quotes", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'é'] }}", {}),
    ("print_ctx", "{{ d }}|{{ l }}|{{ s }}", D),
    ("undefined_prints_empty", "[{{ nothing }}][{{ d.missing }}]", D),
    # arithmetic
    ("arith", "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2.5 }} {{ 10 / 5 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("arith_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * 3 ~ 4 }} {{ 10 - 2 - 3 }}", {}),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 1 ~ 'x' ~ none ~ true }} {{ [1] + [2] }} {{ 'x' ~ undefined_thing ~ 'y' }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ [1, 2] == [1, 2] }} {{ 1 != 2 }} {{ none == none }} {{ true == 1 }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not 0 }} {{ 0 or '' or 'z' }} {{ 1 and 0 }} {{ not not 'a' }}", {}),
    ("in_not_in", "{{ 'a' in 'cat' }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in l }} {{ 'x' in nothing }}", D),
    ("ternary", "{{ 'y' if true else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if false }}] {{ 1 if false else 2 if true else 3 }}", {}),
    # access
    ("attr_vs_item", "{{ d.a }} {{ d['b'] }} {{ d.l[1] }} {{ d.l.0 }} {{ l[-1] }} {{ s[0] }} {{ d.get('a') }} {{ d.get('zz', 'def') }} {{ d.get('zz') }}", D),
    ("dict_method_shadow", "{{ x.items is defined }} {{ x['items'] }} {{ x.other }}", {"x": {"items": "key", "other": 5}}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[-5:] }} {{ 'héllo'[1:3] }} {{ l[5:] }} {{ l[-10:1] }}", D),
    ("literals", "{{ [1, [2, 3], {'k': (4, 5)}] }} {{ {} }} {{ [] }} {{ () }} {{ 'a' 'b' }} {{ 1_000 }} {{ 0.5 }} {{ \"dq\" }}", {}),
    ("string_escapes", "{{ 'a\\nb' }}|{{ 'tab\\tx' }}|{{ '\\u00e9\\x41' }}|{{ 'q\\'s' }}|{{ 'back\\\\' }}", {}),
    # string methods
    ("str_strip", "[{{ '  x  '.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ '\\n a \\n'.lstrip() }}][{{ 'ab\\n\\n'.rstrip('\\n') }}][{{ 'abc'.lstrip('ba') }}]", {}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a.b.c'.rsplit('.', 1) }} {{ 'a b c'.rsplit(None, 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}", {}),
    ("str_case", "{{ 'Hello wORLD'.title() }} {{ 'hello World'.capitalize() }} {{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'straße'.upper() }} {{ \"they're bill's\".title() }}", {}),
    ("str_find", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }}", {}),
    ("str_misc", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ ', '.join(['x', 'y']) }} {{ '{}+{}={}'.format(1, 2, 'three') }} {{ '{0}{name}'.format('a', name='b') }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'a\\nb'.splitlines() }}", {}),
    ("percent_format", "{{ '%s is %d years' % ('ann', 31) }} {{ '%s' % 'solo' }} {{ '100%%' % () }}", {}),
    # dict / list methods
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", D),
    ("list_methods", "{{ l.index(1) }} {{ [1, 1, 2].count(1) }}", D),
    # statements
    ("if_elif_else", "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x is odd %}odd{% else %}else{% endif %} {% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}] {% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_unpack", "{% for a, b in [(1, 'x'), (2, 'y')] %}{{ a }}{{ b }} {% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}", D),
    ("for_dict_keys", "{% for k in d %}{{ k }} {% endfor %}", D),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_cycle", "{% for x in range(4) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", {}),
    ("recursive_loop", "{% for item in tree recursive %}[{{ item.n }}{% if item.c %}{{ loop(item.c) }}{% endif %}]{% endfor %}", {"tree": [{"n": 1, "c": [{"n": 2, "c": [{"n": 3}]}]}, {"n": 4}]}),
    ("set_scoping", "{% set c = 0 %}{% for i in range(3) %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}{% if true %}{% set c = 9 %}{% endif %}{{ c }}", {}),
    ("namespace", "{% set ns = namespace(total=0, items='') %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items ~ i %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    ("set_block", "{% set x %}  block {{ 1 + 1 }}\n{% endset %}[{{ x }}]{% set y | upper | trim %} shout {% endset %}[{{ y }}]", {}),
    ("macro", "{% macro m(a, b=2, c='z') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(1, c='k') }} {{ m(a=5, b=6) }} [{{ m() }}]", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", {}),
    ("macro_scope", "{% set g = 'outer' %}{% macro m() %}{% set g = 'inner' %}{{ g }}{% endmacro %}{{ m() }} {{ g }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'w' }}{% endfilter %}{% filter replace('a', 'o') | title %}banana split{% endfilter %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    # tests
    ("tests_types", "{{ 'x' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'x' is iterable }} {{ 3 is iterable }} {{ {} is sequence }} {{ 'a' is sequence }} {{ none is none }} {{ true is boolean }} {{ 1 is boolean }}", {}),
    ("tests_defined", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ d.a is defined }} {{ d.zz is defined }} {{ d.n is none }} {{ x is not none }} {{ y is iterable }}", {"x": 1, **D}),
    ("tests_values", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2 is equalto 2 }} {{ 2 is eq 3 }} {{ 'a' is in 'cat' }} {{ 3 is gt 2 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ none is sameas none }} {{ 1 is ne 2 }}", {}),
    ("test_in_expression", "{{ x is defined and x > 0 }} {{ y is defined or 'no' }} {{ x is not string and x is number }}", {"x": 5}),
    # filters
    ("f_tojson", "{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ [1, 2.5, none, true] | tojson }} {{ {} | tojson }}", D),
    ("f_tojson_opts", "{{ d | tojson(indent=2) }}\n{{ d | tojson(separators=(',', ':')) }}\n{{ d | tojson(sort_keys=true) }}\n{{ 'é' | tojson(ensure_ascii=true) }}\n{{ [[], {}, [1]] | tojson(indent=1) }}", D),
    ("f_trim_length", "[{{ '  x \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}] {{ l | length }} {{ 'héllo' | length }} {{ d | count }} {{ nothing | length }}", D),
    ("f_join", "{{ l | join(', ') }} {{ l | join }} {{ users | join('/', attribute='name') }}", D),
    ("f_select", "{{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | rejectattr('admin') | map(attribute='name') | join }} {{ users | selectattr('age', 'gt', 30) | map(attribute='age') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ users | selectattr('name', 'equalto', 'Bob') | list | length }}", D),
    ("f_map", "{{ ['a', 'b'] | map('upper') | list }} {{ users | map(attribute='missing', default='?') | list }} {{ [1.5, 2.5] | map('round') | list }}", D),
    ("f_default", "{{ x | default('d') }} {{ y | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('n') }} {{ 0 | d('z', boolean=true) }}", {"x": "v"}),
    ("f_conversions", "{{ '3' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'x' | float }} {{ 4 | float }} {{ 5 | string }} {{ -3 | abs }} {{ -2.5 | abs }} {{ '0x1A' | int(0, 16) }}", {}),
    ("f_round", "{{ 3.0 | round }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 3.14159 | round(2) }} {{ 3 | round }} {{ -2.5 | round }} {{ 2.5 | round(0, 'floor') }} {{ 2.1 | round(0, 'ceil') }} {{ 2.675 | round(2) }}", {}),
    ("f_case", "{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello WORLD' | capitalize }} {{ 'hello world-wide' | title }}", {}),
    ("f_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("f_first_last", "{{ l | first }} {{ l | last }} {{ 'abc' | first }} [{{ [] | first }}] {{ users | first | attr('name') }}", D),
    ("f_list_reverse", "{{ 'abc' | list }} {{ l | reverse | list }} {{ 'abc' | reverse }} {{ (1, 2) | list }}", D),
    ("f_unique_sort", "{{ [3, 1, 3, 2, 1] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} {{ l | sort }} {{ l | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ users | sort(attribute='age') | map(attribute='name') | join(',') }} {{ l | min }} {{ l | max }} {{ l | sum }} {{ users | sum(attribute='age') }}", D),
    ("f_items_dictsort", "{{ d | items | list }} {{ nothing | items | list }} {{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", D),
    ("f_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}", {}),
    ("f_misc", "{{ '<a href=\"x\">&</a>' | escape }} {{ 'x' | safe }} {{ 'one two  three' | wordcount }} {{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }} {{ '%s-%s' | format('a', 'b') }} {{ 'abc' | center(9) }}|", {}),
    ("filter_precedence", "{{ -3 | abs }} {{ 1 + l | length }} {{ 'a' ~ l | length }} {{ (l | length) * 2 }}", D),
    # globals
    ("globals", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("joiner_cycler", "{% set j = joiner(', ') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %} {% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", {}),
    ("raise_exception", "{% if true %}{{ raise_exception('Bad thing: ' ~ 42) }}{% endif %}", {}),
    # errors that both engines report
    ("err_undefined_attr", "{{ nothing.attr }}", {}),
    ("err_undefined_add", "{{ 'a' + nothing }}", {}),
    ("err_attr_of_missing", "{{ d.missing.deeper }}", D),
    ("err_append_unsafe", "{% set x = [1] %}{{ x.append(2) }}", {}),
    ("err_type", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_macro_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}", {}),
    ("err_unknown_filter", "{{ 1 | no_such_filter }}", {}),
    ("err_unknown_test", "{{ 1 is no_such_test }}", {}),
    ("err_call_undefined", "{{ nothing() }}", {}),
    ("err_unpack", "{% for a, b in [1, 2] %}{% endfor %}", {}),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
]


def cpp_str(s):
    out = '"'
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out += '\\"'
        elif ch == '\\':
            out += '\\\\'
        elif ch == '\n':
            out += '\\n'
        elif ch == '\t':
            out += '\\t'
        elif ch == '\r':
            out += '\\r'
        elif o < 0x20:
            out += '\\x%02x""' % o
        elif o == 0x3f:  # avoid trigraphs
            out += '?'
        else:
            out += ch
    return out + '"'


def main():
    env = make_env()
    lines = ["// Generated by tests/tools/gen_jinja_cases.py from jinja2 " + __import__("jinja2").__version__ +
             " with transformers' settings. Do not edit.",
             "// {name, template, context JSON, kind (rendered | raised | error), expected output or message}"]
    for name, src, ctx in CASES:
        r = render(env, src, ctx)
        kind, val = next(iter(r.items()))
        lines.append("{%s, %s, %s, %s, %s}," % (cpp_str(name), cpp_str(src), cpp_str(json.dumps(ctx, ensure_ascii=False)),
                                                 cpp_str(kind), cpp_str(val)))
    out = os.path.join(os.path.dirname(__file__), "..", "jinja_feature_cases.inc")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
