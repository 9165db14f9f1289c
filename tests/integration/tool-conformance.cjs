// tool-conformance.cjs - one template family's row of the tool-call
// conformance table (tool-conformance.sh): the same cases for every
// family, through OpenAI's own client (the npm package `openai`, pinned in
// tests/oracle), each call checked by ajv against its tool's schema. Prints
// a line per case ("family  case  ok" or "FAIL: why") and exits 1 if any
// failed.
//   node tool-conformance.cjs OPENAI_MODULE HOST:PORT FAMILY JINJA_MODULE
//        TEMPLATE JINJA_RENDER IGNIS_VOCAB MODEL_FILE
'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const [, , moduleDir, addr, family, jinjaMod, tmpl, render, vocab, modelFile] = process.argv;
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const Ajv = require(path.join(path.dirname(moduleDir), 'ajv')).default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });
const ajv = new Ajv({ strict: false, allErrors: true });
// the tokens each case's answers took, for its row
let tokens = 0;
const create = async (req) => {
  const res = await client.chat.completions.create(req);
  tokens += res.usage?.completion_tokens ?? 0;
  return res;
};
const xml = tmpl.endsWith('.jinja'); // the XML form's templates are .jinja files here
// a template that thinks is asked not to (Qwen3-Coder's has no switch)
const thinks = fs.readFileSync(tmpl, 'utf8').includes('enable_thinking');

// Strings bounded, so that a model picking at random within the grammar
// ends a call well within max_tokens.
const schemas = {
  get_weather: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer' } },
    required: ['city', 'days'],
    additionalProperties: false,
  },
  ls: {
    type: 'object',
    properties: { path: { enum: ['/', '/tmp'] } },
    required: ['path'],
    additionalProperties: false,
  },
  search: {
    type: 'object',
    properties: {
      where: {
        type: 'object',
        properties: {
          lat: { type: 'integer' },
          tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
        },
        required: ['lat', 'tags'],
        additionalProperties: false,
      },
      ids: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 2 },
    },
    required: ['where', 'ids'],
    additionalProperties: false,
  },
  note: {
    type: 'object',
    properties: {
      text: { type: ['string', 'null'], maxLength: 6 },
      level: { anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 4 }] },
      pick: { anyOf: [{ enum: ['x', 'y'] }, { type: 'array', items: { type: 'integer' }, maxItems: 2 }] },
    },
    required: ['text', 'level', 'pick'],
    additionalProperties: false,
  },
};
const tool = (name) => ({ type: 'function', function: { name, parameters: schemas[name] } });
const named = (name) => ({ type: 'function', function: { name } });
// the prompt is bytes (the tiny model's vocabulary) and its prefill what
// a case costs most: the calls' cases share one short list (and so one
// prompt, whose pages the server reuses), the others have their own
const all = ['get_weather', 'ls'];
const tools = all.map(tool);

// thinking off: a synthetic model would wander in its thinking block until
// max_tokens (the grammar leaves the reasoning free)
const base = {
  model: family,
  max_tokens: 300,
  temperature: 1,
  seed: 7,
  ...(thinks ? { chat_template_kwargs: { enable_thinking: false } } : {}),
  parallel_tool_calls: false,
  messages: [{ role: 'user', content: 'Use a tool.' }],
  tools,
};

// every call of an answer: an offered tool, valid against its schema
function checkCalls(res, names, what) {
  const c = res.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', `${what}: finish ${c.finish_reason}`);
  assert.ok(c.message.tool_calls?.length >= 1, `${what}: no tool call`);
  for (const tc of c.message.tool_calls) {
    assert.equal(tc.type, 'function');
    assert.ok(names.includes(tc.function.name), `${what}: called ${tc.function.name}`);
    const args = JSON.parse(tc.function.arguments);
    if (process.env.IGNIS_TEST_VERBOSE)
      console.log(`   ${what}: ${tc.function.name} ${tc.function.arguments}`);
    const check = ajv.compile(schemas[tc.function.name]);
    if (!check(args))
      throw new Error(`${what}: ${tc.function.arguments} fails ${tc.function.name}'s schema: ${ajv.errorsText(check.errors)}`);
  }
  return c.message.tool_calls;
}

// the token count of a conversation as the template's Jinja text renders
// it (the generation prompt on), in the model file's vocabulary
function jinjaTokens(req) {
  const file = path.join(os.tmpdir(), `ignis-conformance-${process.pid}.json`);
  const messages = req.messages.map((m) => ({ ...m, content: m.content ?? '' }));
  fs.writeFileSync(file, JSON.stringify([{ messages, tools: req.tools, add_generation_prompt: true,
    ...(thinks ? { enable_thinking: false } : {}), object_arguments: xml }]));
  try {
    const text = JSON.parse(execFileSync('node', [render, jinjaMod, tmpl, file]))[0];
    const ids = execFileSync(vocab, ['encode', modelFile, '--parse-special'], { input: text });
    return String(ids).trim().split(/\s+/).length;
  } finally {
    fs.unlinkSync(file);
  }
}

const cases = [
  ['required call', async (s) => {
    const res = await create({ ...base, tool_choice: 'required' });
    assert.equal(checkCalls(res, all, 'required').length, 1, 'parallel_tool_calls false: one call');
  }],
  ['named call', async (s) => {
    const req = { ...base, tool_choice: named('get_weather') };
    const res = await create(req);
    s.named = { req, calls: checkCalls(res, ['get_weather'], 'named') };
  }],
  ['two parallel calls', async () => {
    // the grammar allows more calls after the first; the model (random)
    // stops or goes on: the first seed of a few that goes on and ends
    // (one that runs to max_tokens is passed over)
    for (let seed = 1; seed <= 8; seed++) {
      const res = await create({ ...base, seed, max_tokens: 260,
        parallel_tool_calls: true, tool_choice: named('ls') });
      if (res.choices[0].finish_reason === 'length')
        continue;
      const calls = checkCalls(res, ['ls'], `parallel, seed ${seed}`);
      if (calls.length >= 2) {
        assert.equal(new Set(calls.map((c) => c.id)).size, calls.length, 'the calls\' ids are not apart');
        return;
      }
    }
    throw new Error('no seed of 8 gave two calls');
  }],
  ['nested object/array args', async () => {
    const res = await create({ ...base, tools: [tool('search')], tool_choice: named('search') });
    const args = JSON.parse(checkCalls(res, ['search'], 'nested')[0].function.arguments);
    assert.ok(Array.isArray(args.where.tags) && Array.isArray(args.ids), 'nested: not an object with arrays');
  }],
  ['union-typed args', async () => {
    for (const seed of [1, 2]) {
      const res = await create({ ...base, seed, tools: [tool('note')], tool_choice: named('note') });
      checkCalls(res, ['note'], `union, seed ${seed}`);
    }
  }],
  ['streamed call', async (s) => {
    const stream = client.chat.completions.stream({ ...s.named.req, stream: true });
    const done = await stream.finalChatCompletion();
    const got = checkCalls(done, ['get_weather'], 'streamed').map((c) => [c.function.name, c.function.arguments]);
    assert.deepEqual(got, s.named.calls.map((c) => [c.function.name, c.function.arguments]), 'streamed: differs from the whole answer');
  }],
  ['tool result, next turn', async (s) => {
    const req = { ...base, max_tokens: 8, messages: [
      ...base.messages,
      { role: 'assistant', content: null, tool_calls: s.named.calls },
      { role: 'tool', tool_call_id: s.named.calls[0].id, content: '21C, sunny' },
    ] };
    const res = await create(req);
    assert.equal(res.choices[0].message.role, 'assistant');
    const want = jinjaTokens(req);
    assert.equal(res.usage.prompt_tokens, want, `the prompt is ${res.usage.prompt_tokens} tokens, the template's ${want}`);
  }],
];

(async () => {
  const state = {};
  let bad = 0;
  for (const [name, run] of cases) {
    let row;
    const t0 = Date.now();
    tokens = 0;
    try {
      await run(state);
      row = `ok (${tokens ? `${tokens} tokens, ` : ''}${((Date.now() - t0) / 1000).toFixed(1)} s)`;
    } catch (e) {
      bad++;
      row = `FAIL: ${String(e.message || e).split('\n')[0]}`;
    }
    console.log(`${family.padEnd(12)} ${name.padEnd(26)} ${row}`);
  }
  process.exit(bad ? 1 : 0);
})();
