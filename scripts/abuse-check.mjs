#!/usr/bin/env node
// Load / abuse check of `lily serve` on loopback, bounded in count and time: starts the server on the demo
// model (or --model DIR), runs each attack, prints the figures docs/server.md quotes, stops the server.
//   node scripts/abuse-check.mjs [--lily build/lily] [--model DIR]
// Needs only Node (no npm packages). Exit status 1 when a check fails.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import { connect, firstEventMs, readAll, request } from '../tests/js/raw_http.mjs';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const opt = (k, d) => (argv.includes(k) ? argv[argv.indexOf(k) + 1] : d);
const LILY = opt('--lily', process.env.LILY_BIN || path.join(root, 'build/lily'));
const MODEL = opt('--model', null);
const deadline = setTimeout(() => { console.error('abuse-check: over 5 minutes, giving up'); process.exit(2); }, 300000);
let failures = 0;
const check = (ok, what) => { if (!ok) { failures++; console.log(`  FAIL ${what}`); } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rss = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m)[1]) * 1024;
const mb = (b) => (b / 1048576).toFixed(1);
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

function start(extra = []) {
  return new Promise((resolve, reject) => {
    const args = ['serve', '--host', '127.0.0.1', '--port', '0', '--ctx', '512', ...(MODEL ? ['--model', MODEL] : []), ...extra];
    const proc = spawn(LILY, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stderr.resume();
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^\s]+)/);
      if (m) resolve({ proc, url: m[1] });
    });
    proc.on('exit', (c) => reject(new Error(`lily serve exited (${c})`)));
  });
}
function stop(s) {
  return new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (c, sig) => resolve(c ?? sig));
    s.proc.kill('SIGTERM');
  });
}
const post = (url, body, headers = {}) => fetch(url + '/v1/chat/completions', {
  method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
const nest = (n) => '['.repeat(n) + ']'.repeat(n);
const chat = (x = {}) => JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...x });

const s = await start();
console.log(`abuse-check: ${LILY} serve at ${s.url}`);

// 1. Hostile bodies and headers.
{
  const u = new URL(s.url);
  const cases = [
    ['kwargs nested 30,000', () => post(s.url, `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":${nest(30000)}}}`), 400],
    ['tools parameters nested 100,000', () => post(s.url, `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"a":${nest(100000)}}}}]}`), 400],
    ['content nested 130,000', () => post(s.url, `{"messages":[{"role":"user","content":${nest(130000)}}]}`), 400],
    ['tool_call arguments nested 100,000', () => post(s.url, JSON.stringify({ messages: [{ role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: `{"a":${nest(100000)}}` } }] }] })), 400],
    ['temperature 1e400', () => post(s.url, '{"messages":[{"role":"user","content":"hi"}],"temperature":1e400}'), 400],
    ['text/plain body', () => post(s.url, chat(), { 'content-type': 'text/plain' }), 415],
    ['form body', () => post(s.url, 'a=b', { 'content-type': 'application/x-www-form-urlencoded' }), 415],
    ['gzip 50 MB of padding', () => post(s.url, zlib.gzipSync(`{"messages":[]${' '.repeat(50 << 20)}}`), { 'content-encoding': 'gzip' }), 413],
    ['Host attacker.example', () => request(s.url + '/v1/models', { headers: { Host: `attacker.example:${u.port}` } }), 403],
    ['Origin attacker.example', () => request(s.url + '/v1/models', { headers: { Origin: 'http://attacker.example' } }), 403],
  ];
  console.log('hostile requests (expected status / got):');
  for (const [name, send, want] of cases) {
    const r = await send();
    console.log(`  ${name}: ${want} / ${r.status}`);
    check(r.status === want, name);
  }
  check((await fetch(s.url + '/health')).status === 200, 'alive after hostile requests');
}

// 2. Memory: 100 rejected 7 MB prompts, 4 at a time, after a warm-up of 16.
{
  const big = JSON.stringify({ max_tokens: 2, messages: [{ role: 'user', content: 'word '.repeat(1400000) }] });
  const send = async () => { const r = await post(s.url, big); await r.text(); return r.status; };
  const r0 = rss(s.proc.pid);
  for (let i = 0; i < 4; ++i) await Promise.all(Array.from({ length: 4 }, send));
  await sleep(500);  // a request's memory is freed after its response went out
  const before = rss(s.proc.pid);
  let statuses = [];
  for (let i = 0; i < 25; ++i) statuses = statuses.concat(await Promise.all(Array.from({ length: 4 }, send)));
  await sleep(500);
  const after = rss(s.proc.pid);
  console.log(`memory: RSS ${mb(r0)} MB at start, ${mb(before)} MB after 16 warm-up 7 MB prompts, ${mb(after)} MB after 100 more (${mb(after - before)} MB); statuses ${[...new Set(statuses)]}`);
  check(after - before < 8 << 20, 'RSS within 8 MB after 100 rejected prompts');
  const gz = zlib.gzipSync(Buffer.concat([Buffer.from('{"messages":[]'), Buffer.alloc(256 << 20, 32), Buffer.from('}')]));
  const g0 = rss(s.proc.pid);
  const g = await post(s.url, gz, { 'content-encoding': 'gzip' });
  console.log(`gzip: ${(gz.length / 1024).toFixed(0)} KB inflating to 256 MB -> ${g.status}; RSS ${mb(rss(s.proc.pid) - g0)} MB more`);
  check(g.status === 413, 'gzip bomb refused');
}

// 3. Slow clients: 40 connections trickling a header line every second.
{
  const socks = await Promise.all(Array.from({ length: 40 }, () => connect(s.url)));
  const ends = socks.map((k) => readAll(k, 20000));
  const t0 = Date.now();
  for (const k of socks) k.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  const timer = setInterval(() => { for (const k of socks) if (!k.destroyed) k.write('X-Slow: 1\r\n'); }, 1000);
  const lat = [];
  for (let i = 0; i < 5; ++i) {
    const t = Date.now();
    const r = await post(s.url, chat());
    await r.text();
    check(r.status === 200, 'served during slowloris');
    lat.push(Date.now() - t);
    await sleep(200);
  }
  const res = await Promise.all(ends);
  clearInterval(timer);
  const cut = Date.now() - t0;
  const s408 = res.filter((x) => x.data.startsWith('HTTP/1.1 408')).length;
  console.log(`slowloris: 40 trickling connections; chat requests meanwhile took median ${median(lat)} ms; all 40 cut after ${(cut / 1000).toFixed(1)} s (${s408} answered 408)`);
  check(s408 === 40, 'all trickling connections answered 408');
  for (const k of socks) k.destroy();
}

// 4. Keep-alive first-event latency, fresh against reused connections (median of 20 each).
{
  const body = JSON.stringify({ prompt: 'Hello', max_tokens: 3, stream: true, temperature: 0 });
  const keep = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await firstEventMs(s.url, keep, body);
  const fresh = [], reused = [];
  for (let i = 0; i < 20; ++i) {
    fresh.push(await firstEventMs(s.url, new http.Agent({ keepAlive: false }), body));
    reused.push(await firstEventMs(s.url, keep, body));
  }
  keep.destroy();
  console.log(`first event: fresh connection median ${median(fresh).toFixed(2)} ms, reused keep-alive connection median ${median(reused).toFixed(2)} ms`);
  check(median(reused) - median(fresh) < 1, 'reused within 1 ms of fresh');
}

// 5. Pipelining and the connection cap.
{
  const k = await connect(s.url);
  const got = readAll(k, 5000);
  k.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(4) + 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
  const n = [...(await got).data.matchAll(/HTTP\/1\.1 200/g)].length;
  console.log(`pipelining: 5 requests in one write -> ${n} responses`);
  check(n === 5, 'pipelined requests all answered');
  const held = await Promise.all(Array.from({ length: 140 }, () => connect(s.url)));
  const answers = held.map((c) => readAll(c, 1500));
  for (const c of held) c.write('GET /health HTTP/1.1\r\n');
  const r = await Promise.all(answers);
  const refused = r.filter((x) => x.data.startsWith('HTTP/1.1 503')).length;
  console.log(`connection cap: 140 connections with unfinished requests -> ${refused} answered 503 at once (cap 128)`);
  check(refused === 12, '12 of 140 refused');
  for (const c of held) c.destroy();
  await sleep(500);
}

// 6. Shutdown with a slow client connected.
{
  const k = await connect(s.url);
  k.on('error', () => {});
  k.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  const timer = setInterval(() => k.write('X-Slow: 1\r\n'), 500);
  await sleep(300);
  const t = Date.now();
  const code = await stop(s);
  clearInterval(timer);
  k.destroy();
  console.log(`SIGTERM with a trickling client: exit status ${code} after ${Date.now() - t} ms`);
  check(code === 0 && Date.now() - t < 3000, 'prompt clean shutdown');
}

clearTimeout(deadline);
console.log(failures ? `abuse-check: ${failures} check(s) failed` : 'abuse-check: all checks passed');
process.exit(failures ? 1 : 0);
