// response_format json_schema (and text.format on the Responses API) through the `openai` client against
// a real `lily serve` (demo model, random weights): whatever the noise, the content parses and matches the
// schema, checked here by an independent validator; unsupported keywords are a 400 naming them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { openaiClient, startServer, stopServer } from './helpers.mjs';

let srv, client, model;

before(async () => {
  srv = await startServer([], 1024);
  client = openaiClient(srv);
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(srv), 0);
});

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer' },
    score: { type: ['number', 'null'] },
    tags: { type: 'array', items: { type: 'string' }, maxItems: 3 },
    kind: { enum: ['cat', 'dog', 'bird'] },
    home: { type: 'object', properties: { city: { type: 'string' }, zip: { const: '75001' } }, required: ['city', 'zip'], additionalProperties: false },
    pick: { anyOf: [{ type: 'boolean' }, { type: 'array', items: { type: 'integer' }, minItems: 1 }] },
  },
  required: ['name', 'age', 'kind', 'home'],
  additionalProperties: false,
};

// Independent check of the supported subset.
function conforms(v, s) {
  if ('const' in s) return JSON.stringify(v) === JSON.stringify(s.const);
  if (s.enum) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v));
  if (s.anyOf) return s.anyOf.some((a) => conforms(v, a));
  if (Array.isArray(s.type)) return s.type.some((t) => conforms(v, { ...s, type: t }));
  switch (s.type) {
    case 'string': return typeof v === 'string';
    case 'integer': return Number.isInteger(v);
    case 'number': return typeof v === 'number';
    case 'boolean': return typeof v === 'boolean';
    case 'null': return v === null;
    case 'array':
      return Array.isArray(v) && v.length >= (s.minItems ?? 0) && v.length <= (s.maxItems ?? Infinity) &&
        v.every((x) => conforms(x, s.items ?? {}));
    case 'object':
      if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
      if (!(s.required ?? []).every((k) => k in v)) return false;
      return Object.entries(v).every(([k, x]) => (s.properties?.[k] ? conforms(x, s.properties[k]) : s.additionalProperties !== false));
    default: return true;
  }
}

test('chat: every reply parses and matches the schema', async (t) => {
  let stops = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const r = await client.chat.completions.create({ model, max_tokens: 120, temperature: 1, seed,
      messages: [{ role: 'user', content: 'Describe a pet owner.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'owner', strict: true, schema } } });
    const c = r.choices[0];
    const v = JSON.parse(c.message.content);
    assert.ok(conforms(v, schema), c.message.content);
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    if (c.finish_reason === 'stop') stops++;
  }
  t.diagnostic(`${stops} of 6 closed on their own (stop), the rest by the budget rule (length)`);
});

test('stream: the streamed content is the same JSON', async () => {
  const body = { model, max_tokens: 100, temperature: 0, messages: [{ role: 'user', content: 'An owner?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'owner', schema } } };
  let text = '';
  for await (const ch of await client.chat.completions.create({ ...body, stream: true })) text += ch.choices[0]?.delta?.content ?? '';
  assert.ok(conforms(JSON.parse(text), schema), text);
  const whole = await client.chat.completions.create(body);
  assert.equal(whole.choices[0].message.content, text);
});

test('responses: text.format json_schema', async () => {
  const r = await client.responses.create({ model, max_output_tokens: 100, temperature: 0, input: 'An owner?',
    text: { format: { type: 'json_schema', name: 'owner', schema, strict: true } } });
  assert.ok(conforms(JSON.parse(r.output_text), schema), r.output_text);
  assert.equal(r.text.format.type, 'json_schema');
});

test('unsupported keywords: a 400 naming them and where', async () => {
  const bad = { type: 'object', properties: { when: { type: 'string', format: 'date-time' }, n: { type: 'integer', minimum: 0 } } };
  await assert.rejects(client.chat.completions.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'b', schema: bad } } }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.param, 'response_format.json_schema.schema');
    assert.match(e.message, /'format'/);
    assert.match(e.message, /properties\.when/);
    return true;
  });
  await assert.rejects(client.responses.create({ model, input: 'x', text: { format: { type: 'json_schema', name: 'b', schema: { type: 'object', properties: { a: { oneOf: [] } } } } } }),
    (e) => e instanceof OpenAI.BadRequestError && /'oneOf'/.test(e.message));
});
