// Constrained decoding (docs/adr/0057) through OpenAI's own JavaScript
// client (the npm package `openai`, pinned in tests/oracle), checked by a
// JSON Schema validator nobody here wrote (ajv, pinned beside it): a corpus
// of json_schema answers each valid against its schema; json_object; the
// client's zod helper parsing a structured answer and strict function
// arguments; forced tool calls (tool_choice "required" and named), each
// parsing, valid against its tool's parameters and round-tripping as the
// conversation's history; a forced call streamed and assembled by the
// client's stream helper, equal to the whole answer for the same seed; a
// schema we cannot compile refused as the client raises it. With synthetic
// weights the model chooses nothing by itself: every shape here is the
// grammar's doing.
//   node constrained-client.cjs OPENAI_MODULE_DIR HOST:PORT MODEL
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');
const [, , moduleDir, addr, model] = process.argv;
const mods = path.dirname(moduleDir);
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const { zodResponseFormat, zodFunction } = require(path.join(moduleDir, 'helpers', 'zod'));
const { z } = require(path.join(mods, 'zod'));
const Ajv = require(path.join(mods, 'ajv')).default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });
const ajv = new Ajv({ strict: false, allErrors: true });

// thinking off: a synthetic model would wander in its thinking block until
// max_tokens (the grammar leaves the reasoning free)
const base = {
  model,
  max_tokens: 400,
  temperature: 0.8,
  chat_template_kwargs: { enable_thinking: false },
  messages: [{ role: 'user', content: 'Answer in JSON.' }],
};

// Bounded schemas (strings, arrays), so that a model that picks at random
// within the grammar still ends within max_tokens.
const corpus = [
  { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false },
  {
    type: 'object',
    properties: {
      city: { type: 'string', maxLength: 10 },
      temp: { type: 'integer' },
      unit: { enum: ['C', 'F'] },
      note: { type: ['string', 'null'], maxLength: 6 },
    },
    required: ['city', 'temp', 'unit', 'note'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: {
      items: {
        type: 'array',
        minItems: 1,
        maxItems: 3,
        items: {
          type: 'object',
          properties: { id: { type: 'integer' }, price: { type: 'number' } },
          required: ['id', 'price'],
          additionalProperties: false,
        },
      },
      total: { type: 'number' },
    },
    required: ['items', 'total'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' },
      kind: { const: 'ticket' },
      level: { anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 4 }] },
    },
    required: ['code', 'kind', 'level'],
    additionalProperties: false,
  },
  {
    $defs: {
      point: {
        type: 'object',
        properties: { x: { type: 'number' }, y: { type: 'number' } },
        required: ['x', 'y'],
        additionalProperties: false,
      },
    },
    type: 'object',
    properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } },
    required: ['from', 'to'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 2, maxLength: 5 },
      tags: { type: 'array', items: { type: 'string', maxLength: 3 }, maxItems: 4 },
      extra: { type: 'object', properties: { n: { type: 'null' } }, required: ['n'], additionalProperties: false },
    },
    required: ['name', 'tags', 'extra'],
    additionalProperties: false,
  },
  {
    type: 'object',
    properties: {
      a: { type: 'integer' },
      b: { type: 'string', maxLength: 4 },
    },
    required: ['a'],
    additionalProperties: false,
  },
];

const weather = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer' } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const lsParams = {
  type: 'object',
  properties: { path: { enum: ['/', '/tmp', '/home'] }, all: { type: 'boolean' } },
  required: ['path'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather now.', parameters: weather } },
  { type: 'function', function: { name: 'ls', parameters: lsParams } },
];
const schemaOf = { get_weather: weather, ls: lsParams };

function valid(schema, value, what) {
  const check = ajv.compile(schema);
  if (!check(value))
    throw new Error(`${what}: ${JSON.stringify(value)} fails its schema: ${ajv.errorsText(check.errors)}`);
}

// every call of a message parses, names an offered tool and is valid
function checkCalls(msg, names, what) {
  assert.ok(Array.isArray(msg.tool_calls) && msg.tool_calls.length >= 1, `${what}: no tool call`);
  for (const c of msg.tool_calls) {
    assert.equal(c.type, 'function');
    assert.ok(names.includes(c.function.name), `${what}: called ${c.function.name}`);
    valid(schemaOf[c.function.name], JSON.parse(c.function.arguments), `${what} ${c.function.name}`);
  }
}

async function main() {
  let n = 0;
  for (const [i, schema] of corpus.entries()) {
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.create({
        ...base,
        seed,
        response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } },
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `schema ${i} seed ${seed}: ${c.finish_reason}: ${c.message.content}`);
      valid(schema, JSON.parse(c.message.content), `schema ${i} seed ${seed}`);
      n++;
    }
  }
  console.log(`ok json_schema: ${n} answers valid against their schemas`);

  const obj = await client.chat.completions.create({ ...base, seed: 5, max_tokens: 40, response_format: { type: 'json_object' } });
  // an object at the top, whole or cut by max_tokens
  assert.ok(obj.choices[0].message.content.startsWith('{'), obj.choices[0].message.content);
  if (obj.choices[0].finish_reason === 'stop')
    assert.equal(typeof JSON.parse(obj.choices[0].message.content), 'object');
  console.log('ok json_object');

  const Weather = z.object({
    city: z.string().max(8),
    temp: z.number().int(),
    unit: z.enum(['C', 'F']),
    note: z.string().max(5).nullable(),
  });
  const parsed = await client.chat.completions.parse({ ...base, seed: 7, response_format: zodResponseFormat(Weather, 'weather') });
  const p = parsed.choices[0].message.parsed;
  assert.ok(p, 'the zod helper parsed nothing');
  Weather.parse(p);
  console.log(`ok zod response_format: ${JSON.stringify(p)}`);

  for (const seed of [3, 4, 5]) {
    const r = await client.chat.completions.create({ ...base, seed, tools, tool_choice: 'required', parallel_tool_calls: false });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.tool_calls.length, 1);
    checkCalls(c.message, ['get_weather', 'ls'], `required seed ${seed}`);
  }
  const named = await client.chat.completions.create({
    ...base, seed: 6, tools, tool_choice: { type: 'function', function: { name: 'ls' } },
  });
  checkCalls(named.choices[0].message, ['ls'], 'named');
  assert.equal(named.choices[0].finish_reason, 'tool_calls');
  console.log('ok forced calls: required and named, each valid against its parameters');

  // the calls go back as history with their answers, as an agent sends them
  const history = [
    ...base.messages,
    named.choices[0].message,
    ...named.choices[0].message.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: 'a.txt b.txt' })),
  ];
  const back = await client.chat.completions.create({ ...base, seed: 6, max_tokens: 8, messages: history, tools });
  assert.equal(back.choices[0].message.role, 'assistant');
  assert.ok(back.usage.prompt_tokens > named.usage.prompt_tokens);
  console.log('ok round trip: the calls and their answers rendered back');

  const Args = z.object({ city: z.string().max(8), days: z.number().int() });
  const strict = await client.chat.completions.parse({
    ...base, seed: 8, tools: [zodFunction({ name: 'get_weather', parameters: Args })], tool_choice: 'required', parallel_tool_calls: false,
  });
  const call = strict.choices[0].message.tool_calls[0];
  Args.parse(call.function.parsed_arguments);
  console.log(`ok zod strict function: ${JSON.stringify(call.function.parsed_arguments)}`);

  const req = { ...base, seed: 9, tools, tool_choice: 'required', parallel_tool_calls: false };
  const whole = await client.chat.completions.create(req);
  const stream = client.chat.completions.stream(req);
  let deltas = 0;
  stream.on('tool_calls.function.arguments.delta', () => deltas++);
  const done = await stream.finalChatCompletion();
  const wc = whole.choices[0].message.tool_calls[0];
  const sc = done.choices[0].message.tool_calls[0];
  assert.equal(sc.function.name, wc.function.name);
  assert.equal(sc.function.arguments, wc.function.arguments);
  assert.equal(done.choices[0].finish_reason, 'tool_calls');
  assert.ok(deltas > 1, `the arguments came in ${deltas} pieces`);
  console.log(`ok streamed forced call: assembled from ${deltas} deltas, equal to the whole answer`);

  try {
    await client.chat.completions.create({
      ...base,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'email' } } },
    });
    assert.fail('a schema with format was taken');
  } catch (err) {
    assert.equal(err.status, 400, String(err));
    assert.equal(err.param, 'response_format');
    assert.match(err.message, /'format' is not supported/);
  }
  try {
    await client.chat.completions.create({ ...base, tools, tool_choice: { type: 'function', function: { name: 'rm' } } });
    assert.fail('an unknown tool was taken');
  } catch (err) {
    assert.equal(err.status, 400, String(err));
    assert.equal(err.param, 'tool_choice');
  }
  console.log('ok refusals: a schema we cannot compile, a tool not offered');
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
