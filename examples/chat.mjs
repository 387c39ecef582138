// A chat with `lily serve` through the official `openai` package, whole reply and streamed.
//   npm install                 (once, in this folder: the openai package)
//   node examples/chat.mjs      (server at http://127.0.0.1:8080; LILY_URL and LILY_API_KEY override)
// The reasoning arrives in `reasoning_content`, the answer in `content`; both are printed. On the demo model
// (random weights) the reply is noise and usually never leaves the reasoning, so `content` stays empty.
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: (process.env.LILY_URL ?? 'http://127.0.0.1:8080') + '/v1',
  apiKey: process.env.LILY_API_KEY ?? 'sekret',
  maxRetries: 0,
});
const [{ id: model }] = (await client.models.list()).data;  // the served model's name
console.log(`model: ${model}`);

const r = await client.chat.completions.create({
  model, max_tokens: 64, messages: [{ role: 'user', content: 'Name three prime numbers.' }],
});
const m = r.choices[0].message;
console.log(`reasoning: ${m.reasoning_content ?? ''}`);
console.log(`answer: ${m.content ?? ''}`);
console.log(`finish_reason: ${r.choices[0].finish_reason}, usage: ${JSON.stringify(r.usage)}`);

const stream = await client.chat.completions.create({
  model, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'And three more?' }],
});
let part = '';
for await (const chunk of stream) {
  const d = chunk.choices[0]?.delta ?? {};
  for (const [kind, text] of [['reasoning', d.reasoning_content], ['answer', d.content]]) {
    if (!text) continue;
    if (kind !== part) process.stdout.write(`${part ? '\n' : ''}streamed ${kind}: `);
    part = kind;
    process.stdout.write(text);
  }
}
process.stdout.write('\n');
