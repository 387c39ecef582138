// `curl` against a real `lily serve` (demo model): what a shell user sees — plain JSON, SSE framing
// ("data: " events separated by blank lines, ending with "data: [DONE]"), OpenAI's error JSON.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startServer, stopServer } from './helpers.mjs';

const run = promisify(execFile);
const MARK = '\n--lily-curl--';
let srv, model;

// curl a route; resolves to { status, contentType, body }.
async function curl(route, { body, method, stream = false } = {}) {
  const args = ['-sS', '--max-time', '120', '-w', MARK + '%{http_code} %{content_type}'];
  if (stream) args.push('-N');
  if (body !== undefined) args.push('-H', 'Content-Type: application/json', '--data-binary', body);
  if (method) args.push('-X', method);
  const { stdout } = await run('curl', [...args, srv.url + route], { maxBuffer: 16 << 20 });
  const at = stdout.lastIndexOf(MARK);
  assert.ok(at >= 0, 'curl wrote its status line');
  const [status, contentType = ''] = stdout.slice(at + MARK.length).split(' ');
  return { status: Number(status), contentType, body: stdout.slice(0, at) };
}

before(async () => {
  srv = await startServer();
  const r = await curl('/v1/models');
  assert.equal(r.status, 200);
  model = JSON.parse(r.body).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(srv), 0);
});

const chat = (extra = {}) => JSON.stringify({
  model, max_tokens: 8, temperature: 0,
  messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi.' }],
  ...extra,
});

test('curl: health', async () => {
  const r = await curl('/health');
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).status, 'ok');
});

test('curl: chat completion, non-stream', async () => {
  const r = await curl('/v1/chat/completions', { body: chat() });
  assert.equal(r.status, 200);
  assert.match(r.contentType, /^application\/json/);
  const j = JSON.parse(r.body);
  assert.equal(j.object, 'chat.completion');
  assert.match(j.id, /^chatcmpl-/);
  assert.equal(j.model, model);
  assert.equal(j.choices.length, 1);
  assert.equal(j.choices[0].message.role, 'assistant');
  assert.equal(typeof j.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(j.choices[0].finish_reason));
  assert.ok(j.usage.completion_tokens >= 1 && j.usage.completion_tokens <= 8);
  assert.equal(j.usage.total_tokens, j.usage.prompt_tokens + j.usage.completion_tokens);
  // greedy: the same request gives the same reply
  const again = JSON.parse((await curl('/v1/chat/completions', { body: chat() })).body);
  assert.deepEqual(again.choices[0].message, j.choices[0].message);
});

test('curl: chat completion, stream (SSE framing)', async () => {
  const r = await curl('/v1/chat/completions', {
    stream: true, body: chat({ stream: true, stream_options: { include_usage: true } }) });
  assert.equal(r.status, 200);
  assert.match(r.contentType, /^text\/event-stream/);
  assert.ok(r.body.endsWith('\n\n'), 'the last event ends with a blank line');
  const events = r.body.split('\n\n').slice(0, -1);
  assert.ok(events.length >= 4, `${events.length} events`);
  for (const e of events) assert.ok(e.startsWith('data: ') && !e.includes('\n'), `one data line per event: ${e}`);
  assert.equal(events.at(-1), 'data: [DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  const id = chunks[0].id;
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, id, 'every chunk has the same id');
  }
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
  assert.equal(finishes.length, 1);
  assert.ok(['stop', 'length'].includes(finishes[0]));
  const usage = chunks.at(-1);  // include_usage: a last chunk with no choices
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.completion_tokens >= 1 && usage.usage.completion_tokens <= 8);
  // the streamed text is the non-stream reply
  const text = chunks.map((c) => (c.choices[0]?.delta.reasoning_content || '') + (c.choices[0]?.delta.content || ''))
    .join('');
  const whole = JSON.parse((await curl('/v1/chat/completions', { body: chat() })).body).choices[0].message;
  assert.equal(text, (whole.reasoning_content || '') + (whole.content || ''));
});

test('curl: errors use the OpenAI error JSON', async () => {
  const check = (r, status, param, type = 'invalid_request_error') => {
    assert.equal(r.status, status, r.body);
    assert.match(r.contentType, /^application\/json/);
    const e = JSON.parse(r.body).error;
    assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(typeof e.message, 'string');
    assert.ok(e.message.length > 0);
    assert.equal(e.type, type);
    if (param !== undefined) assert.equal(e.param, param);
    return e;
  };
  check(await curl('/v1/chat/completions', { body: chat({ temperature: 'hot' }) }), 400, 'temperature');
  check(await curl('/v1/chat/completions', { body: chat({ messages: 'not a list' }) }), 400, 'messages');
  const bad = check(await curl('/v1/chat/completions', { body: '{"model": ' }), 400, null);
  assert.equal(bad.code, 'invalid_json');
  const missing = check(await curl('/v1/chat/completions', { body: chat({ model: 'no-such-model' }) }), 404, 'model',
    'not_found_error');
  assert.equal(missing.code, 'model_not_found');
  check(await curl('/v1/completions', { body: JSON.stringify({ model, prompt: 'x', n: 2 }) }), 400, 'n');
});
