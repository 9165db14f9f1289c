// OpenAI's own JavaScript client (the npm package `openai`) asking Ignis
// for log-probabilities (docs/adr/0053): chat whole and streamed, greedy
// and sampled. Each logprob <= 0, top lists sorted descending with exp
// summing to at most 1, the sampled token's logprob its top entry's where
// it is there, greedy's token the top one, and the stream's logprobs the
// whole answer's, bit for bit. Then completions' echo (docs/adr/0063), as
// lm-evaluation-harness asks it: the prompt's entries first (the first
// null), max_tokens 1 and 0, a string and token ids, whole and streamed.
//   node logprobs-client.cjs MODULE_DIR HOST:PORT MODEL
'use strict';
const assert = require('node:assert/strict');
const [, , moduleDir, addr, model] = process.argv;
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });

const messages = [{ role: 'user', content: 'count to ten' }];

function check(content, top, greedy) {
  for (const t of content) {
    assert.ok(t.logprob <= 0, `logprob ${t.logprob}`);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(typeof t.token, 'string');
    assert.equal(t.top_logprobs.length, top);
    let sum = 0;
    for (let i = 0; i < t.top_logprobs.length; i++) {
      const e = t.top_logprobs[i];
      assert.ok(e.logprob <= 0);
      if (i) assert.ok(t.top_logprobs[i - 1].logprob >= e.logprob, 'top list not sorted');
      if (JSON.stringify(e.bytes) === JSON.stringify(t.bytes)) assert.equal(e.logprob, t.logprob);
      sum += Math.exp(e.logprob);
    }
    assert.ok(sum <= 1 + 1e-9, `top list mass ${sum}`);
    if (greedy && top) {
      assert.deepEqual(t.top_logprobs[0].bytes, t.bytes);
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
    }
  }
}

async function one(temperature, top) {
  const req = { model, messages, max_tokens: 20, temperature, seed: 5, logprobs: true, top_logprobs: top };
  const whole = await client.chat.completions.create(req);
  const content = whole.choices[0].logprobs.content;
  assert.equal(content.length, whole.usage.completion_tokens);
  check(content, top, temperature === 0);

  const streamed = [];
  let text = '';
  const stream = await client.chat.completions.create({ ...req, stream: true });
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.delta.content || '';
      if (c.logprobs && c.logprobs.content) streamed.push(...c.logprobs.content);
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.deepEqual(streamed, content);
  console.log(`ok chat logprobs temperature ${temperature} top_logprobs ${top}: ${content.length} tokens`);
}

async function echo() {
  const prompt = 'Once upon a time';
  const req = { model, prompt, max_tokens: 1, temperature: 0, logprobs: 2, echo: true };
  const whole = await client.completions.create(req);
  const c = whole.choices[0];
  const l = c.logprobs;
  assert.ok(c.text.startsWith(prompt), `echo text ${JSON.stringify(c.text)}`);
  assert.equal(l.tokens.length, whole.usage.prompt_tokens + 1);
  assert.equal(l.token_logprobs.length, l.tokens.length);
  assert.equal(l.token_logprobs[0], null);
  assert.equal(l.top_logprobs[0], null);
  assert.equal(l.text_offset[0], 0);
  for (let i = 1; i < l.tokens.length; i++) {
    assert.ok(l.token_logprobs[i] <= 0, `entry ${i}: ${l.token_logprobs[i]}`);
    assert.ok(Object.keys(l.top_logprobs[i]).length <= 2);
    assert.ok(l.text_offset[i] >= l.text_offset[i - 1]);
  }
  assert.equal(l.tokens.slice(0, whole.usage.prompt_tokens).join(''), prompt);

  // the same prompt as ids (this model's tokens are bytes), max_tokens 0:
  // the prompt alone, its entries the same
  const ids = [...prompt].map((ch) => ch.charCodeAt(0));
  const zero = await client.completions.create({ ...req, prompt: ids, max_tokens: 0 });
  assert.equal(zero.choices[0].text, prompt);
  assert.equal(zero.choices[0].finish_reason, 'length');
  assert.equal(zero.usage.completion_tokens, 0);
  assert.deepEqual(zero.choices[0].logprobs.token_logprobs, l.token_logprobs.slice(0, ids.length));
  assert.deepEqual(zero.choices[0].logprobs.top_logprobs, l.top_logprobs.slice(0, ids.length));

  // streamed: the prompt in the first chunk, then the rest, the same
  const stream = await client.completions.create({ ...req, stream: true });
  let text = '';
  const lps = [];
  let first = true;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (first) assert.equal(ch.text, prompt);
      first = false;
      text += ch.text;
      if (ch.logprobs) lps.push(...ch.logprobs.token_logprobs);
    }
  }
  assert.equal(text, c.text);
  assert.deepEqual(lps, l.token_logprobs);
  console.log(`ok completions echo: ${l.tokens.length} entries, max_tokens 0 and streamed alike`);
}

async function main() {
  await one(0, 5);
  await one(0.8, 20);
  await one(1, 0);
  // a refusal as the client raises it
  await assert.rejects(
    client.chat.completions.create({ model, messages, logprobs: true, top_logprobs: 21 }),
    (e) => e.status === 400 && /top_logprobs/.test(e.message));
  console.log('ok top_logprobs 21 refused');
  await echo();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
