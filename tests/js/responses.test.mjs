// The OpenAI Responses API (/v1/responses) through `client.responses.create` of the official `openai`
// client against a real `lily serve` (demo model, random weights: output is noise, so these check the
// protocol: items, event order, usage, previous_response_id, store, errors).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
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

const ask = (extra = {}) => ({ model, max_output_tokens: 12, temperature: 0, instructions: 'Answer briefly.', input: 'Name three prime numbers.', ...extra });

function checkUsage(u) {
  assert.ok(Number.isInteger(u.input_tokens) && u.input_tokens > 0);
  assert.ok(Number.isInteger(u.output_tokens) && u.output_tokens > 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.ok(u.input_tokens_details.cached_tokens <= u.input_tokens);
  assert.ok(u.output_tokens_details.reasoning_tokens <= u.output_tokens + 1);
}

test('non-stream: reasoning and message items, status, usage', async () => {
  const r = await client.responses.create(ask());
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.model, model);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.instructions, 'Answer briefly.');
  // thinking is on by default: the reply opens in the reasoning block
  assert.equal(r.output[0].type, 'reasoning');
  assert.match(r.output[0].id, /^rs_/);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  for (const item of r.output) assert.ok(['reasoning', 'message', 'function_call'].includes(item.type));
  const msg = r.output.find((i) => i.type === 'message');
  assert.equal(r.output_text, msg ? msg.content[0].text : '', 'the SDK sums output_text from message items');
  checkUsage(r.usage);
  assert.equal(r.usage.output_tokens, 12);
});

test('reasoning effort none: no reasoning item, a message', async () => {
  const r = await client.responses.create(ask({ reasoning: { effort: 'none' } }));
  assert.deepEqual(r.output.map((i) => i.type), ['message']);
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.output[0].content[0].type, 'output_text');
  assert.equal(r.output_text, r.output[0].content[0].text);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
});

// The Responses stream grammar, and the final response equals what the events built.
function checkEvents(events) {
  events.forEach((e, i) => assert.equal(e.sequence_number, i, 'sequence numbers count from 0'));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[0].response.status, 'in_progress');
  assert.equal(events[1].type, 'response.in_progress');
  const last = events.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  const built = [];
  let open = -1;
  for (const e of events.slice(2, -1)) {
    if (e.type === 'response.output_item.added') {
      assert.equal(open, -1, 'items do not overlap');
      assert.equal(e.output_index, built.length);
      open = e.output_index;
      built.push({ ...e.item, text: '' });
      continue;
    }
    assert.equal(e.output_index, open, `${e.type} belongs to the open item`);
    const item = built[open];
    if (e.item_id !== undefined) assert.equal(e.item_id, item.id);
    if (e.type.endsWith('.delta')) {
      const want = { message: 'response.output_text.delta', reasoning: 'response.reasoning_text.delta', function_call: 'response.function_call_arguments.delta' }[item.type];
      assert.equal(e.type, want);
      item.text += e.delta;
    } else if (e.type === 'response.output_text.done' || e.type === 'response.reasoning_text.done') {
      assert.equal(e.text, item.text);
    } else if (e.type === 'response.function_call_arguments.done') {
      assert.equal(e.arguments, item.text);
    } else if (e.type === 'response.output_item.done') {
      open = -1;
      item.done = e.item;
    } else {
      assert.ok(['response.content_part.added', 'response.content_part.done'].includes(e.type), e.type);
    }
  }
  assert.equal(open, -1, 'every item is closed');
  assert.deepEqual(last.response.output, built.map((b) => b.done));
  return { built, response: last.response };
}

test('stream: created, items added / delta / done, completed; the final response matches', async () => {
  const events = [];
  for await (const e of await client.responses.create({ ...ask(), stream: true })) events.push(e);
  const { built, response } = checkEvents(events);
  assert.equal(built[0].type, 'reasoning');
  assert.equal(response.output[0].content[0].text, built[0].text);
  checkUsage(response.usage);

  // the SDK's own accumulator (responses.stream) rebuilds the same response from the events
  const s = client.responses.stream(ask({ reasoning: { effort: 'none' } }));
  let text = '';
  s.on('response.output_text.delta', (e) => { text += e.delta; });
  const final = await s.finalResponse();
  assert.equal(final.output_text, text);
  assert.equal(final.output[0].type, 'message');
});

test('previous_response_id continues a stored conversation from the session cache', async () => {
  const base = { model, max_output_tokens: 8, temperature: 0, reasoning: { effort: 'none' }, instructions: 'You are a tutor. '.repeat(8) };
  const r1 = await client.responses.create({ ...base, input: 'What is two plus two?' });
  assert.equal(r1.usage.input_tokens_details.cached_tokens, 0);
  const r2 = await client.responses.create({ ...base, input: 'And three plus three?', previous_response_id: r1.id });
  assert.equal(r2.previous_response_id, r1.id);
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens, 'the earlier turn is part of the prompt');
  const cached = r2.usage.input_tokens_details.cached_tokens;
  assert.ok(cached >= r1.usage.input_tokens - 12, `cached ${cached} of the previous ${r1.usage.input_tokens}`);
  assert.ok(r2.usage.input_tokens - cached < r2.usage.input_tokens / 2);

  const got = await client.responses.retrieve(r2.id);
  assert.equal(got.id, r2.id);
  assert.deepEqual(got.output, r2.output);

  const unstored = await client.responses.create({ ...base, input: 'Hi', store: false });
  assert.equal(unstored.store, false);
  await assert.rejects(client.responses.create({ ...base, input: 'More', previous_response_id: unstored.id }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
});

const weather = { type: 'function', name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

test('function calls: function_call and function_call_output items round trip', async () => {
  // a forced function is decoded under its parameters schema: a valid call even from the demo model
  const r = await client.responses.create(ask({ max_output_tokens: 64, tools: [weather], tool_choice: { type: 'function', name: 'get_weather' } }));
  const call = r.output.find((i) => i.type === 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /\S/);
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  assert.ok(!r.output.some((i) => i.type === 'reasoning'), 'a forced call closes the reasoning block first');
  const input = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { type: 'reasoning', id: 'rs_x', summary: [], content: [{ type: 'reasoning_text', text: 'I should call the tool.' }] },
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 C' },
  ];
  const r2 = await client.responses.create(ask({ input, tools: [weather] }));
  assert.ok(['completed', 'incomplete'].includes(r2.status));
  checkUsage(r2.usage);

  const events = [];
  for await (const e of await client.responses.create({ ...ask({ max_output_tokens: 64, tools: [weather], tool_choice: 'required' }), stream: true })) events.push(e);
  const { built } = checkEvents(events);
  const calls = built.filter((x) => x.type === 'function_call');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(typeof JSON.parse(calls[0].done.arguments).city, 'string');
});

test('text.format json_object constrains the message to a JSON object', async () => {
  const r = await client.responses.create(ask({ max_output_tokens: 60, reasoning: { effort: 'none' }, text: { format: { type: 'json_object' } } }));
  if (r.status === 'completed') assert.equal(typeof JSON.parse(r.output_text), 'object');
  else assert.ok(r.output_text.trimStart().startsWith('{'));
  assert.deepEqual(r.text.format, { type: 'json_object' });
});

test('bad input: a 400 naming the field', async () => {
  await assert.rejects(client.responses.create(ask({ input: [{ type: 'web_search_call', id: 'x' }] })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].type');
  await assert.rejects(client.responses.create(ask({ tools: [{ type: 'web_search' }] })),
    (e) => e instanceof OpenAI.BadRequestError && /hosted tool/.test(e.message));
  await assert.rejects(client.responses.create(ask({ previous_response_id: 'resp_missing' })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(client.responses.create({ model }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
});
