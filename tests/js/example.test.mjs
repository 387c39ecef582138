// examples/chat.mjs (the README's Node example) runs as written against a real `lily serve` on the demo model
// and prints the model name, the reasoning and the streamed reply.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startServer, stopServer } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
// A copy beside this file, so that `import 'openai'` resolves to this folder's node_modules.
const copy = path.join(here, 'example-chat.copy.mjs');
let srv;

before(async () => {
  srv = await startServer(['--api-key', 'sekret']);
  copyFileSync(path.join(here, '../../examples/chat.mjs'), copy);
});

after(async () => {
  rmSync(copy, { force: true });
  assert.equal(await stopServer(srv), 0);
});

test('examples/chat.mjs prints the model, the reasoning and a streamed reply', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [copy], {
    env: { ...process.env, LILY_URL: srv.url, LILY_API_KEY: 'sekret' },
    timeout: 120000,
  });
  assert.match(stdout, /^model: tiny-model$/m);
  const m = stdout.match(/^reasoning: ([\s\S]*?)\nanswer: ([\s\S]*?)\nfinish_reason: (\w+), usage: \{"prompt_tokens":\d+/m);
  assert.ok(m, stdout);
  assert.ok(m[1].length + m[2].length > 0, 'the reply printed something:\n' + stdout);
  assert.match(stdout, /^streamed (reasoning|answer): /m);  // written with the first non-empty delta
});
