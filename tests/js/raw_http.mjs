// Raw HTTP for the hardening tests: requests with headers fetch() will not send (Host, Origin), plain
// sockets for pipelining and slow clients, and first-byte timing on fresh and reused connections.
import http from 'node:http';
import net from 'node:net';

// One request through node:http; resolves to { status, headers, body }.
export function request(url, { method = 'GET', headers = {}, body, agent } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method, headers, agent }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// A TCP connection to the server's port; resolves once connected.
export function connect(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: u.hostname, port: Number(u.port) }, () => resolve(s));
    s.on('error', reject);
  });
}

// Collects what the server sends until it closes the connection (or `ms` pass).
export function readAll(sock, ms) {
  return new Promise((resolve) => {
    let data = '';
    const done = (why) => { clearTimeout(t); resolve({ data, why }); };
    const t = setTimeout(() => done('timeout'), ms);
    sock.setEncoding('utf8');
    sock.on('data', (d) => { data += d; });
    sock.on('close', () => done('closed'));
    sock.on('error', () => done('error'));
  });
}

// Milliseconds from sending a streamed completion to its first body bytes, through `agent`.
export function firstEventMs(url, agent, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(url + '/v1/completions');
    const t0 = process.hrtime.bigint();
    let first = null;
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.on('data', () => { first ??= Number(process.hrtime.bigint() - t0) / 1e6; });
      res.on('end', () => resolve(first));
    });
    req.on('error', reject);
    req.end(body);
  });
}
