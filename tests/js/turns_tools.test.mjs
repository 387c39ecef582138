// Conversations and tool calls through the official `openai` client against a real `lily serve` (demo
// model, random weights: output is noise, so these check what the server does around it).
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

test('each turn of a conversation resumes from the previous one and prefills only its new tokens', async () => {
  // thinking off so each reply is content, which goes back into the history as the assistant message
  const base = { model, max_tokens: 10, temperature: 0, chat_template_kwargs: { enable_thinking: false } };
  const messages = [
    { role: 'system', content: 'You are a patient tutor who explains arithmetic step by step. '.repeat(6) },
    { role: 'user', content: 'What is two plus two?' },
  ];
  let prev = await client.chat.completions.create({ ...base, messages });
  assert.equal(prev.usage.prompt_tokens_details.cached_tokens, 0, 'first turn: nothing cached');
  for (const question of ['And three plus three?', 'Now multiply both answers.']) {
    const reply = prev.choices[0].message;
    assert.ok(reply.content.length > 0, 'a content reply to carry over');
    messages.push({ role: 'assistant', content: reply.content }, { role: 'user', content: question });
    const r = await client.chat.completions.create({ ...base, messages });
    const { prompt_tokens: total } = r.usage;
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    // the new turn's tokens: the previous reply and the new question, plus the previous turn's generation
    // prompt "<|im_start|>assistant\n<think>\n\n</think>\n\n" (11 tokens), re-rendered as history: the
    // cache resumes where that header began
    const HEADER = 11, added = total - prev.usage.prompt_tokens;
    assert.ok(cached >= prev.usage.prompt_tokens - HEADER, `cached ${cached} of the previous ${prev.usage.prompt_tokens}`);
    assert.ok(total - cached <= added + HEADER, `prefilled ${total - cached}, new ${added}`);
    assert.ok(total - cached < total / 3, `prefilled ${total - cached} of ${total}`);
    prev = r;
  }
});

const weather = { type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const clock = { type: 'function', function: { name: 'get_time', description: 'Time in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const toolArgs = (extra = {}) => ({
  model, max_tokens: 64, temperature: 0, tools: [clock, weather],
  tool_choice: { type: 'function', function: { name: 'get_weather' } },
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }], ...extra,
});

// A forced call (named tool_choice, or "required") is decoded under the tool's parameter schema: the reply
// opens "<tool_call>\n" and the body is the JSON form {"name": ..., "arguments": {...}} constrained so the
// arguments match `parameters` and close within max_tokens. So even the demo model's random weights make a
// valid call: finish_reason "tool_calls", or "length" when the budget cut a value short (still closed).
function checkCall(msg, finish) {
  assert.ok(['tool_calls', 'length'].includes(finish), finish);
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  const args = JSON.parse(msg.tool_calls[0].function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.equal(msg.content || '', '', 'no text besides the call');
}

test('named tool_choice, non-stream: the openai client sees a valid call', async (t) => {
  const r = await client.chat.completions.create(toolArgs());
  const msg = r.choices[0].message;
  checkCall(msg, r.choices[0].finish_reason);
  t.diagnostic(`named tool_choice non-stream: ${msg.tool_calls[0].function.arguments}, finish_reason ${r.choices[0].finish_reason}`);
  // the same request again is the same reply (greedy), tool-call ids aside
  const again = await client.chat.completions.create(toolArgs());
  assert.equal(again.choices[0].message.tool_calls[0].function.arguments, msg.tool_calls[0].function.arguments);
});

test('named tool_choice, stream: the openai client sees a call to that function', async (t) => {
  const stream = await client.chat.completions.create(toolArgs({ stream: true }));
  const callDeltas = [];
  let content = '', finish = null;
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    for (const tc of c.delta.tool_calls || []) callDeltas.push(tc);
    content += c.delta.content || '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(callDeltas.length >= 1, 'a tool_calls delta arrived');
  const first = callDeltas[0];
  assert.equal(first.index, 0);
  assert.match(first.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(first.type, 'function');
  assert.equal(first.function.name, 'get_weather');
  const args = callDeltas.map((d) => d.function.arguments || '').join('');
  checkCall({ content, tool_calls: [{ function: { name: first.function.name, arguments: args } }] }, finish);
  // the non-stream reply is the same call
  const whole = await client.chat.completions.create(toolArgs());
  assert.equal(whole.choices[0].message.tool_calls[0].function.arguments, args);
  t.diagnostic(`named tool_choice stream: finish_reason ${finish}`);

  // the SDK's stream helper assembles the same: a call to get_weather in the final message
  const final = await client.chat.completions.stream(toolArgs()).finalChatCompletion();
  const fm = final.choices[0].message;
  assert.equal(fm.tool_calls[0].function.name, 'get_weather');
  assert.equal(fm.tool_calls[0].function.arguments, args);
  assert.equal(final.choices[0].finish_reason, finish);
});

test('tool_choice "required" picks one of the tools, with arguments matching its schema', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create(toolArgs({ tool_choice: 'required', temperature: 1, seed }));
    const call = r.choices[0].message.tool_calls[0];
    assert.ok(['get_weather', 'get_time'].includes(call.function.name), call.function.name);
    assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
  }
});

test('a forced call with a tool schema the server cannot enforce is a 400 naming the keyword', async () => {
  const odd = { type: 'function', function: { name: 'lookup', parameters: { type: 'object',
    properties: { q: { type: 'string', pattern: '^[a-z]+$' } } } } };
  await assert.rejects(client.chat.completions.create(toolArgs({ tools: [odd], tool_choice: 'required' })),
    (e) => e.status === 400 && /'pattern'/.test(e.message));
  // not forced: the schema is only shown to the model, so it is accepted
  const r = await client.chat.completions.create(toolArgs({ tools: [odd], tool_choice: 'auto', max_tokens: 4 }));
  assert.equal(r.object, 'chat.completion');
});

test('tool_choice "none" hides the tools; a tool result turn is answered', async () => {
  const r = await client.chat.completions.create(toolArgs({ tool_choice: 'none' }));
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.ok(!(r.choices[0].message.content || '').startsWith('<tool_call>'));
  const next = await client.chat.completions.create(toolArgs({
    tool_choice: 'auto',
    messages: [
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18C, sunny' },
    ] }));
  assert.equal(next.choices[0].message.role, 'assistant');
  assert.ok(next.usage.prompt_tokens > r.usage.prompt_tokens, 'the call and its result are in the prompt');
});
