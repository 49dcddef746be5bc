// openai_sdk.test.mjs — the official OpenAI Node SDK against a real `dyad serve`:
// completions, chat, streaming (both APIs) and n > 1. Run by ctest as
//   node --test tests/node/openai_sdk.test.mjs   (DYAD_BIN names the dyad binary)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const DYAD = process.env.DYAD_BIN;
let server, client;

before(async () => {
  assert.ok(DYAD, 'set DYAD_BIN to the dyad binary');
  server = spawn(DYAD, ['serve', '--port', '0', '--api-key', 'sdk-key'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    let err = '';
    server.stderr.on('data', (d) => {
      err += d;
      const m = /http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`dyad serve exited (${code}): ${err}`)));
  });
  client = new OpenAI({ apiKey: 'sdk-key', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
});

after(async () => {
  const done = new Promise((resolve) => server.on('exit', resolve));
  server.kill('SIGTERM');
  assert.equal(await done, 0);
});

test('models', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, 'stories260K');
});

test('completions', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  assert.match(r.choices[0].text, /^, there was a little girl/);
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('chat', async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', max_tokens: 10, temperature: 0,
    messages: [{ role: 'user', content: 'Tell me a story.' }],
  });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
});

test('streaming completions and chat', async () => {
  let text = '', chunks = 0, usage = null;
  const s = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  });
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    if (c.choices.length) { text += c.choices[0].text; chunks++; }
  }
  assert.ok(chunks >= 10, `only ${chunks} chunks`);
  assert.match(text, /^, there was a little girl/);
  assert.equal(usage.completion_tokens, 16);

  let content = '';
  const cs = await client.chat.completions.create({
    model: 'stories260K', max_tokens: 8, stream: true,
    messages: [{ role: 'user', content: 'Hi' }],
  });
  for await (const c of cs) content += c.choices[0]?.delta?.content ?? '';
  assert.ok(content.length > 0);
});

test('n samples', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, n: 4, temperature: 1, seed: 3,
  });
  assert.equal(r.choices.length, 4);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.ok(new Set(r.choices.map((c) => c.text)).size > 1);
});

test('errors surface as SDK errors', async () => {
  await assert.rejects(
    client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 }),
    (e) => e.status === 404);
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: client.baseURL, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});
