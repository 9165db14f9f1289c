// jinja-render.cjs - a chat template rendered by Hugging Face's Jinja engine
// (@huggingface/jinja, pinned in tests/oracle), the oracle of test_chat.c for
// the templates we render by their own rules (model/chat.h).
//   node jinja-render.cjs JINJA_MODULE TOKENIZER_CONFIG CASES.json
// CASES.json: an array of {messages, tools?, add_generation_prompt,
// enable_thinking?}; prints a JSON array of the rendered texts.
"use strict";
const fs = require("fs");
const [, , mod, cfgPath, casesPath] = process.argv;
const { Template } = require(mod);
const cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
const tmpl = new Template(cfg.chat_template);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map((c) => {
  const ctx = { messages: c.messages, add_generation_prompt: !!c.add_generation_prompt };
  if (c.tools) ctx.tools = c.tools;
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  return tmpl.render(ctx);
});
process.stdout.write(JSON.stringify(out));
