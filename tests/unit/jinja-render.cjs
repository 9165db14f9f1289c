// jinja-render.cjs - a chat template rendered by Hugging Face's Jinja engine
// (@huggingface/jinja, pinned in tests/oracle), the oracle of test_chat.c for
// the templates we render by their own rules (model/chat.h).
//   node jinja-render.cjs JINJA_MODULE TEMPLATE CASES.json
// TEMPLATE: a tokenizer_config.json (its chat_template) or a .jinja file
// (the template's text). CASES.json: an array of {messages, tools?,
// add_generation_prompt, enable_thinking?, object_arguments?}; prints a
// JSON array of the rendered texts. With object_arguments, each call's
// arguments string is parsed into an object first, as llama.cpp's and
// vLLM's servers do for the templates that walk the arguments' keys.
"use strict";
const fs = require("fs");
const [, , mod, tmplPath, casesPath] = process.argv;
const { Template } = require(mod);
const text = fs.readFileSync(tmplPath, "utf8");
const tmpl = new Template(tmplPath.endsWith(".jinja") ? text : JSON.parse(text).chat_template);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map((c) => {
  if (c.object_arguments)
    for (const m of c.messages)
      for (const tc of m.tool_calls || [])
        tc.function.arguments = JSON.parse(tc.function.arguments);
  const ctx = { messages: c.messages, add_generation_prompt: !!c.add_generation_prompt };
  if (c.tools) ctx.tools = c.tools;
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  return tmpl.render(ctx);
});
process.stdout.write(JSON.stringify(out));
