// Shared by the *.test.mjs files: start / stop a real `lily serve` on the demo model.
// LILY_BIN points at the lily binary (default ../../build/lily).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
export const LILY = process.env.LILY_BIN || path.join(here, '../../build/lily');
export const CTX = 512;

// Resolves to { proc, url, stderr() } once the server prints its listening line.
// `ctx`: the server's --ctx; `env`: extra environment variables for the server.
export function startServer(extra = [], ctx = CTX, env = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(LILY, ['serve', '--port', '0', '--ctx', String(ctx), ...extra], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error('lily serve did not start:\n' + err)), 120000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^\s]+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err });
      }
    });
    proc.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start ${LILY}: ${e.message}`));
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`lily serve exited with ${code}:\n${err}`));
    });
  });
}

// SIGTERM; resolves to the exit code (or signal name).
export function stopServer(s) {
  return new Promise((resolve) => {
    if (!s || s.proc.exitCode !== null) return resolve(s ? s.proc.exitCode : 0);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill('SIGTERM');
  });
}

// Resident set size of a process in bytes, from /proc/PID/status (VmRSS).
export function rssBytes(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

// One Prometheus sample value from GET /metrics (0 when absent).
export async function metric(url, name) {
  const t = await (await fetch(url + '/metrics')).text();
  return Number(t.match(new RegExp('^' + name + ' ([0-9.e+-]+)', 'm'))?.[1] || 0);
}

// The official client against a started server (no retries, so a refused request shows as such).
export function openaiClient(s, apiKey = 'unused') {
  return new OpenAI({ baseURL: s.url + '/v1', apiKey, maxRetries: 0 });
}
