// openai_sdk.test.mjs — the official OpenAI Node SDK against a real `dyad serve`:
// completions, chat, streaming (both APIs), n > 1, structured outputs (parse, streamed
// json_schema, a bad schema) and tool calls (a forced call, parse's parsed_arguments, a round
// trip). Run by ctest as
//   node --test tests/node/openai_sdk.test.mjs   (DYAD_BIN names the dyad binary)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import { makeParseableResponseFormat } from 'openai/lib/parser';

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

// Structured outputs: a plain JSON Schema (no zod), checked field by field.
const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { type: 'string', enum: ['cat', 'dog', 'fish'] }, maxItems: 3 },
  },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};
const personFormat = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: PERSON } };

function assertPerson(p) {
  assert.deepEqual(Object.keys(p).sort(), ['age', 'name', 'pets']);
  assert.equal(typeof p.name, 'string');
  assert.ok(p.name.length >= 1 && [...p.name].length <= 12, p.name);
  assert.ok(Number.isInteger(p.age) && p.age >= 0 && p.age <= 120, String(p.age));
  assert.ok(Array.isArray(p.pets) && p.pets.length <= 3);
  for (const pet of p.pets) assert.ok(['cat', 'dog', 'fish'].includes(pet), pet);
}

test('structured output: beta.chat.completions.parse with a json_schema', async () => {
  const r = await client.beta.chat.completions.parse({
    model: 'stories260K', temperature: 1, seed: 7, n: 2,
    messages: [{ role: 'user', content: 'Describe a person.' }],
    response_format: personFormat,
  });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop');
    assert.deepEqual(c.message.parsed, JSON.parse(c.message.content));
    assertPerson(c.message.parsed);
  }
});

// The SDK parses a stream only for a response format it can parse itself (what zod's helper
// makes); the same helper with JSON.parse needs no zod.
test('structured output: a streamed json_schema request', async () => {
  const stream = client.beta.chat.completions.stream({
    model: 'stories260K', temperature: 0,
    messages: [{ role: 'user', content: 'Describe a person.' }],
    response_format: makeParseableResponseFormat(personFormat, (text) => JSON.parse(text)),
  });
  let deltas = 0;
  stream.on('content.delta', () => { deltas++; });
  const done = await stream.finalChatCompletion();
  assert.ok(deltas > 1, `only ${deltas} deltas`);
  assert.equal(done.choices[0].finish_reason, 'stop');
  assertPerson(done.choices[0].message.parsed);
  // the same through the plain streaming API
  let content = '';
  const cs = await client.chat.completions.create({
    model: 'stories260K', temperature: 0, stream: true,
    messages: [{ role: 'user', content: 'Describe a person.' }],
    response_format: personFormat,
  });
  for await (const c of cs) content += c.choices[0]?.delta?.content ?? '';
  assert.equal(content, done.choices[0].message.content);
});

test('structured output: a bad schema is a 400 naming the keyword', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'bad name', schema: PERSON } },
    }),
    (e) => e.status === 400 && e.param === 'response_format.json_schema.name');
});

// Tool calls. Small schemas: the bundled model has 512 tokens of context and the tools are
// part of the prompt.
const ALARM = {
  type: 'object',
  properties: { hour: { type: 'integer', minimum: 0, maximum: 23 }, loud: { type: 'boolean' } },
  required: ['hour', 'loud'],
  additionalProperties: false,
};
const alarmTool = { type: 'function', function: { name: 'alarm', parameters: ALARM, strict: true } };

function assertAlarm(a) {
  assert.deepEqual(Object.keys(a).sort(), ['hour', 'loud']);
  assert.ok(Number.isInteger(a.hour) && a.hour >= 0 && a.hour <= 23, String(a.hour));
  assert.equal(typeof a.loud, 'boolean');
}

test('tools: a forced call with chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', seed: 4, n: 2, temperature: 1,
    messages: [{ role: 'user', content: 'Wake me at seven.' }],
    tools: [alarmTool], tool_choice: { type: 'function', function: { name: 'alarm' } },
  });
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.function.name, 'alarm');
    assertAlarm(JSON.parse(call.function.arguments));
  }
});

test('tools: beta.chat.completions.parse gives parsed_arguments for a strict function', async () => {
  const r = await client.beta.chat.completions.parse({
    model: 'stories260K', seed: 6, temperature: 1,
    messages: [{ role: 'user', content: 'An alarm, please.' }],
    tools: [alarmTool], tool_choice: 'required', parallel_tool_calls: false,
  });
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(call.function.parsed_arguments, JSON.parse(call.function.arguments));
  assertAlarm(call.function.parsed_arguments);
});

test('tools: a round trip (the call, the tool result, the answer)', async () => {
  const messages = [{ role: 'user', content: 'Wake me.' }];
  const first = await client.chat.completions.create({
    model: 'stories260K', seed: 8, messages, tools: [alarmTool], tool_choice: 'required',
    parallel_tool_calls: false,
  });
  const asked = first.choices[0].message;
  assert.equal(asked.tool_calls.length, 1);
  messages.push(asked, { role: 'tool', tool_call_id: asked.tool_calls[0].id, content: 'Set.' });
  const second = await client.chat.completions.create({
    model: 'stories260K', seed: 8, messages, tools: [alarmTool], tool_choice: 'none', max_tokens: 20,
  });
  const c = second.choices[0];
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.ok(c.message.content.length > 0);
  assert.equal(c.message.tool_calls, undefined);
  // a tool message without its call id is refused, naming the field
  await assert.rejects(
    client.chat.completions.create({
      model: 'stories260K', tools: [alarmTool],
      messages: [...messages.slice(0, 2), { role: 'tool', content: 'Set.' }],
    }),
    (e) => e.status === 400 && e.param === 'messages[2].tool_call_id');
});
