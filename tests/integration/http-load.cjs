// Many streamed HTTP clients at once: N concurrent streams of K distinct
// requests (each stream's text must equal its request's reference text,
// computed by the caller through the nng door), and H more that hang up
// after their first event. Prints one line of figures; exits 1 on any
// stream that is incomplete, has no [DONE] or differs.
//   node http-load.cjs HOST:PORT MODEL N H MAX_TOKENS REF_FILE
// REF_FILE: JSON [{"seed": S, "text": T}, ...] (temperature 0.9, prompt
// "load test").
'use strict';
const fs = require('node:fs');
const [, , addr, model, nStr, hStr, maxStr, refFile] = process.argv;
const n = Number(nStr), h = Number(hStr), maxTokens = Number(maxStr);
const refs = JSON.parse(fs.readFileSync(refFile, 'utf8'));

function body(seed) {
  return JSON.stringify({
    model, prompt: 'load test', max_tokens: maxTokens, temperature: 0.9, seed, stream: true,
  });
}

// One stream: its text and whether it ended with [DONE].
async function stream(seed, hangUp) {
  const ctl = new AbortController();
  const res = await fetch(`http://${addr}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body(seed),
    signal: ctl.signal,
  });
  if (res.status !== 200) return { status: res.status, text: '', done: false };
  const dec = new TextDecoder();
  let buf = '', text = '', done = false;
  try {
    for await (const part of res.body) {
      buf += dec.decode(part, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const chunk = JSON.parse(data);
        if (!chunk.choices) throw new Error(`a stream event without choices: ${data}`);
        text += chunk.choices[0]?.text || '';
        if (hangUp) { ctl.abort(); return { status: 200, text, done: false, hung: true }; }
      }
    }
  } catch (e) {
    if (!hangUp) throw e;
  }
  return { status: 200, text, done };
}

async function main() {
  const t0 = Date.now();
  const jobs = [];
  for (let i = 0; i < n + h; i++) {
    const ref = refs[i % refs.length];
    jobs.push(stream(ref.seed, i >= n).then((r) => ({ ...r, i, ref })));
  }
  const out = await Promise.all(jobs);
  let bad = 0;
  for (const r of out) {
    if (r.i >= n) continue;
    if (r.status !== 200 || !r.done || r.text !== r.ref.text) {
      if (bad++ < 5)
        console.error(`stream ${r.i}: status ${r.status}, done ${r.done}, ` +
          `text ${JSON.stringify(r.text.slice(0, 40))} vs ${JSON.stringify(r.ref.text.slice(0, 40))}`);
    }
  }
  console.log(`${n} streams (${refs.length} distinct) and ${h} hang-ups in ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s: ${n - bad} complete and equal`);
  process.exit(bad ? 1 : 0);
}

main().catch((e) => { console.error('FAIL:', e); process.exit(1); });
