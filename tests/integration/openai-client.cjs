// OpenAI's own JavaScript client (the npm package `openai`, pinned in
// tests/oracle) against Ignis's HTTP API: the model list, chat and
// completions whole and streamed, usage, a stop string, and errors as the
// client raises them. The expected texts come from the nng door (http.sh
// computes them with ignis-generate --worker), so the two doors must agree.
//   node openai-client.cjs MODULE_DIR HOST:PORT MODEL CHAT_TEXT COMPLETION_TEXT FULL_TEXT
'use strict';
const assert = require('node:assert/strict');
const [, , moduleDir, addr, model, chatWant, complWant, fullText] = process.argv;
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });

const messages = [
  { role: 'system', content: 'be brief' },
  { role: 'user', content: 'hello there' },
];

async function main() {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
  console.log('ok models.list');

  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 20, temperature: 0, seed: 3,
  });
  assert.equal(chat.choices[0].message.content, chatWant);
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
  assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);
  // the server retains prompts (http.sh starts it with device retained
  // slots): this prompt was run just before, so all of it is reused
  assert.equal(chat.usage.prompt_tokens_details.cached_tokens, chat.usage.prompt_tokens);
  console.log('ok chat.completions.create');

  let text = '';
  let usage = null;
  let finish = null;
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 20, temperature: 0, seed: 3, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, chatWant);
  assert.ok(finish);
  assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
  console.log('ok chat.completions.create stream');

  const compl = await client.completions.create({
    model, prompt: 'Once upon', max_tokens: 24, temperature: 0, seed: 1,
  });
  assert.equal(compl.choices[0].text, complWant);
  let ctext = '';
  const cstream = await client.completions.create({
    model, prompt: 'Once upon', max_tokens: 24, temperature: 0, seed: 1, stream: true,
  });
  for await (const chunk of cstream) ctext += chunk.choices[0]?.text || '';
  assert.equal(ctext, complWant);
  console.log('ok completions.create, whole and streamed');

  // a stop string from the text itself: the answer ends just before it
  const m = fullText.match(/[A-Za-z0-9]{2}/) || fullText.match(/[A-Za-z0-9]/);
  assert.ok(m, 'the full text holds no ASCII letter or digit to stop at');
  const stopped = await client.completions.create({
    model, prompt: 'Once upon', max_tokens: 60, temperature: 0, seed: 1, stop: [m[0]],
  });
  assert.equal(stopped.choices[0].text, fullText.slice(0, fullText.indexOf(m[0])));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  console.log(`ok stop ${JSON.stringify(m[0])}`);

  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.param === 'model',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, temperature: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature' &&
      /from 0 to 2/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model, prompt: 'a', n: 17 }),
    (e) => e.status === 400 && e.param === 'n',
  );
  console.log('ok errors: NotFoundError, BadRequestError with their params');

  // n choices (docs/adr/0059): choice i is the request with n 1 and seed + i
  const nreq = { model, messages, max_tokens: 12, temperature: 0.9, seed: 40 };
  const several = await client.chat.completions.create({ ...nreq, n: 3 });
  assert.equal(several.choices.length, 3);
  let sum = 0;
  for (let i = 0; i < 3; i++) {
    const one = await client.chat.completions.create({ ...nreq, seed: 40 + i });
    const c = several.choices.find((x) => x.index === i);
    assert.ok(c, `no choice with index ${i}`);
    assert.equal(c.message.content, one.choices[0].message.content);
    assert.equal(c.finish_reason, one.choices[0].finish_reason);
    sum += one.usage.completion_tokens;
  }
  assert.equal(several.usage.completion_tokens, sum);
  const lone = await client.chat.completions.create({ ...nreq, seed: 40 });
  assert.equal(several.usage.prompt_tokens, lone.usage.prompt_tokens); // the prompt once
  const texts = ['', '', ''];
  const nstream = await client.chat.completions.create({ ...nreq, n: 3, stream: true });
  for await (const chunk of nstream)
    for (const c of chunk.choices) texts[c.index] += c.delta?.content || '';
  for (let i = 0; i < 3; i++) assert.equal(texts[i], several.choices[i].message.content);
  assert.ok(texts[0] !== texts[1] || texts[1] !== texts[2], 'the seeds gave one text');
  console.log('ok n 3, whole and streamed: each choice its seed + i');
}

main().then(
  () => console.log('openai client: all passed'),
  (e) => {
    console.error('FAIL:', e && e.stack ? e.stack : e);
    process.exit(1);
  },
);
