// The chat page at / in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core) against a
// real `lily serve` (demo model: the reply is noise, so this checks the page's machinery): it types a
// message, sees the streamed reply (reasoning collapsed, tok/s), stops a long reply, keeps the
// conversation across a reload, renders markdown, and takes a screenshot (LILY_SCREENSHOT_DIR, default the
// system's temp dir). Skipped when no Chromium is installed (CHROMIUM_BIN, default /usr/bin/chromium).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import { startServer, stopServer } from './helpers.mjs';

const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const have = existsSync(CHROMIUM);
let srv, browser, page;

before(async () => {
  if (!have) return;
  srv = await startServer([], 2048);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 760 });
  // the page must work offline: any request that is not to the server fails the test
  await page.setRequestInterception(true);
  page.on('request', (r) => {
    if (!r.url().startsWith(srv.url)) throw new Error('the page requested ' + r.url());
    r.continue();
  });
});

after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal(await stopServer(srv), 0);
});

async function lastAssistant() {
  return page.$$eval('.msg.assistant', (els) => {
    const el = els.at(-1);
    return el && {
      reasoning: el.querySelector('.rtext').textContent,
      reasoningOpen: el.querySelector('details.reasoning').open,
      content: el.querySelector('.content').textContent,
      tps: el.querySelector('.tps').textContent,
    };
  });
}

test('types a message, sees the streamed reply, takes a screenshot', { skip: !have && `no ${CHROMIUM}` }, async (t) => {
  const res = await page.goto(srv.url + '/', { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /text\/html/);
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('model: '));
  await page.click('#settings summary');
  await page.$eval('#max_tokens', (el) => { el.value = '24'; el.dispatchEvent(new Event('change')); });
  await page.type('#input', 'Hello lily, what is 2 + 2?');
  // count the page's DOM changes while the reply streams (mutation records, one or more per rendered delta, however
  // the network batches the events into reads): at least one per two of its 24 tokens means it was rendered piece
  // by piece (one render at the end makes a few)
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver((recs) => { window.__updates += recs.length; }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'done', { timeout: 120000 });
  const a = await lastAssistant();
  assert.ok(a.reasoning.length > 0, 'thinking is on: the demo model writes reasoning');
  assert.equal(a.reasoningOpen, false, 'the reasoning is collapsed');
  assert.match(a.tps, /^24 tokens · [0-9.]+ tok\/s$/);
  assert.ok(await page.evaluate(() => window.__updates) >= 12, 'the reply was streamed');
  const user = await page.$eval('.msg.user', (el) => el.textContent);
  assert.match(user, /Hello lily, what is 2 \+ 2\?/);
  const shot = path.join(process.env.LILY_SCREENSHOT_DIR || os.tmpdir(), 'lily-chat-page.png');
  await page.screenshot({ path: shot });
  t.diagnostic('screenshot: ' + shot);
});

test('the stop button ends a long reply; the conversation survives a reload', { skip: !have && `no ${CHROMIUM}` }, async () => {
  await page.$eval('#max_tokens', (el) => { el.value = '2000'; el.dispatchEvent(new Event('change')); });
  // greedy: the reply is the same every run (sampled, the demo model's noise sometimes ended it at once, before the
  // stop button could be pressed)
  await page.$eval('#temperature', (el) => { el.value = '0'; el.dispatchEvent(new Event('change')); });
  await page.type('#input', 'Tell me a long story.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 &&
    document.querySelectorAll('.msg.assistant')[1].querySelector('.rtext').textContent.length > 0);
  assert.equal(await page.$eval('#stop', (b) => b.disabled), false);
  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'done');
  assert.equal(await page.$eval('#send', (b) => b.disabled), false);
  const stopped = await lastAssistant();
  const tokens = Number(stopped.tps.split(' ')[0]);
  assert.ok(tokens > 0 && tokens < 2000, `stopped after ${tokens} tokens`);

  await page.reload({ waitUntil: 'load' });
  assert.equal(await page.$$eval('#convs li', (l) => l.length), 1);
  assert.equal(await page.$$eval('.msg', (l) => l.length), 4, 'both turns are back from localStorage');
  assert.equal(await page.$eval('#max_tokens', (el) => el.value), '2000', 'settings are kept too');
});

test('markdown and code blocks render; HTML in replies is escaped', { skip: !have && `no ${CHROMIUM}` }, async () => {
  await page.evaluate(() => {
    localStorage.setItem('lily.convs', JSON.stringify([{ id: 'md', title: 'md', messages: [
      { role: 'user', content: 'show me' },
      { role: 'assistant', reasoning: '', content: '# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n\n```js\nconst x = "<b>";\n```\n\n<img src=x onerror=alert(1)>' },
    ] }]));
    localStorage.setItem('lily.current', JSON.stringify('md'));
  });
  await page.reload({ waitUntil: 'load' });
  const html = await page.$eval('.msg.assistant .content', (el) => el.innerHTML);
  assert.match(html, /<h3>Title<\/h3>/);
  assert.match(html, /<strong>bold<\/strong>/);
  assert.match(html, /<code>code<\/code>/);
  assert.match(html, /<ul><li>one<\/li><li>two<\/li><\/ul>/);
  assert.match(html, /<pre><code data-lang="js">const x = "&lt;b&gt;";<\/code><\/pre>/);
  assert.equal(await page.$$eval('.msg.assistant img', (l) => l.length), 0, 'no raw HTML from the model');
  const hidden = await page.$eval('.msg.assistant details.reasoning', (el) => el.style.display);
  assert.equal(hidden, 'none', 'no reasoning block when there is no reasoning');
});
