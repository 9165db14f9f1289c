/*
 * constrain.h - the grammar a chat request asks for (docs/adr/0057):
 * response_format's JSON, tool_choice "required" or a named function, and
 * strict tools, written in the grammar engine's text form for the worker's
 * submit (its `grammar` and `grammar_trigger`), checked here first so that
 * a schema we cannot compile is a 400 naming the field.
 *
 * The grammars follow what the model's template makes it write:
 *   - tool calls in the Hermes form (Qwen3, Qwen3-Next):
 *       <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 *     ARGS following the tool's `parameters` schema (any JSON object when
 *     it has none), calls one after another separated by a newline;
 *   - tool calls in the XML form (Qwen3.5, Qwen3-Coder; docs/adr/0060):
 *       <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
 *       ...</function>\n</tool_call>
 *     the parameters in schema order, the required ones always, the others
 *     optional (any keys with raw values when the tool has no properties);
 *     each VALUE as outparse.c reads it back (op_value_json): a string's
 *     raw text, without "</parameter>" or "</function>" (bounded by its
 *     pattern or length and then without '<'; an enum's strings as they
 *     are), any other type the JSON its schema allows; a parameter of
 *     several types either form, its raw text kept from beginning as the
 *     JSON of a type taken only under conditions (docs/adr/0062);
 *   - a thinking block first, where the template thinks and thinking is
 *     on: `<think>` (unless the prompt opened it), any text without
 *     `</think>`, then `</think>`; the constraint applies after it, so that
 *     the reasoning is the model's own;
 *   - a little whitespace allowed before the answer (a model writes a
 *     blank line after `</think>`), and none after it: the end-of-
 *     generation token comes next.
 * tool_choice "auto" with strict tools is lazy: the answer is free text
 * until "<tool_call>", and what follows it must be well-formed calls.
 * With response_format and tools under "auto", the answer is either the
 * JSON document or calls.
 */
#ifndef IGNIS_SUPERVISOR_CONSTRAIN_H
#define IGNIS_SUPERVISOR_CONSTRAIN_H

#include <stdbool.h>

#include "oai.h"
#include "outparse.h"

struct cst_in {
	enum op_format format; /* the template's tool-call form */
	bool thinking;         /* the template thinks and the request did not turn it off */
	bool think_open;       /* the rendered prompt ends inside a thinking block */
};

/* The largest trigger written (GM_MAX_TRIGGER bounds it on the wire). */
#define CST_TRIGGER "<tool_call>"

/*
 * The grammar request `q` needs: 0 with *gbnf NULL when it needs none; 0
 * with *gbnf (malloc'd text, root rule "root") and *trigger ("" when the
 * grammar applies from the first token, else CST_TRIGGER); -1 with *e
 * filled (400 naming response_format, tools or tool_choice, saying what is
 * supported; 500 when out of memory).
 */
int cst_grammar(const struct oai_req *q, const struct cst_in *in, char **gbnf, const char **trigger,
                struct oai_err *e);

/* True when the rendered prompt text[0..len) ends inside a thinking block:
 * its last "<think>" comes after its last "</think>". */
bool cst_think_open(const char *text, size_t len);

#endif
