#!/usr/bin/env node
// Peak and settled resident memory of `lily serve --ctx 32768` (demo model) under 7 MB prompts that are
// tokenized in full and then refused as too long: 16 at once, then 100 more 4 at a time. Loopback only;
// stops the server at the end.   node scripts/prompt-memory-check.mjs build/lily
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
const bin = process.argv[2] || 'build/lily';
const proc = spawn(bin, ['serve', '--port', '0', '--ctx', '32768'], { stdio: ['ignore', 'pipe', 'ignore'] });
let out = '';
const url = await new Promise((r) => proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on (http:\/\/[^\s]+)/); if (m) r(m[1]); }));
const rss = () => Number(readFileSync(`/proc/${proc.pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m)[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const big = JSON.stringify({ max_tokens: 2, messages: [{ role: 'user', content: 'word '.repeat(1400000) }] });
let peak = 0;
const iv = setInterval(() => { peak = Math.max(peak, rss()); }, 20);
const send = async () => { const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: big }); const j = await r.json(); return r.status + ':' + (j.error?.code); };
const r0 = rss();
const t0 = Date.now();
let st = await Promise.all(Array.from({ length: 16 }, send));
await sleep(500);
const r1 = rss();
console.log(`start ${r0.toFixed(1)} MB; 16 at once: peak ${peak.toFixed(1)} MB, after ${r1.toFixed(1)} MB, ${Date.now() - t0} ms; ${[...new Set(st)]}`);
peak = 0;
for (let i = 0; i < 25; ++i) st = st.concat(await Promise.all(Array.from({ length: 4 }, send)));
await sleep(500);
console.log(`100 more, 4 at a time: peak ${peak.toFixed(1)} MB, after ${rss().toFixed(1)} MB (${(rss() - r1).toFixed(1)} MB more); ${[...new Set(st)]}`);
clearInterval(iv);
proc.kill('SIGTERM');
process.exit(0);
