// A 5-turn agent conversation (reasoning, tool calls, tool results) through the `openai` client: each
// turn resumes from the session cache and prefills only its new tokens (usage cached_tokens), the forced
// turns make valid calls under the tool schema, and parallel calls all go back as tool results.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { openaiClient, startServer, stopServer } from './helpers.mjs';

let srv, client, model;

before(async () => {
  srv = await startServer([], 4096);
  client = openaiClient(srv);
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(srv), 0);
});

const tools = [
  { type: 'function', function: { name: 'read_file', description: 'Read a file',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: false } } },
  { type: 'function', function: { name: 'run', description: 'Run a shell command',
    parameters: { type: 'object', properties: { cmd: { type: 'string' }, timeout: { type: 'integer' } }, required: ['cmd'], additionalProperties: false } } },
];

test('5 agent turns: each prefills only its new tokens', async (t) => {
  const messages = [
    { role: 'system', content: 'You are a coding agent. Use the tools to inspect the repository. '.repeat(4) },
    { role: 'user', content: 'Find out why the build fails.' },
  ];
  let prev = null;
  for (let turn = 1; turn <= 5; turn++) {
    // odd turns: the model may call (its reasoning is kept); even turns: a call is forced (schema-valid)
    const forced = turn % 2 === 0;
    const r = await client.chat.completions.create({ model, messages, tools, max_tokens: forced ? 40 : 8, temperature: 0,
      tool_choice: forced ? 'required' : 'auto' });
    const msg = r.choices[0].message;
    const u = r.usage;
    if (prev) {
      const cached = u.prompt_tokens_details.cached_tokens;
      // resumed at least where the previous turn's generation prompt ("<|im_start|>assistant\n<think>\n")
      // began, or further, from the snapshot after the previous reply when its re-rendering matches
      assert.ok(cached >= prev.prompt_tokens - 8 && cached <= u.prompt_tokens,
        `turn ${turn}: cached ${cached}, previous prompt ${prev.prompt_tokens}`);
      const added = u.prompt_tokens - prev.prompt_tokens;
      assert.ok(u.prompt_tokens - cached <= added + 8, `turn ${turn}: prefilled ${u.prompt_tokens - cached}, new ${added}`);
    } else {
      assert.equal(u.prompt_tokens_details.cached_tokens, 0);
    }
    t.diagnostic(`turn ${turn}: prompt ${u.prompt_tokens}, cached ${u.prompt_tokens_details.cached_tokens}, calls ${msg.tool_calls?.length ?? 0}`);
    let calls = msg.tool_calls;
    if (forced) {
      assert.equal(calls.length, 1, 'a forced turn makes one valid call');
      const args = JSON.parse(calls[0].function.arguments);
      assert.ok(calls[0].function.name === 'read_file' ? typeof args.path === 'string' : typeof args.cmd === 'string');
    } else {
      assert.ok(msg.reasoning_content.length > 0, 'thinking is on: the noise is reasoning');
      // the demo model's noise makes no call on its own: the agent acts as if it had asked for two at once
      calls ??= [
        { id: `call_t${turn}a`, type: 'function', function: { name: 'read_file', arguments: '{"path":"CMakeLists.txt"}' } },
        { id: `call_t${turn}b`, type: 'function', function: { name: 'run', arguments: '{"cmd":"ninja"}' } },
      ];
    }
    messages.push({ role: 'assistant', content: msg.content ?? '', reasoning_content: msg.reasoning_content, tool_calls: calls });
    for (const c of calls) messages.push({ role: 'tool', tool_call_id: c.id, content: `output of ${c.function.name} #${turn}` });
    prev = u;
  }
});
