// End-to-end tests: the real `lily serve` on the demo model, driven by the official `openai` client.
// LILY_BIN points at the lily binary (default ../../build/lily). The demo model's output is noise, so
// the tests check shapes, determinism and server behaviour, not text quality.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { CTX, openaiClient, startServer, stopServer } from './helpers.mjs';

let srv, client, model;

before(async () => {
  srv = await startServer();
  client = openaiClient(srv);
  const list = await client.models.list();
  model = list.data[0].id;
});

after(async () => {
  const code = await stopServer(srv);
  assert.equal(code, 0, 'graceful shutdown exits 0');
});

const chatArgs = (extra = {}) => ({
  model,
  messages: [{ role: 'user', content: 'Hello there, how are you today?' }],
  max_tokens: 12,
  ...extra,
});

async function expectStatus(promise, status) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, `expected HTTP ${status}, got ${e.status}: ${e.message}`);
    return true;
  });
}

test('health and models', async () => {
  const r = await fetch(srv.url + '/health');
  assert.equal(r.status, 200);
  assert.equal((await r.json()).status, 'ok');
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
});

test('chat completion, non-stream', async () => {
  const r = await client.chat.completions.create(chatArgs());
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(typeof r.created, 'number');
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completion, stream with usage', async () => {
  const stream = await client.chat.completions.create(
    chatArgs({ stream: true, stream_options: { include_usage: true }, max_tokens: 10 }));
  let first = true, finish = null, usage = null, text = '', chunks = 0;
  for await (const ch of stream) {
    chunks++;
    assert.equal(ch.object, 'chat.completion.chunk');
    if (ch.usage) { usage = ch.usage; assert.equal(ch.choices.length, 0); continue; }
    const d = ch.choices[0].delta;
    if (first) { assert.equal(d.role, 'assistant'); first = false; }
    text += (d.content || '') + (d.reasoning_content || '');
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.ok(chunks >= 3);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 10);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
});

test('stream helper assembles the final message', async () => {
  const runner = client.chat.completions.stream(chatArgs({ max_tokens: 8 }));
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.role, 'assistant');
});

test('text completion, non-stream and stream', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].finish_reason, 'length');
  const s = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, stream: true });
  let n = 0, fin = null;
  for await (const ch of s) { n++; if (ch.choices[0]?.finish_reason) fin = ch.choices[0].finish_reason; }
  assert.ok(n >= 2);
  assert.equal(fin, 'length');
});

test('seed gives the same output', async () => {
  const args = chatArgs({ seed: 1234, temperature: 1.0, top_p: 0.95, max_tokens: 16,
    messages: [{ role: 'user', content: 'Tell me a story about seeds.' }] });
  const a = await client.chat.completions.create(args);
  const b = await client.chat.completions.create(args);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.choices[0].message.reasoning_content, b.choices[0].message.reasoning_content);
  const c = await client.completions.create({ model, prompt: 'Seeds', seed: 7, temperature: 1, max_tokens: 16 });
  const d = await client.completions.create({ model, prompt: 'Seeds', seed: 7, temperature: 1, max_tokens: 16 });
  assert.equal(c.choices[0].text, d.choices[0].text);
});

test('cached_tokens on a repeated prefix', async () => {
  const long = 'This is a long shared system prompt about many things. '.repeat(8);
  const sys = { role: 'system', content: long };
  const first = await client.chat.completions.create({
    model, max_tokens: 4, prompt_cache_key: 'conv-1',
    messages: [sys, { role: 'user', content: 'First question?' }] });
  // identical request: the whole prompt is reused
  const again = await client.chat.completions.create({
    model, max_tokens: 4, prompt_cache_key: 'conv-1',
    messages: [sys, { role: 'user', content: 'First question?' }] });
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens);
  // next turn: resumes where the first prompt's assistant header began
  const next = await client.chat.completions.create({
    model, max_tokens: 4, prompt_cache_key: 'conv-1',
    messages: [sys, { role: 'user', content: 'First question?' },
      { role: 'assistant', content: first.choices[0].message.content || 'ok' },
      { role: 'user', content: 'Second question?' }] });
  const cached = next.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= first.usage.prompt_tokens - 8, `cached ${cached} of first prompt ${first.usage.prompt_tokens}`);
  assert.ok(cached < next.usage.prompt_tokens);
});

test('stop strings end the output and are never sent', async () => {
  const base = { model, prompt: 'The quick brown fox', temperature: 0, max_tokens: 24 };
  const full = (await client.completions.create(base)).choices[0].text;
  assert.ok(full.length >= 6, 'demo output long enough');
  // a stop string taken from the middle of the greedy output
  const stop = [...full].slice(3, 5).join('');
  const cut = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(r.choices[0].text, cut);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ ...base, stop, stream: true });
  let streamed = '';
  for await (const ch of s) streamed += ch.choices[0]?.text || '';
  assert.equal(streamed, cut);
  assert.ok(!streamed.includes(stop));
});

test('tools requests are accepted', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  for (const tool_choice of ['auto', 'none', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await client.chat.completions.create(chatArgs({ tools, tool_choice, parallel_tool_calls: false }));
    assert.equal(r.choices[0].message.role, 'assistant');
  }
  const r = await client.chat.completions.create(chatArgs({
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18C, sunny' },
    ], tools }));
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('logprobs', async () => {
  const r = await client.chat.completions.create(chatArgs({ logprobs: true, top_logprobs: 3, max_tokens: 4 }));
  const lp = r.choices[0].logprobs.content;
  assert.ok(lp.length >= 1);
  assert.equal(lp[0].top_logprobs.length, 3);
  assert.ok(lp[0].logprob <= 0);
});

test('json_object and json_schema accepted; a schema keyword the server cannot enforce rejected', async () => {
  await client.chat.completions.create(chatArgs({ response_format: { type: 'json_object' } }));
  await client.chat.completions.create(chatArgs({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } }));
  await expectStatus(client.chat.completions.create(chatArgs({
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } })), 400);
});

test('error cases', async () => {
  const bad = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": "x", bad json' });
  assert.equal(bad.status, 400);
  const body = await bad.json();
  assert.equal(typeof body.error.message, 'string');
  assert.ok('type' in body.error && 'param' in body.error && 'code' in body.error);

  await expectStatus(client.chat.completions.create(chatArgs({ n: 2 })), 400);
  await expectStatus(client.chat.completions.create(chatArgs({ temperature: 'hot' })), 400);
  await expectStatus(client.chat.completions.create(chatArgs({ model: 'no-such-model' })), 404);
  await expectStatus(client.completions.create({ model, prompt: 'x', n: 3 }), 400);

  const unknown = await fetch(srv.url + '/v1/nothing');
  assert.equal(unknown.status, 404);
  assert.ok((await unknown.json()).error);

  const huge = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x'.repeat(9 << 20) }] }) });
  assert.equal(huge.status, 413);

  const words = Array.from({ length: CTX + 50 }, (_, i) => `w${i}`).join(' ');
  await assert.rejects(client.chat.completions.create(chatArgs({ messages: [{ role: 'user', content: words }] })),
    (e) => { assert.equal(e.status, 400); assert.match(e.message, /context length is 512/); return true; });
});

test('client disconnect mid-stream does not hurt the server', async () => {
  // Its own server with a longer context: the abandoned greedy stream runs ~2,000 tokens (it ends at a stop token
  // then; ~0.2 s on the demo model) instead of 400 (~35 ms), which a loaded 2-core machine could finish writing into
  // the socket before the client had read its 3 chunks and gone (then nothing is left to cancel).
  const s2 = await startServer(['--ctx', '4096']);
  try {
    const c2 = openaiClient(s2);
    const ac = new AbortController();
    const stream = await c2.chat.completions.create(
      chatArgs({ stream: true, max_tokens: 4000, temperature: 0 }), { signal: ac.signal });
    let n = 0;
    try {
      // abort, then leave the loop: awaiting another read after an abort can hang in the fetch body reader
      for await (const _ of stream) { if (++n === 3) { ac.abort(); break; } }
    } catch {
      // the client reports the abort; either way the connection is gone
    }
    assert.ok(n >= 3);
    // the server is alive and serves the next request
    const r = await c2.chat.completions.create(chatArgs({ max_tokens: 3 }));
    assert.equal(r.choices[0].message.role, 'assistant');
    let cancelled = 0;
    for (let i = 0; i < 50 && cancelled === 0; i++) {
      const m = await (await fetch(s2.url + '/metrics')).text();
      cancelled = Number(m.match(/^lily_requests_cancelled_total (\d+)/m)?.[1] || 0);
      if (!cancelled) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(cancelled >= 1, 'the abandoned request was cancelled');
  } finally {
    assert.equal(await stopServer(s2), 0, 'graceful shutdown exits 0');
  }
});

test('metrics', async () => {
  const r = await fetch(srv.url + '/metrics');
  assert.equal(r.status, 200);
  const t = await r.text();
  for (const name of ['lily_requests_total', 'lily_prompt_tokens_total', 'lily_completion_tokens_total',
    'lily_prefill_tokens_per_second', 'lily_decode_tokens_per_second', 'lily_queue_depth', 'lily_cache_hits_total'])
    assert.match(t, new RegExp('^' + name, 'm'), name);
  assert.ok(Number(t.match(/^lily_cache_hits_total (\d+)/m)[1]) >= 1);
});

test('api key is enforced when set', async () => {
  const s = await startServer(['--api-key', 'sekret']);
  try {
    const none = await fetch(s.url + '/v1/models');
    assert.equal(none.status, 401);
    assert.equal((await none.json()).error.type, 'authentication_error');
    const wrong = openaiClient(s, 'nope');
    await expectStatus(wrong.models.list(), 401);
    const right = openaiClient(s, 'sekret');
    const r = await right.chat.completions.create(chatArgs({ max_tokens: 2 }));
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal((await fetch(s.url + '/health')).status, 200);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
});

test('a full queue answers 429 with Retry-After', async () => {
  const s = await startServer(['--queue', '1']);
  try {
    const send = () => fetch(s.url + '/v1/completions', {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'busy', max_tokens: 120 }) });
    const rs = await Promise.all(Array.from({ length: 8 }, send));
    const busy = rs.filter((r) => r.status === 429);
    assert.ok(busy.length >= 1, 'some requests were refused');
    assert.equal(busy[0].headers.get('retry-after'), '1');
    assert.ok(rs.some((r) => r.status === 200));
    await Promise.all(rs.map((r) => r.text()));
  } finally {
    assert.equal(await stopServer(s), 0);
  }
});
