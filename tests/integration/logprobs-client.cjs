// OpenAI's own JavaScript client (the npm package `openai`) asking Ignis
// for log-probabilities (docs/adr/0053): chat whole and streamed, greedy
// and sampled. Each logprob <= 0, top lists sorted descending with exp
// summing to at most 1, the sampled token's logprob its top entry's where
// it is there, greedy's token the top one, and the stream's logprobs the
// whole answer's, bit for bit.
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

async function main() {
  await one(0, 5);
  await one(0.8, 20);
  await one(1, 0);
  // a refusal as the client raises it
  await assert.rejects(
    client.chat.completions.create({ model, messages, logprobs: true, top_logprobs: 21 }),
    (e) => e.status === 400 && /top_logprobs/.test(e.message));
  console.log('ok top_logprobs 21 refused');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
