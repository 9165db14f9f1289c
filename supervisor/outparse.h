/*
 * outparse.h - a model's generated text, as it streams, parsed into what an
 * API returns apart (issue 30): reasoning (`<think>` ... `</think>`),
 * content, and tool calls in the Qwen family's two formats:
 *
 *   Hermes (Qwen3, Qwen3-Next): <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   XML (Qwen3.5, Qwen3-Coder): <tool_call>\n<function=N>\n<parameter=K>\nVALUE\n</parameter>
 *                               ...</function>\n</tool_call>
 *
 * In the XML form a value is raw text: a string as it is (several lines
 * allowed), anything else JSON text; which it is comes from the tool's JSON
 * schema (its `parameters`), so a parameter typed integer, number, boolean,
 * null, object or array whose text parses as such JSON is passed as that
 * JSON, and every other value as a JSON string. The format is the model's
 * own, read from its chat template (op_format_of_template), never a flag.
 *
 * Streaming. op_feed takes the text in any pieces (a token's text, a byte
 * at a time) and calls back with events as soon as they are certain; the
 * events' concatenation does not depend on how the text was cut. Text that
 * may be the start of a marker is held back until it is known not to be,
 * and only then (a literal "<tool_call>" in prose that is not followed by a
 * call is content again: a parser never stalls on it); bytes of an
 * unfinished UTF-8 sequence are held with it, so every event's text is
 * whole characters. A call's arguments stream as JSON text fragments whose
 * concatenation is the arguments' JSON object (OpenAI's streamed
 * `function.arguments`); its name comes once, before them.
 *
 * What is lenient, as models are: a call opened inside the thinking block
 * ends the thinking (Qwen3.5 does this); a missing `</tool_call>` at the
 * end of the text; whitespace around markers. What is not: a call whose
 * name or arguments cannot be read before anything of it was sent comes
 * back as content; one that breaks after its name was sent ends there,
 * counted in op.bad_calls (the arguments sent so far stay sent: the caller
 * says so to the client).
 */
#ifndef IGNIS_SUPERVISOR_OUTPARSE_H
#define IGNIS_SUPERVISOR_OUTPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum op_format {
	OP_PLAIN = 0,  /* the template has no tool calls: none are parsed */
	OP_HERMES = 1, /* JSON in <tool_call> */
	OP_QWEN_XML = 2,
};

/* A tool the request offered: its name and the JSON schema of its
 * parameters (an object schema; NULL: every value a string). Borrowed. */
struct op_tool {
	const char *name;
	const json_t *params;
};

struct op_opts {
	enum op_format format;
	/* tool calls are parsed (tools were given and tool_choice is not
	 * "none"); otherwise "<tool_call>" is content like any text */
	bool calls;
	/* reasoning is parsed: a `<think>` at the start of the text (after
	 * whitespace) opens it, `</think>` ends it */
	bool thinking;
	/* the prompt already opened the thinking block (its rendering ended in
	 * `<think>`, as Qwen3.5's template leaves it): the text starts inside */
	bool think_open;
	const struct op_tool *tools;
	size_t n_tools;
};

enum op_ev_kind {
	OP_REASONING = 1, /* text of the thinking block */
	OP_CONTENT,       /* text of the answer */
	OP_CALL_BEGIN,    /* a tool call: `index` from 0, its name in text */
	OP_CALL_ARGS,     /* a fragment of call `index`'s arguments (JSON text) */
	OP_CALL_END,      /* call `index` is complete */
};

struct op_ev {
	enum op_ev_kind kind;
	uint32_t index;
	const char *text;
	size_t len;
};

/* Takes an event; nonzero stops the parse (op_feed returns it). */
typedef int (*op_emit_fn)(void *ctx, const struct op_ev *ev);

enum op_state {
	OPS_START,  /* nothing certain yet: a <think> may come */
	OPS_THINK,  /* in the thinking block */
	OPS_TEXT,   /* content */
	OPS_OPEN,   /* after <tool_call>: what follows decides */
	OPS_HERMES, /* in a Hermes call's JSON object */
	OPS_XFUNC,  /* XML: after <function=, reading the name */
	OPS_XBODY,  /* XML: between parameters */
	OPS_XKEY,   /* XML: after <parameter=, reading the key */
	OPS_XVALUE, /* XML: in a value */
	OPS_CLOSE,  /* after a call's body: expecting </tool_call> */
};

struct op {
	struct op_opts o;
	enum op_state st;
	/* text taken but not yet sent: a possible marker's start, an
	 * unfinished character, whitespace that may precede a call */
	char *buf;
	size_t len, cap;
	uint32_t calls;     /* calls begun */
	uint32_t bad_calls; /* calls ended early: unreadable after their name */
	bool content_sent;  /* any content sent (for whitespace before calls) */
	bool think_trim;    /* at the start of the block: one newline is dropped */
	/* the call being read */
	struct {
		char name[256];
		size_t name_len;
		bool begun;           /* OP_CALL_BEGIN sent */
		bool any;             /* XML: a parameter sent (a comma before the next) */
		const json_t *schema; /* XML: the tool's parameters schema */
		char key[256];
		size_t key_len;
		int type;        /* XML: the kinds the value's schema allows (op_kinds_of) */
		bool first_line; /* XML: the value's first newline not yet seen */
		/* XML, a typed value: 0 until its first byte other than
		 * whitespace, then 1 plain, 2 an object's or array's JSON (a
		 * marker inside one of its strings is its own) */
		int shape;
		/* Hermes: the object's text so far, and its scan; XML: a
		 * typed value's strings (shape 2) */
		int depth;
		bool in_str, esc;
	} c;
	char *obj; /* Hermes: the object's text, or an XML typed value */
	size_t obj_len, obj_cap;
	char open[96]; /* "<tool_call>" and what followed it, for a fallback */
	size_t open_len;
	size_t open_ws;  /* whitespace held before a "<tool_call>" being read */
	bool open_think; /* that "<tool_call>" came inside the thinking block */
	bool drop_ws;    /* content's leading whitespace goes (after </think>, a call) */
	/* Hermes: the member being read (outparse.c's scan) */
	struct {
		int hs;       /* where in the object */
		char key[16]; /* the member's key (only short ones matter) */
		size_t key_len;
		bool key_long;
		size_t val_start; /* the value's offset in obj */
		bool is_args, args_str;
		size_t args_sent; /* obj offset up to which arguments were sent */
		bool args_done, args_pending;
		size_t args_start, args_end;
	} h;
	/* the callback of the op_feed or op_finish running */
	op_emit_fn emit;
	void *ctx;
	int rc;
	bool failed; /* out of memory: every later call answers IG_E_NOMEM */
};

/* The format of a chat template's tool calls: the XML form when it writes
 * `<function=` and `<parameter=`, Hermes when it writes `<tool_call>`,
 * none otherwise. Whether it thinks: it writes `<think>`. */
enum op_format op_format_of_template(const char *tmpl, bool *thinks);

/* The tool of that name among o's, or NULL. */
const struct op_tool *op_tool_find(const struct op_opts *o, const char *name, size_t len);

/*
 * XML values. A value is read by the kinds of JSON its parameter's schema
 * allows (op_kinds_of): a string only (or a schema that says nothing), the
 * raw text as a string; otherwise the text is tried as JSON, and taken
 * when it is JSON of an allowed kind other than a string, else it is the
 * raw text as a string (vLLM's qwen3_coder reads the same way: the
 * schema's types first, a string when none fits; docs/adr/0062). The raw
 * text is the value less the form's newline after its tag and before
 * its end, never trimmed further. A value whose schema allows an object or
 * an array and that begins (after whitespace) with '{' or '[' is read as
 * JSON: a "</parameter>" inside one of its strings is part of it (unless
 * a string never closes: then the first marker ends the value after all).
 * The grammar of constrained XML calls (constrain.h) writes values so that
 * they read back valid: both use these two functions.
 */
enum op_kind {
	OP_K_STR = 1,
	OP_K_INT = 2,
	OP_K_NUM = 4, /* a JSON number with a fraction or an exponent */
	OP_K_BOOL = 8,
	OP_K_NULL = 16,
	OP_K_OBJ = 32,
	OP_K_ARR = 64,
};
/* The kinds (enum op_kind bits) schema `s` allows, from its type (number
 * is OP_K_NUM | OP_K_INT), anyOf and oneOf, enum and const (their values'
 * own kinds), nullable, and properties or items without a type; 0 when it
 * says none of these. */
int op_kinds_of(const struct json_t *s);
/* How the raw text v[0..n) of a value whose schema allows `kinds` reads:
 * true with *out (a new reference) when as JSON, false when as the text
 * itself, a string. *out is NULL when false. */
bool op_value_json(int kinds, const char *v, size_t n, struct json_t **out);

/* How an XML call's value for a parameter whose schema is `s` is read:
 * OP_VALUE_TEXT, the raw text as a string (the schema allows strings only,
 * or says nothing); OP_VALUE_JSON, JSON text (it allows no string);
 * OP_VALUE_MIXED, JSON when the text is JSON of a kind allowed other than
 * a string, else the raw text as a string. */
enum op_value { OP_VALUE_TEXT = 0, OP_VALUE_JSON, OP_VALUE_MIXED };
enum op_value op_value_of(const struct json_t *s);

void op_init(struct op *p, const struct op_opts *o);
/* Parse the next `len` bytes. 0, the first nonzero answer of `emit`, or
 * IG_E_NOMEM. */
int op_feed(struct op *p, const char *text, size_t len, op_emit_fn emit, void *ctx);
/* The text has ended: what was held is sent for what it is (an unfinished
 * marker as content; a call missing its </tool_call> ends; one cut inside
 * its arguments ends, counted bad). */
int op_finish(struct op *p, op_emit_fn emit, void *ctx);
void op_free(struct op *p);

#endif
