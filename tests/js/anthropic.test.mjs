// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the official
// `@anthropic-ai/sdk` client against a real `lily serve` with an API key (demo model, random weights:
// output is noise, so these check the protocol: shapes, event order, usage, errors, auth).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, stopServer } from './helpers.mjs';

const KEY = 'sekret-anthropic';
let srv, client, model;

before(async () => {
  srv = await startServer(['--api-key', KEY]);
  client = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
  const r = await fetch(srv.url + '/v1/models', { headers: { 'x-api-key': KEY } });
  assert.equal(r.status, 200, 'x-api-key is accepted like a Bearer token');
  model = (await r.json()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(srv), 0);
});

const ask = (extra = {}) => ({
  model, max_tokens: 16, temperature: 0,
  system: 'You answer briefly.',
  messages: [{ role: 'user', content: 'Name three prime numbers.' }],
  ...extra,
});

function checkUsage(u) {
  for (const k of ['input_tokens', 'output_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'])
    assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `usage.${k} = ${u[k]}`);
}

test('non-stream: a Message with a text block, stop_reason and usage', async () => {
  const m = await client.messages.create(ask());
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, model);
  assert.deepEqual(m.content.map((b) => b.type), ['text'], 'thinking is off unless asked for');
  assert.equal(typeof m.content[0].text, 'string');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert.equal(m.stop_sequence, null);
  checkUsage(m.usage);
  assert.ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 16);
  if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 16);
});

test('count_tokens equals the prompt the same request prefills', async () => {
  const body = ask({ max_tokens: 1 });
  const { input_tokens: counted } = await client.messages.countTokens({ model, system: body.system, messages: body.messages });
  const m = await client.messages.create(body);
  assert.equal(counted, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  assert.ok(counted > 10);
});

// Parses a raw SSE body into [{event, data}] and checks every event line names its data's type.
function parseSse(text) {
  const out = [];
  for (const chunk of text.split('\n\n')) {
    if (!chunk.trim()) continue;
    const ev = chunk.match(/^event: (.*)$/m)?.[1];
    const data = JSON.parse(chunk.match(/^data: (.*)$/m)[1]);
    assert.equal(ev, data.type, 'event name matches data.type');
    out.push(data);
  }
  return out;
}

// The Messages stream grammar: message_start ping (start delta* stop)* message_delta message_stop, with
// block indices 0, 1, ... and every delta of the right kind for its block. (The SDK's stream iterator
// does not hand out the ping; the raw test checks it.)
function checkSequence(events) {
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'message_start');
  const first = types[1] === 'ping' ? 2 : 1;
  assert.ok(!types.slice(first).includes('ping'));
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  let open = null, next = 0;
  const blocks = [];
  for (const e of events.slice(first, -2)) {
    if (e.type === 'content_block_start') {
      assert.equal(open, null, 'blocks do not nest');
      assert.equal(e.index, next++);
      open = e.content_block.type;
      blocks.push({ ...e.content_block, text: '', thinking: '', json: '' });
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, next - 1);
      const want = { text: ['text_delta'], thinking: ['thinking_delta', 'signature_delta'], tool_use: ['input_json_delta'] }[open];
      assert.ok(want.includes(e.delta.type), `${e.delta.type} inside a ${open} block`);
      const b = blocks[e.index];
      if (e.delta.type === 'text_delta') b.text += e.delta.text;
      if (e.delta.type === 'thinking_delta') b.thinking += e.delta.thinking;
      if (e.delta.type === 'input_json_delta') b.json += e.delta.partial_json;
    } else {
      assert.equal(e.type, 'content_block_stop');
      assert.equal(e.index, next - 1);
      open = null;
    }
  }
  assert.equal(open, null, 'every block is closed');
  return blocks;
}

test('stream (raw SSE): the event sequence, with usage in message_delta', async () => {
  const res = await fetch(srv.url + '/v1/messages', {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...ask({ max_tokens: 12 }), stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const events = parseSse(await res.text());
  assert.equal(events[1].type, 'ping');
  const blocks = checkSequence(events);
  assert.deepEqual(blocks.map((b) => b.type), ['text']);
  const start = events[0].message;
  assert.match(start.id, /^msg_/);
  assert.deepEqual(start.content, []);
  const delta = events.at(-2);
  assert.ok(['end_turn', 'max_tokens'].includes(delta.delta.stop_reason));
  checkUsage(delta.usage);
  assert.equal(start.usage.input_tokens, delta.usage.input_tokens + delta.usage.cache_read_input_tokens);
});

test('stream (SDK): MessageStream assembles the same Message as the events', async () => {
  const stream = client.messages.stream(ask({ max_tokens: 12 }));
  let text = '';
  stream.on('text', (t) => { text += t; });
  const m = await stream.finalMessage();
  assert.equal(m.content[0].type, 'text');
  assert.equal(m.content[0].text, text);
  checkUsage(m.usage);
  assert.ok(m.usage.output_tokens >= 1);
});

test('thinking: a thinking block first, streamed as thinking_delta', async () => {
  const body = ask({ max_tokens: 24, thinking: { type: 'enabled', budget_tokens: 16 } });
  const m = await client.messages.create(body);
  assert.equal(m.content[0].type, 'thinking');
  assert.ok(m.content[0].thinking.length > 0);
  assert.equal(typeof m.content[0].signature, 'string');

  const events = [];
  const stream = client.messages.stream(body);
  for await (const e of stream) events.push(e);
  const blocks = checkSequence(events);
  assert.equal(blocks[0].type, 'thinking');
  const final = await stream.finalMessage();
  assert.equal(final.content[0].thinking, blocks[0].thinking);

  // chat_template_kwargs pass through as on /v1/chat/completions
  const viaKwargs = await client.messages.create(ask({ max_tokens: 8, chat_template_kwargs: { enable_thinking: true } }));
  assert.equal(viaKwargs.content[0].type, 'thinking');
});

test('thinking.budget_tokens closes the reasoning block; the reply goes on as text', async () => {
  const body = ask({ max_tokens: 32, thinking: { type: 'enabled', budget_tokens: 6 } });
  const m = await client.messages.create(body);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  const { input_tokens: n } = await client.messages.countTokens({ model, messages: [{ role: 'user', content: m.content[0].thinking }] });
  const { input_tokens: n0 } = await client.messages.countTokens({ model, messages: [{ role: 'user', content: '' }] });
  assert.ok(n - n0 <= 6, `the reasoning is at most 6 tokens (${n - n0})`);
  assert.ok(m.content[1].text.length > 0);
  assert.equal(m.usage.output_tokens, 32, 'the closing tokens count as output');
  const events = [];
  for await (const e of client.messages.stream(body)) events.push(e);
  assert.deepEqual(checkSequence(events).map((b) => b.type), ['thinking', 'text']);
});

test('output_config.format json_schema: the text block is JSON matching the schema', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'integer' }, why: { type: 'string' } },
    required: ['answer', 'why'], additionalProperties: false };
  const m = await client.messages.create(ask({ max_tokens: 48, output_config: { format: { type: 'json_schema', schema } } }));
  const v = JSON.parse(m.content[0].text);
  assert.deepEqual(Object.keys(v).sort(), ['answer', 'why']);
  assert.ok(Number.isInteger(v.answer));
  assert.equal(typeof v.why, 'string');
});

const weather = {
  name: 'get_weather', description: 'Weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

test('tool use round trip: a forced tool, then the tool_result goes back', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  // A forced tool is decoded under its input_schema, so even the demo model's noise makes a valid call
  // (stop_reason max_tokens when the budget cut a value short; the call is still closed).
  const m = await client.messages.create(ask({ max_tokens: 64, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' }, messages }));
  assert.ok(['tool_use', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  const call = m.content.find((b) => b.type === 'tool_use');
  assert.equal(call.name, 'get_weather');
  assert.match(call.id, /\S/);
  assert.equal(typeof call.input.city, 'string');
  const history = [...messages,
    { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' }, call] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny, 21 C' }] }];
  const r2 = await client.messages.create(ask({ max_tokens: 8, tools: [weather], messages: history }));
  assert.equal(r2.type, 'message');
  const counted = await client.messages.countTokens({ model, system: 'You answer briefly.', tools: [weather], messages: history });
  assert.equal(counted.input_tokens, r2.usage.input_tokens + r2.usage.cache_read_input_tokens);

  // streamed with a forced tool: the tool_use block opens as soon as the call's name is out
  const events = [];
  for await (const e of client.messages.stream(ask({ max_tokens: 64, tools: [weather], tool_choice: { type: 'any' }, messages })))
    events.push(e);
  const blocks = checkSequence(events);
  assert.ok(['tool_use', 'max_tokens'].includes(events.at(-2).delta.stop_reason));
  const tb = blocks.find((b) => b.type === 'tool_use');
  assert.equal(tb.name, 'get_weather');
  assert.equal(typeof JSON.parse(tb.json).city, 'string');
});

test('errors come in the Anthropic shape, through the SDK\'s error classes', async () => {
  await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'hi' }] }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  await assert.rejects(client.messages.create(ask({ messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] })),
    (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.error.error.message));
  await assert.rejects(client.messages.create(ask({ tool_choice: { type: 'tool', name: 'nope' }, tools: [weather] })),
    (e) => e instanceof Anthropic.BadRequestError && /nope/.test(e.error.error.message));
  await assert.rejects(client.messages.create(ask({ model: 'claude-opus' })),
    (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
  const bad = new Anthropic({ baseURL: srv.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create(ask()),
    (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
  const raw = await fetch(srv.url + '/v1/messages',
    { method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: '{"model":' });
  assert.equal(raw.status, 400);
  assert.equal((await raw.json()).type, 'error');
  // a body that is not declared JSON (a web page's cross-site "simple request") is refused in the same shape
  const plain = await fetch(srv.url + '/v1/messages', { method: 'POST', headers: { 'x-api-key': KEY }, body: '{}' });
  assert.equal(plain.status, 415);
  const pj = await plain.json();
  assert.equal(pj.type, 'error');
  assert.match(pj.error.message, /Content-Type/);
});
