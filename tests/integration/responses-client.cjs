// OpenAI's own JavaScript client (the npm package `openai`, pinned in
// tests/oracle) against Ignis's Responses API: a response whole, streamed
// through responses.create({stream: true}) and through the responses.stream
// helper (both must assemble the whole answer's output for the same seed),
// a tool round trip in the input, and errors as the client raises them.
// With synthetic weights the model writes no tool call: the stream of one
// (tests/unit/resp-tool.sse, which test_responses checks our writer makes
// byte for byte) is served to the client from here, and its stream helper
// must assemble the reasoning, message and function_call items.
//   node responses-client.cjs MODULE_DIR HOST:PORT MODEL SSE_FILE
'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const httpMod = require('node:http');
const [, , moduleDir, addr, model, sseFile] = process.argv;
const mod = require(moduleDir);
const OpenAI = mod.OpenAI || mod.default;
const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'unused', maxRetries: 0 });

const tools = [{
  type: 'function', name: 'get_weather', description: 'The weather of a city, now.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];
const base = {
  model, max_output_tokens: 24, temperature: 0.8, ignis: { seed: 11 }, store: false,
  instructions: 'be brief', input: 'weather in Paris?',
};
const trip = {
  ...base, tools,
  input: [
    { role: 'user', content: [{ type: 'input_text', text: 'weather in Paris?' }] },
    { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'Look it up.' }] },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '21C, sunny' },
  ],
};

// what a stream and a whole answer share: the items' types, ids and texts
function items(r) {
  return r.output.map((o) => ({
    type: o.type, id: o.id.replace(/ignis[0-9a-fx]+/, 'ID'),
    text: o.type === 'function_call' ? o.arguments
      : (o.content || []).map((c) => c.text).join(''),
  }));
}

async function main() {
  for (const req of [base, trip]) {
    const whole = await client.responses.create(req);
    assert.equal(whole.object, 'response');
    assert.match(whole.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(whole.status), whole.status);
    assert.equal(whole.store, false);
    assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 24);
    assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);
    assert.ok(whole.output.every((o) => ['reasoning', 'message'].includes(o.type)));
    const text = whole.output_text;
    assert.equal(typeof text, 'string');

    // the raw events, in order
    const raw = await client.responses.create({ ...req, stream: true });
    const types = [];
    let deltas = '';
    let last = null;
    for await (const ev of raw) {
      types.push(ev.type);
      assert.equal(ev.sequence_number, types.length - 1);
      if (ev.type === 'response.output_text.delta') deltas += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') last = ev.response;
    }
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(types.at(-1), whole.status === 'completed' ? 'response.completed' : 'response.incomplete');
    assert.equal(deltas, text);
    assert.deepEqual(items(last), items(whole));
    assert.equal(last.usage.output_tokens, whole.usage.output_tokens);

    // the helper's assembly
    const s = client.responses.stream(req);
    let helperText = '';
    s.on('response.output_text.delta', (e) => { helperText += e.delta; });
    const fin = await s.finalResponse();
    assert.deepEqual(items(fin), items(whole));
    assert.equal(helperText, text);
  }
  console.log('ok responses whole, streamed and through the stream helper, with a tool round trip');

  await assert.rejects(client.responses.create({ ...base, model: 'gpt-5' }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'model');
  await assert.rejects(client.responses.create({ ...base, previous_response_id: 'resp_x' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(client.responses.create({ ...base, tools, tool_choice: { type: 'function', name: 'rm' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice' &&
      /does not hold/.test(e.message));
  console.log('ok errors as the client raises them');

  // our writer's stream of a tool-calling answer, through the client
  const sse = fs.readFileSync(sseFile);
  const srv = httpMod.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(sse);
    });
  });
  await new Promise((ok) => srv.listen(0, '127.0.0.1', ok));
  try {
    const replay = new OpenAI({
      baseURL: `http://127.0.0.1:${srv.address().port}/v1`, apiKey: 'unused', maxRetries: 0,
    });
    const s = replay.responses.stream({ ...base, tools });
    const argDeltas = [];
    s.on('response.function_call_arguments.delta', (e) => argDeltas.push(e.snapshot));
    const fin = await s.finalResponse();
    assert.equal(fin.status, 'completed');
    assert.deepEqual(fin.output.map((o) => o.type), ['reasoning', 'message', 'function_call', 'function_call']);
    assert.equal(fin.output[0].content[0].text, 'I need the weather.');
    assert.equal(fin.output[1].content[0].text, 'Let me look. \u00e9t\u00e9');
    assert.equal(fin.output[2].name, 'get_weather');
    assert.equal(fin.output[2].call_id, 'call_ignisT_0');
    assert.deepEqual(JSON.parse(fin.output[2].arguments), { city: 'Paris', days: 2 });
    assert.equal(fin.output[3].arguments, '{}');
    assert.ok(argDeltas.length >= 1);
    assert.equal(fin.usage.total_tokens, 130);
  } finally {
    srv.close();
  }
  console.log('ok a streamed function_call answer, assembled by the client');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
