/*
 * json_schema.h - JSON Schema to grammar (docs/adr/0052): the subset of
 * OpenAI's strict structured outputs, and "any JSON object".
 *
 * Supported keywords: type (one or a list: object, array, string,
 * integer, number, boolean, null), properties, required,
 * additionalProperties (false or absent: no other members; true or a
 * schema: other members after the declared ones), items, minItems,
 * maxItems, enum, const, anyOf, $ref (#, #/$defs/NAME,
 * #/definitions/NAME; recursion allowed), $defs, definitions, minLength,
 * maxLength (a bounded string holds no character past U+FFFF: its length
 * is then the same in code points and in UTF-16 units), nullable (OpenAPI
 * 3.0's "or null", as client libraries write
 * it), pattern (a regular subset: literal characters, escapes,
 * classes, '.', * + ? {m,n}, |, groups; anchored as if ^...$ were
 * written). Annotations (title, description, default, examples,
 * $comment, $schema, $id, deprecated, readOnly, writeOnly, strict) are
 * ignored. Anything else is refused by name.
 *
 * The document: properties in schema order, the required ones always,
 * the optional ones when the model writes them; enum and const values in
 * their compact form (json_dumps with JSON_COMPACT); at most one space,
 * or one newline and up to 32 spaces or tabs, between tokens, none before
 * the value or after it.
 */
#ifndef IGNIS_GRAMMAR_JSON_SCHEMA_H
#define IGNIS_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>

#include "common/err.h"
#include "grammar.h"

/*
 * Compile `schema` (borrowed for the call) into a grammar. IG_E_INVAL
 * names the place in the schema (a JSON pointer) and what is refused
 * ("schema at /properties/x: 'format' is not supported; supported: ...").
 * The caller owns *out (grammar_destroy).
 */
int gs_compile(json_t *schema, struct grammar **out, struct ig_errbuf *eb);

/* The grammar's text form instead (grammar_parse reads it): the caller
 * frees *text. */
int gs_to_gbnf(json_t *schema, char **text, struct ig_errbuf *eb);

/*
 * A schema as a part of a larger grammar: its rules alone, each named
 * `prefix` (1..64 letters, digits, '-') followed by "r" and a number, the
 * part's root `prefix`"r0"; the rules they use beside them (ws, string,
 * number, value, object, ...) are the prelude's (gs_prelude_gbnf), which
 * the whole grammar must hold once. The caller frees *text.
 */
int gs_part_gbnf(json_t *schema, const char *prefix, char **text, struct ig_errbuf *eb);
/*
 * A string schema's value as raw text, unquoted and unescaped (the XML
 * tool form's values, docs/adr/0062): its pattern, minLength and
 * maxLength (a bounded one, as in JSON, holds no character past U+FFFF),
 * its other keywords checked as gs_part_gbnf checks them and its type
 * not (the caller chose the string among them). The text holds no NUL
 * and none of the ASCII characters of `exclude` (a pattern that needs one
 * is refused), and none of `no_first` (ASCII, may be NULL) first (refused
 * with a pattern). Its one rule is `prefix`"r0"; it uses no other. The
 * caller frees *text.
 */
int gs_raw_string_gbnf(json_t *schema, const char *prefix, const char *exclude,
                       const char *no_first, char **text, struct ig_errbuf *eb);
/* The shared rules every schema's grammar uses: ws (at most one space, or a
 * newline and up to 32 spaces or tabs), string, integer, number, boolean,
 * null, value, object (any JSON object), array. Static text. */
const char *gs_prelude_gbnf(void);

/* Any JSON value with an object at the top ("json_object" mode). */
int gs_json_object(struct grammar **out, struct ig_errbuf *eb);

#endif
