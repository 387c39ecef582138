// response_format {"type": "json_object"}: constrained decoding on the real server (demo model, random
// weights). The random model writes noise, so these runs show the constraint at work: whatever it would
// write, the content is one JSON object ("stop") or, cut by max_tokens, a prefix of one ("length").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { openaiClient, startServer, stopServer } from './helpers.mjs';

let srv, client, model;

before(async () => {
  srv = await startServer();
  client = openaiClient(srv);
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(srv), 0);
});

const SEEDS = Array.from({ length: 16 }, (_, i) => i + 1);

const jsonArgs = (extra = {}) => ({
  model,
  messages: [{ role: 'user', content: 'Describe a cat as a JSON object.' }],
  response_format: { type: 'json_object' },
  max_tokens: 200,
  ...extra,
});

// Is `s` a prefix of some JSON text? Checked independently of the server's validator: track strings and
// the bracket stack, then try short fillers (finishing a literal, number, escape, key or value) followed
// by the closers, and let JSON.parse decide.
function isJsonPrefix(s) {
  const stack = [];
  let inStr = false, esc = false, hexLeft = 0;
  for (const ch of s) {
    if (inStr) {
      if (hexLeft > 0) hexLeft--;
      else if (esc) { esc = false; if (ch === 'u') hexLeft = 4; }
      else if (ch === '\\') esc = true;
      else if (ch === '"') inStr = false;
    } else if (ch === '"') inStr = true;
    else if (ch === '{' || ch === '[') stack.push(ch === '{' ? '}' : ']');
    else if (ch === '}' || ch === ']') stack.pop();
  }
  const closers = stack.reverse().join('');
  let heads = [''];
  if (inStr) {
    const hex = '0'.repeat(hexLeft);
    heads = esc ? ['n"', 'n":0'] : [hex + '"', hex + '":0', hex + '\\uDC00"', hex + '\\uDC00":0'];
  }
  const tails = ['', '0', ':0', '"":0', '"":0}', 'rue', 'ue', 'e', 'alse', 'lse', 'se', 'ull', 'll', 'l'];
  for (const h of heads)
    for (const t of tails) {
      try { JSON.parse(s + h + t + closers); return true; } catch { /* next */ }
    }
  return false;
}

function checkReply(content, finish, what) {
  assert.equal(typeof content, 'string', what);
  if (finish === 'stop') {
    const v = JSON.parse(content);  // throws when not JSON
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: not an object: ${content}`);
  } else {
    assert.equal(finish, 'length', what);
    assert.ok(isJsonPrefix(content), `${what}: not a JSON prefix: ${JSON.stringify(content)}`);
  }
}

test('the prefix checker itself', () => {
  for (const s of ['', '  {', '{"a', '{"a":', '{"a":[1,', '{"a":tr', '{"a":"\\', '{"a":"\\u00', '{"a":-', '{}'])
    assert.ok(isJsonPrefix(s), s);
  for (const s of ['x', '{a', '{"a":}', '{"a" 1', '{"a":1,}', '[1]x'])
    assert.ok(!isJsonPrefix(s), s);
});

test('json_object, non-stream and stream, several seeds', async () => {
  const finishes = [];
  let objects = 0;
  for (const seed of SEEDS) {
    const r = await client.chat.completions.create(jsonArgs({ seed }));
    const c = r.choices[0];
    checkReply(c.message.content, c.finish_reason, `seed ${seed}`);
    assert.equal(c.message.tool_calls, undefined);
    assert.ok(r.usage.completion_tokens <= 200);
    finishes.push(c.finish_reason);
    // Stronger than a prefix: with max_tokens >= 2 the budget rule closes the object in time, so a
    // "length" reply (cut short) parses too.
    const v = JSON.parse(c.message.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
    if (Object.keys(v).length > 0) objects++;

    // The same seed streamed: the same text and finish_reason.
    const stream = await client.chat.completions.create(jsonArgs({ seed, stream: true }));
    let text = '', finish = null;
    for await (const ch of stream) {
      const ch0 = ch.choices[0];
      if (!ch0) continue;
      if (ch0.delta?.content) text += ch0.delta.content;
      assert.equal(ch0.delta?.reasoning_content, undefined);
      if (ch0.finish_reason) finish = ch0.finish_reason;
    }
    assert.equal(text, c.message.content, `seed ${seed}: stream and non-stream differ`);
    assert.equal(finish, c.finish_reason);
  }
  // Not vacuous: some replies end on their own with a whole object ("stop"; the random model mostly
  // writes one endless key string, so most are cut by the budget), and objects have members, not only {}.
  assert.ok(finishes.includes('stop'), `no run ended with stop: ${finishes}`);
  assert.ok(objects >= 1, `no non-empty object: ${finishes}`);
});

test('json_object with greedy decoding and with top_k / top_p', async () => {
  for (const extra of [{ temperature: 0 }, { seed: 11, top_k: 5 }, { seed: 12, top_p: 0.5 }, { seed: 13, min_p: 0.2 }]) {
    const r = await client.chat.completions.create(jsonArgs(extra));
    checkReply(r.choices[0].message.content, r.choices[0].finish_reason, JSON.stringify(extra));
  }
});

test('json_object: a small max_tokens still gives valid text', async () => {
  // 2 tokens: the object is closed in time ("length": the budget cut it short).
  let r = await client.chat.completions.create(jsonArgs({ seed: 3, max_tokens: 2 }));
  assert.equal(r.choices[0].message.content.trim(), '{}');
  // 1 token cannot hold "{}": a prefix, finish_reason length.
  r = await client.chat.completions.create(jsonArgs({ seed: 3, max_tokens: 1 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(isJsonPrefix(r.choices[0].message.content));
  // Budgets in between: always an object (closed by the budget at the latest) or a prefix.
  for (const max_tokens of [5, 9, 17]) {
    r = await client.chat.completions.create(jsonArgs({ seed: 2, max_tokens }));
    const c = r.choices[0];
    checkReply(c.message.content, c.finish_reason, `max_tokens ${max_tokens}`);
    if (c.finish_reason === 'length') JSON.parse(c.message.content);  // closed by the budget rule
  }
});

test('json_object turns thinking off unless asked for', async () => {
  const r = await client.chat.completions.create(jsonArgs({ seed: 2, max_tokens: 40,
    chat_template_kwargs: { enable_thinking: true } }));
  // The random model never closes its reasoning: all of it is reasoning, no content yet.
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  assert.ok(isJsonPrefix(r.choices[0].message.content ?? ''));
});

test('json_object with a forced tool call is refused', async () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  await assert.rejects(client.chat.completions.create(jsonArgs({ tools, tool_choice: 'required' })),
    (e) => e.status === 400);
  // tool_choice auto is fine: the reply is the JSON object (no tool-call parsing).
  const r = await client.chat.completions.create(jsonArgs({ seed: 4, tools }));
  checkReply(r.choices[0].message.content, r.choices[0].finish_reason, 'tools auto');
});
