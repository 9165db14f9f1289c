// Anthropic's own JavaScript client (the npm package `@anthropic-ai/sdk`,
// pinned in tests/oracle) against Ignis's Messages API: a message whole and
// streamed (the client's stream helper assembling the events must give the
// whole answer of the same seed), a tool round trip in the history
// (tool_use, tool_result and thinking blocks), count_tokens, and errors as
// the client raises them.
// With synthetic weights the model writes no tool call: the stream of one
// (tests/unit/anth-tool.sse, which test_anthropic checks our writer makes
// byte for byte) is served to the client from here, and its stream helper
// must assemble the thinking, text and tool_use blocks with parsed input.
//   node anthropic-client.cjs MODULE_DIR HOST:PORT MODEL TOOLS_JSON SSE_FILE
'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const httpMod = require('node:http');
const [, , moduleDir, addr, model, toolsJson, sseFile] = process.argv;
const mod = require(moduleDir);
const Anthropic = mod.Anthropic || mod.default;
const client = new Anthropic({ baseURL: `http://${addr}`, apiKey: 'unused', maxRetries: 0 });
const tools = JSON.parse(toolsJson);

const base = {
  model, max_tokens: 24, temperature: 0.8, ignis: { seed: 11 },
  system: [{ type: 'text', text: 'be brief' }],
  messages: [{ role: 'user', content: 'weather in Paris?' }],
};
const trip = {
  ...base, tools,
  messages: [
    { role: 'user', content: [{ type: 'text', text: 'weather in Paris?' }] },
    { role: 'assistant', content: [
      { type: 'thinking', thinking: 'I should look it up.', signature: '' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
    ] },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '21C, sunny' }] },
      { type: 'text', text: 'and tomorrow?' },
    ] },
  ],
};

// the parts of a message that a stream and a whole answer share: the
// input is the whole prompt, read from the cache or not
function essence(m) {
  return {
    id_prefix: m.id.slice(0, 4), type: m.type, role: m.role, model: m.model,
    content: m.content, stop_reason: m.stop_reason, stop_sequence: m.stop_sequence,
    input: m.usage.input_tokens + (m.usage.cache_read_input_tokens || 0),
    output: m.usage.output_tokens,
  };
}

async function main() {
  for (const req of [base, trip]) {
    const whole = await client.messages.create(req);
    assert.equal(whole.type, 'message');
    assert.equal(whole.role, 'assistant');
    assert.match(whole.id, /^msg_/);
    assert.ok(['end_turn', 'max_tokens'].includes(whole.stop_reason), whole.stop_reason);
    assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 24);
    for (const b of whole.content) {
      assert.ok(['text', 'thinking'].includes(b.type), JSON.stringify(b));
      if (b.type === 'thinking') assert.equal(typeof b.signature, 'string');
    }
    const n = await client.messages.countTokens({
      model, system: req.system, messages: req.messages, tools: req.tools,
    });
    assert.equal(n.input_tokens, whole.usage.input_tokens + whole.usage.cache_read_input_tokens);

    const s = client.messages.stream(req);
    let textEvents = '';
    s.on('text', (t) => { textEvents += t; });
    const fin = await s.finalMessage();
    assert.deepEqual(essence(fin), essence(whole));
    assert.equal(textEvents, whole.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));

    // the raw events, in Anthropic's order
    const raw = await client.messages.create({ ...req, stream: true });
    const kinds = [];
    for await (const ev of raw) kinds.push(ev.type);
    assert.equal(kinds[0], 'message_start');
    assert.deepEqual(kinds.slice(-2), ['message_delta', 'message_stop']);
    const starts = kinds.filter((k) => k === 'content_block_start').length;
    assert.equal(starts, kinds.filter((k) => k === 'content_block_stop').length);
    assert.equal(starts, whole.content.length);
  }
  console.log('ok messages whole, streamed, count_tokens, with and without a tool round trip');

  // a stop sequence from the answer itself ends it there, named
  const full = await client.messages.create({ ...base, max_tokens: 40 });
  const text = full.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const m = text.match(/[A-Za-z0-9]{2}/);
  if (m && full.content.length === 1) {
    const cut = await client.messages.create({ ...base, max_tokens: 40, stop_sequences: [m[0]] });
    assert.equal(cut.stop_reason, 'stop_sequence');
    assert.equal(cut.stop_sequence, m[0]);
    assert.equal(cut.content[0].text, text.slice(0, text.indexOf(m[0])));
    console.log(`ok stop_sequences ${JSON.stringify(m[0])}`);
  } else {
    console.log('ok stop_sequences (skipped: no text to stop at)');
  }

  await assert.rejects(client.messages.create({ ...base, model: 'claude-x' }),
    (e) => e instanceof Anthropic.NotFoundError && e.status === 404 &&
      e.error.type === 'error' && e.error.error.type === 'not_found_error');
  await assert.rejects(client.messages.create({ ...base, tools, tool_choice: { type: 'tool', name: 'rm' } }),
    (e) => e instanceof Anthropic.BadRequestError &&
      e.error.error.type === 'invalid_request_error' && /tool_choice/.test(e.message));
  await assert.rejects(client.messages.create({ ...base, top_p: 3 }),
    (e) => e instanceof Anthropic.BadRequestError && /top_p/.test(e.message));
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
    const replay = new Anthropic({
      baseURL: `http://127.0.0.1:${srv.address().port}`, apiKey: 'unused', maxRetries: 0,
    });
    const s = replay.messages.stream({ ...base, tools });
    const inputs = [];
    s.on('inputJson', (_, snapshot) => inputs.push(snapshot));
    const fin = await s.finalMessage();
    assert.equal(fin.stop_reason, 'tool_use');
    assert.deepEqual(fin.content.map((b) => b.type), ['thinking', 'text', 'tool_use', 'tool_use']);
    assert.equal(fin.content[0].thinking, 'I need the weather.');
    assert.equal(fin.content[0].signature, '');
    assert.equal(fin.content[1].text, 'Let me look. \u00e9t\u00e9');
    assert.deepEqual(fin.content[2], {
      type: 'tool_use', id: 'toolu_ignisT_0', name: 'get_weather', input: { city: 'Paris', days: 2 },
    });
    assert.deepEqual(fin.content[3].input, {});
    assert.deepEqual(inputs[0], { city: 'Paris', days: 2 });
    assert.equal(fin.usage.input_tokens + fin.usage.cache_read_input_tokens, 100);
    assert.equal(fin.usage.output_tokens, 30);
  } finally {
    srv.close();
  }
  console.log('ok a streamed tool_use answer, assembled by the client');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
