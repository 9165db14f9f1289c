// OpenAI's own JavaScript client (the npm package `openai`, pinned in
// tests/oracle) against a model served under several names
// (--served-model-name): models.list gives them all, in order; a chat and
// a stream under each name are answered, naming it.
//   node names-client.cjs MODULE_DIR HOST:PORT NAME...
'use strict';
const assert = require('node:assert/strict');
const [, , moduleDir, addr, ...names] = process.argv;
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });
const messages = [{ role: 'user', content: 'hello there' }];

async function main() {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), names);
  console.log('ok models.list', names.join(' '));
  for (const model of names) {
    const chat = await client.chat.completions.create({ model, messages, max_tokens: 2, temperature: 0 });
    assert.equal(chat.model, model);
    assert.equal(chat.choices[0].message.role, 'assistant');
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 3, temperature: 0, stream: true,
    });
    let chunks = 0;
    for await (const c of stream) {
      assert.equal(c.model, model);
      chunks++;
    }
    assert.ok(chunks >= 2);
    console.log('ok chat as', model);
  }
  await assert.rejects(
    client.chat.completions.create({ model: 'not-served', messages, max_tokens: 2 }),
    (e) => e.status === 404 && e.param === 'model');
  console.log('ok an unknown name is 404');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
