/*
 * bpe.c - byte-level BPE with the Qwen pre-tokenizers (bpe.h).
 *
 * The vocabulary is kept as two blobs (the stored texts and the decoded
 * pieces) with offsets, an open-addressed table from text to id, and one
 * from a pair of ids to the merge's rank and result. Merging works on ids:
 * every symbol of a word starts as a byte's token and every merge result is
 * a token (bpe_open refuses a file where either is not so), which gives the
 * same tokens as merging strings.
 */
#define _GNU_SOURCE /* memmem, qsort_r */
#include "bpe.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>
#include <xxhash.h>

#define KEY_MODEL  "tokenizer.ggml.model"
#define KEY_PRE    "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES  "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* GPT-2's alphabet uses the characters below this (bpe_byte_char). */
#define ALPHABET_CHARS (0x100 + 68)

struct merge_slot {
	uint64_t pair;   /* left << 32 | right */
	uint32_t rank;   /* UINT32_MAX: empty */
	uint32_t result; /* the join's token */
};

struct bpe {
	struct bpe_info info;
	char *text;          /* the stored texts, back to back */
	uint64_t *text_off;  /* n_tokens + 1 */
	uint8_t *piece;      /* the decoded pieces, back to back */
	uint64_t *piece_off; /* n_tokens + 1 */
	uint8_t *type;       /* enum bpe_type */
	uint32_t *by_text;   /* id + 1; 0 empty */
	uint64_t text_mask;
	struct merge_slot *merges;
	uint64_t merge_mask;
	uint32_t byte_id[256];  /* the token of each byte's character */
	int16_t byte_of[ALPHABET_CHARS]; /* the alphabet read back */
	uint32_t *specials;     /* control, user-defined and unknown ids, longest text first */
};

/* ---- GPT-2's byte alphabet ------------------------------------------------------ */

/* Printable Latin-1 bytes stand for themselves; the 68 others (controls,
 * space, DEL, the C1 range, NBSP and the soft hyphen) take the characters
 * from U+0100 on, in byte order. */
static bool byte_prints(unsigned b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t bpe_byte_char(unsigned b)
{
	uint32_t k = 0;

	if (byte_prints(b))
		return b;
	for (unsigned i = 0; i < b; i++)
		k += !byte_prints(i);
	return 0x100 + k;
}

/* The alphabet read back: the byte each character below 0x100 + 68 stands
 * for, or -1 (filled by bpe_open). */
static void alphabet_inverse(int16_t inv[ALPHABET_CHARS])
{
	for (unsigned i = 0; i < ALPHABET_CHARS; i++)
		inv[i] = -1;
	for (unsigned b = 0; b < 256; b++)
		inv[bpe_byte_char(b)] = (int16_t)b;
}

/* ---- UTF-8, read as llama.cpp reads it ------------------------------------------ */

/* One code point at s[*at] (n bytes in all): a lead byte and its
 * continuation bytes by their bit patterns alone (no check for overlong
 * forms or surrogates); any other byte, or a sequence cut short, is U+FFFD
 * and takes one byte. */
static uint32_t utf8_next(const uint8_t *s, size_t n, size_t *at)
{
	size_t i = *at;
	uint8_t c = s[i];
	unsigned len;
	uint32_t cp;

	if (c < 0x80) {
		*at = i + 1;
		return c;
	}
	if ((c & 0xe0) == 0xc0)
		len = 2, cp = c & 0x1f;
	else if ((c & 0xf0) == 0xe0)
		len = 3, cp = c & 0x0f;
	else if ((c & 0xf8) == 0xf0)
		len = 4, cp = c & 0x07;
	else
		goto bad;
	if (n - i < len)
		goto bad;
	for (unsigned k = 1; k < len; k++) {
		if ((s[i + k] & 0xc0) != 0x80)
			goto bad;
		cp = cp << 6 | (s[i + k] & 0x3f);
	}
	if (cp > 0x10ffff)
		goto bad; /* llama.cpp cannot write it back either */
	*at = i + len;
	return cp;
bad:
	*at = i + 1;
	return 0xfffd;
}

static unsigned utf8_put(uint32_t cp, uint8_t out[4])
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xc0 | cp >> 6);
		out[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xe0 | cp >> 12);
		out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | cp >> 18);
	out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

/* ---- character classes ---------------------------------------------------------- */

enum { C_LETTER = 1, C_NUMBER = 2, C_MARK = 4, C_SPACE = 8 };

/* Unicode's White_Space property (the list llama.cpp uses too). */
static bool is_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static unsigned char_class(uint32_t cp)
{
	unsigned f = is_space(cp) ? C_SPACE : 0;

	if (cp > 0x10ffff)
		return f;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
		return f | C_LETTER;
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
		return f | C_MARK;
	case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_NL:
	case UTF8PROC_CATEGORY_NO:
		return f | C_NUMBER;
	default:
		return f;
	}
}

/* ---- the pre-tokenizers --------------------------------------------------------- */

/*
 * The length of the word at cp[at] of a stretch cp[0..n), by Qwen's pattern
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * tried in that order; qwen35 reads \p{L} as [\p{L}\p{M}] in the second
 * and fourth alternatives. A character no alternative takes is a word.
 */
static size_t word_len(const uint32_t *cp, const uint8_t *cls, size_t n, size_t at,
                       unsigned letter)
{
	size_t i = at;
	uint32_t c = cp[at];
	unsigned f = cls[at];

	/* contractions */
	if (c == '\'' && at + 1 < n) {
		uint32_t c1 = cp[at + 1] | (cp[at + 1] >= 'A' && cp[at + 1] <= 'Z' ? 0x20 : 0);
		uint32_t c2 = at + 2 < n ? cp[at + 2] | (cp[at + 2] >= 'A' && cp[at + 2] <= 'Z' ? 0x20 : 0)
		                         : 0;

		if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			return 2;
		if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
			return 3;
	}
	/* one optional character (not \r, \n or a number), then letters */
	if (c != '\r' && c != '\n' && !(f & C_NUMBER) &&
	    ((f & letter) || (at + 1 < n && (cls[at + 1] & letter)))) {
		for (i = at + 1; i < n && (cls[i] & letter); i++)
			;
		return i - at;
	}
	if (f & C_NUMBER)
		return 1;
	/* an optional space, then what is neither space, letter nor number,
	 * then line ends */
	{
		size_t j = c == ' ' ? at + 1 : at;
		unsigned other = C_SPACE | letter | C_NUMBER;

		if (j < n && !(cls[j] & other)) {
			while (j < n && !(cls[j] & other))
				j++;
			while (j < n && (cp[j] == '\r' || cp[j] == '\n'))
				j++;
			return j - at;
		}
	}
	/* white space: up to its last line end; else all but the last before
	 * a non-space; else all */
	{
		size_t k = at, last_nl = 0;

		while (k < n && (cls[k] & C_SPACE)) {
			if (cp[k] == '\r' || cp[k] == '\n')
				last_nl = k + 1;
			k++;
		}
		if (last_nl)
			return last_nl - at;
		if (k - at > 1 && k < n)
			return k - at - 1;
		if (k > at)
			return k - at;
	}
	return 1;
}

/* ---- tables --------------------------------------------------------------------- */

static uint64_t pow2_above(uint64_t n)
{
	uint64_t c = 16;

	while (c < 2 * n)
		c <<= 1;
	return c;
}

uint32_t bpe_find(const struct bpe *b, const void *text, size_t len)
{
	uint64_t h = XXH3_64bits(text, len);

	for (uint64_t i = h & b->text_mask;; i = (i + 1) & b->text_mask) {
		uint32_t v = b->by_text[i];

		if (!v)
			return BPE_NONE;
		if (b->text_off[v] - b->text_off[v - 1] == len &&
		    !memcmp(b->text + b->text_off[v - 1], text, len))
			return v - 1;
	}
}

/* Later tokens of the same text win, as in llama.cpp's map. */
static void text_put(struct bpe *b, uint32_t id)
{
	const char *t = b->text + b->text_off[id];
	size_t len = b->text_off[id + 1] - b->text_off[id];
	uint64_t h = XXH3_64bits(t, len);

	for (uint64_t i = h & b->text_mask;; i = (i + 1) & b->text_mask) {
		uint32_t v = b->by_text[i];

		if (!v || (b->text_off[v] - b->text_off[v - 1] == len &&
		           !memcmp(b->text + b->text_off[v - 1], t, len))) {
			b->by_text[i] = id + 1;
			return;
		}
	}
}

static uint64_t pair_hash(uint64_t pair)
{
	return XXH3_64bits(&pair, sizeof pair);
}

static const struct merge_slot *merge_find(const struct bpe *b, uint32_t l, uint32_t r)
{
	uint64_t pair = (uint64_t)l << 32 | r;

	for (uint64_t i = pair_hash(pair) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
		const struct merge_slot *s = &b->merges[i];

		if (s->rank == UINT32_MAX)
			return NULL;
		if (s->pair == pair)
			return s;
	}
}

/* The first merge of a pair keeps its rank (a repeated pair is later, so
 * never the lowest). */
static void merge_put(struct bpe *b, uint32_t l, uint32_t r, uint32_t rank, uint32_t result)
{
	uint64_t pair = (uint64_t)l << 32 | r;

	for (uint64_t i = pair_hash(pair) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
		struct merge_slot *s = &b->merges[i];

		if (s->rank == UINT32_MAX) {
			*s = (struct merge_slot){pair, rank, result};
			return;
		}
		if (s->pair == pair)
			return;
	}
}

/* ---- opening -------------------------------------------------------------------- */

/*
 * Tokens known by their text, as llama.cpp knows them: end markers end a
 * generation; fill-in-the-middle markers are control tokens, and the pad,
 * repository and file-separator ones end a generation too. Each is made a
 * control token whatever the file says. A FIM role the file names by id
 * (tokenizer.ggml.fim_*_token_id) is not looked up by text.
 */
enum named_role { R_EOG, R_FIM_PRE, R_FIM_SUF, R_FIM_MID, R_FIM_PAD, R_FIM_REP, R_FIM_SEP };

static const struct {
	const char *text;
	enum named_role role;
} named[] = {
    {"<|eot_id|>", R_EOG},
    {"<|im_end|>", R_EOG},
    {"<|end|>", R_EOG},
    {"<|return|>", R_EOG},
    {"<|call|>", R_EOG},
    {"<|flush|>", R_EOG},
    {"<|calls|>", R_EOG},
    {"<end_of_turn>", R_EOG},
    {"<|endoftext|>", R_EOG},
    {"</s>", R_EOG},
    {"<|eom_id|>", R_EOG},
    {"<EOT>", R_EOG},
    {"_<EOT>", R_EOG},
    {"[EOT]", R_EOG},
    {"[EOS]", R_EOG},
    {"<|end_of_text|>", R_EOG},
    {"<end_of_utterance>", R_EOG},
    {"<eos>", R_EOG},
    {"<turn|>", R_EOG},
    {"<|tool_response>", R_EOG},
    {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", R_EOG},
    {"[e~[", R_EOG},
    {"<|fim_prefix|>", R_FIM_PRE},
    {"<fim-prefix>", R_FIM_PRE},
    {"<fim_prefix>", R_FIM_PRE},
    {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", R_FIM_PRE},
    {"<PRE>", R_FIM_PRE},
    {"\xe2\x96\x81<PRE>", R_FIM_PRE},
    {"<|code_prefix|>", R_FIM_PRE},
    {"<|prefix|>", R_FIM_PRE},
    {"<|fim_suffix|>", R_FIM_SUF},
    {"<fim-suffix>", R_FIM_SUF},
    {"<fim_suffix>", R_FIM_SUF},
    {"<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", R_FIM_SUF},
    {"<SUF>", R_FIM_SUF},
    {"\xe2\x96\x81<SUF>", R_FIM_SUF},
    {"<|code_suffix|>", R_FIM_SUF},
    {"<|suffix|>", R_FIM_SUF},
    {"<|fim_middle|>", R_FIM_MID},
    {"<fim-middle>", R_FIM_MID},
    {"<fim_middle>", R_FIM_MID},
    {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", R_FIM_MID},
    {"<MID>", R_FIM_MID},
    {"\xe2\x96\x81<MID>", R_FIM_MID},
    {"<|code_middle|>", R_FIM_MID},
    {"<|middle|>", R_FIM_MID},
    {"<|fim_pad|>", R_FIM_PAD},
    {"<fim-pad>", R_FIM_PAD},
    {"<fim_pad>", R_FIM_PAD},
    {"<PAD>", R_FIM_PAD},
    {"[PAD]", R_FIM_PAD},
    {"<|fim_repo|>", R_FIM_REP},
    {"<|repo_name|>", R_FIM_REP},
    {"<fim-repo>", R_FIM_REP},
    {"<REPO>", R_FIM_REP},
    {"<reponame>", R_FIM_REP},
    {"<|file_sep|>", R_FIM_SEP},
};

static const char *const fim_keys[] = {
    [R_FIM_PRE] = "tokenizer.ggml.fim_pre_token_id", [R_FIM_SUF] = "tokenizer.ggml.fim_suf_token_id",
    [R_FIM_MID] = "tokenizer.ggml.fim_mid_token_id", [R_FIM_PAD] = "tokenizer.ggml.fim_pad_token_id",
    [R_FIM_REP] = "tokenizer.ggml.fim_rep_token_id", [R_FIM_SEP] = "tokenizer.ggml.fim_sep_token_id",
};

const char *bpe_pre_name(enum bpe_pre pre)
{
	return pre == BPE_PRE_QWEN35 ? "qwen35" : "qwen2";
}

static int opt_id(const struct gguf *g, const char *key, uint32_t n_tokens, uint32_t *out,
                  struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);
	uint32_t v;
	int rc;

	*out = BPE_NONE;
	if (!kv)
		return IG_E_OK;
	if ((rc = gguf_get_u32(g, key, &v, eb)))
		return rc;
	if (v >= n_tokens)
		return ig_errf(eb, IG_E_INVAL, "%s: token %u is past the vocabulary (%u tokens)", key,
		               v, n_tokens);
	*out = v;
	return IG_E_OK;
}

static void eog_add(struct bpe_info *in, uint32_t id)
{
	uint32_t k = 0;

	if (id == BPE_NONE || in->n_eog == BPE_MAX_EOG)
		return;
	while (k < in->n_eog && in->eog[k] < id)
		k++;
	if (k < in->n_eog && in->eog[k] == id)
		return;
	memmove(&in->eog[k + 1], &in->eog[k], (in->n_eog - k) * sizeof(in->eog[0]));
	in->eog[k] = id;
	in->n_eog++;
}

static void eog_drop(struct bpe_info *in, uint32_t id)
{
	for (uint32_t k = 0; k < in->n_eog; k++)
		if (in->eog[k] == id) {
			memmove(&in->eog[k], &in->eog[k + 1], (in->n_eog - k - 1) * sizeof(in->eog[0]));
			in->n_eog--;
			return;
		}
}

static int special_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct bpe *v = ctx;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	uint64_t la = v->text_off[a + 1] - v->text_off[a];
	uint64_t lb = v->text_off[b + 1] - v->text_off[b];

	if (la != lb)
		return la > lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* A normal token's piece: its text read back through the byte alphabet. */
static int normal_piece(const struct bpe *b, const char *t, size_t len, uint8_t *out, size_t *n)
{
	size_t at = 0;

	*n = 0;
	while (at < len) {
		/* invalid UTF-8 reads as U+FFFD, no character of the alphabet */
		uint32_t cp = utf8_next((const uint8_t *)t, len, &at);
		int byte = cp < ALPHABET_CHARS ? b->byte_of[cp] : -1;

		if (byte < 0)
			return -1;
		out[(*n)++] = (uint8_t)byte;
	}
	return 0;
}

static uint32_t find_str(const struct bpe *b, const char *t)
{
	return bpe_find(b, t, strlen(t));
}

/* The named tokens above, then llama.cpp's two corrections for families
 * whose markers collide: with <|tool_response> an end marker, </s> is a
 * normal token; with <|return|> and <|call|> (or <|calls|> and <|flush|>),
 * <|end|> is a user-defined one. And gpt-oss's channel markers are
 * user-defined. */
static int named_tokens(struct bpe *b, const struct gguf *g, struct ig_errbuf *eb)
{
	uint32_t fim[R_FIM_SEP + 1];
	uint32_t id, end = find_str(b, "<|end|>"), s = find_str(b, "</s>");
	static const char *const channel[] = {"<|channel|>", "<|message|>", "<|start|>",
	                                      "<|constrain|>"};
	int rc;

	for (int r = R_FIM_PRE; r <= R_FIM_SEP; r++)
		if ((rc = opt_id(g, fim_keys[r], b->info.n_tokens, &fim[r], eb)))
			return rc;
	for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
		enum named_role r = named[k].role;

		if ((id = find_str(b, named[k].text)) == BPE_NONE)
			continue;
		if (r == R_EOG) {
			b->type[id] = BPE_CONTROL;
			eog_add(&b->info, id);
		} else if (fim[r] == BPE_NONE) {
			fim[r] = id;
			b->type[id] = BPE_CONTROL;
		}
	}
	eog_add(&b->info, fim[R_FIM_PAD]);
	eog_add(&b->info, fim[R_FIM_REP]);
	eog_add(&b->info, fim[R_FIM_SEP]);
	if (s != BPE_NONE && bpe_is_eog(b, s) &&
	    (id = find_str(b, "<|tool_response>")) != BPE_NONE && bpe_is_eog(b, id)) {
		eog_drop(&b->info, s);
		b->type[s] = BPE_NORMAL;
	}
	if (end != BPE_NONE && bpe_is_eog(b, end)) {
		bool ret = (id = find_str(b, "<|return|>")) != BPE_NONE && bpe_is_eog(b, id);
		bool call = ((id = find_str(b, "<|call|>")) != BPE_NONE && bpe_is_eog(b, id)) ||
		            ((id = find_str(b, "<|calls|>")) != BPE_NONE && bpe_is_eog(b, id));
		bool flush = (id = find_str(b, "<|flush|>")) != BPE_NONE && bpe_is_eog(b, id);

		if ((ret && call) || (call && flush)) {
			eog_drop(&b->info, end);
			b->type[end] = BPE_USER_DEFINED;
		}
	}
	for (size_t k = 0; k < sizeof channel / sizeof channel[0]; k++)
		if ((id = find_str(b, channel[k])) != BPE_NONE)
			b->type[id] = BPE_USER_DEFINED;
	return IG_E_OK;
}

static int load_tokens(struct bpe *b, const struct gguf *g, struct ig_errbuf *eb)
{
	struct gguf_arr toks, types = {0};
	bool have_types = gguf_find_kv(g, KEY_TYPES) != NULL;
	uint64_t text_bytes = 0;
	uint32_t n;
	int rc;

	if (!gguf_find_kv(g, KEY_TOKENS))
		return ig_errf(eb, IG_E_INVAL, "%s: missing (the vocabulary)", KEY_TOKENS);
	if ((rc = gguf_get_arr(g, KEY_TOKENS, GGUF_TYPE_STRING, &toks, eb)))
		return rc;
	if (toks.n < 256 || toks.n > BPE_MAX_TOKENS)
		return ig_errf(eb, IG_E_INVAL, "%s: %llu tokens; accepted: 256 to %u", KEY_TOKENS,
		               (unsigned long long)toks.n, BPE_MAX_TOKENS);
	n = (uint32_t)toks.n;
	if (have_types) {
		if ((rc = gguf_get_arr(g, KEY_TYPES, GGUF_TYPE_INT32, &types, eb)))
			return rc;
		if (types.n != n)
			return ig_errf(eb, IG_E_INVAL, "%s: %llu types for %u tokens", KEY_TYPES,
			               (unsigned long long)types.n, n);
	}
	for (uint32_t i = 0; i < n; i++)
		text_bytes += toks.strs[i].len;
	b->info.n_tokens = n;
	alphabet_inverse(b->byte_of);
	b->text = malloc(text_bytes ? text_bytes : 1);
	b->piece = malloc(text_bytes ? text_bytes : 1); /* a piece is never longer */
	b->text_off = calloc((size_t)n + 1, sizeof(uint64_t));
	b->piece_off = calloc((size_t)n + 1, sizeof(uint64_t));
	b->type = malloc(n);
	b->text_mask = pow2_above(n) - 1;
	b->by_text = calloc(b->text_mask + 1, sizeof(uint32_t));
	if (!b->text || !b->piece || !b->text_off || !b->piece_off || !b->type || !b->by_text)
		return ig_errf(eb, IG_E_NOMEM, "the vocabulary (%u tokens)", n);
	for (uint32_t i = 0; i < n; i++) {
		int32_t t = BPE_NORMAL;

		memcpy(b->text + b->text_off[i], toks.strs[i].ptr, toks.strs[i].len);
		b->text_off[i + 1] = b->text_off[i] + toks.strs[i].len;
		if (have_types)
			memcpy(&t, (const char *)types.data + 4 * (size_t)i, 4);
		if (t < BPE_NORMAL || t > BPE_BYTE)
			return ig_errf(eb, IG_E_INVAL, "%s: token %u has type %d; accepted: 1 to 6",
			               KEY_TYPES, i, t);
		b->type[i] = (uint8_t)t;
		text_put(b, i);
	}
	if ((rc = named_tokens(b, g, eb)))
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		const char *t = b->text + b->text_off[i];
		size_t len = b->text_off[i + 1] - b->text_off[i], m = 0;
		uint8_t *out = b->piece + b->piece_off[i];

		switch (b->type[i]) {
		case BPE_NORMAL:
		case BPE_BYTE:
			if (normal_piece(b, t, len, out, &m))
				return ig_errf(eb, IG_E_INVAL,
				               "%s: token %u ('%.*s') is a normal token with a "
				               "character outside the byte-level alphabet",
				               KEY_TOKENS, i, (int)(len > 40 ? 40 : len), t);
			break;
		case BPE_UNUSED:
			break;
		default:
			memcpy(out, t, len);
			m = len;
		}
		if (m > BPE_PIECE_MAX)
			return ig_errf(eb, IG_E_INVAL,
			               "%s: token %u stands for %zu bytes; accepted: up to %u",
			               KEY_TOKENS, i, m, BPE_PIECE_MAX);
		b->piece_off[i + 1] = b->piece_off[i] + m;
		b->info.n_specials += b->type[i] == BPE_CONTROL || b->type[i] == BPE_USER_DEFINED ||
		                      b->type[i] == BPE_UNKNOWN;
	}
	b->specials = malloc(((size_t)b->info.n_specials + 1) * sizeof(uint32_t));
	if (!b->specials)
		return ig_errf(eb, IG_E_NOMEM, "the vocabulary's special tokens");
	for (uint32_t i = 0, k = 0; i < n; i++)
		if (b->type[i] == BPE_CONTROL || b->type[i] == BPE_USER_DEFINED ||
		    b->type[i] == BPE_UNKNOWN) {
			if (b->text_off[i + 1] == b->text_off[i])
				return ig_errf(eb, IG_E_INVAL, "%s: special token %u is empty",
				               KEY_TOKENS, i);
			b->specials[k++] = i;
		}
	qsort_r(b->specials, b->info.n_specials, sizeof(uint32_t), special_cmp, b);
	for (unsigned byte = 0; byte < 256; byte++) {
		uint8_t u[4];
		unsigned l = utf8_put(bpe_byte_char(byte), u);

		b->byte_id[byte] = bpe_find(b, u, l);
		if (b->byte_id[byte] == BPE_NONE)
			return ig_errf(eb, IG_E_INVAL,
			               "%s: no token for byte 0x%02x ('%.*s'): a byte-level "
			               "vocabulary holds all 256",
			               KEY_TOKENS, byte, (int)l, (const char *)u);
	}
	return IG_E_OK;
}

static int load_merges(struct bpe *b, const struct gguf *g, struct ig_errbuf *eb)
{
	struct gguf_arr m;
	int rc;

	if (!gguf_find_kv(g, KEY_MERGES))
		return ig_errf(eb, IG_E_INVAL, "%s: missing (a byte-level BPE needs its merges)",
		               KEY_MERGES);
	if ((rc = gguf_get_arr(g, KEY_MERGES, GGUF_TYPE_STRING, &m, eb)))
		return rc;
	if (m.n > BPE_MAX_MERGES)
		return ig_errf(eb, IG_E_INVAL, "%s: %llu merges; accepted: up to %u", KEY_MERGES,
		               (unsigned long long)m.n, BPE_MAX_MERGES);
	b->info.n_merges = (uint32_t)m.n;
	b->merge_mask = pow2_above(m.n) - 1;
	b->merges = malloc((b->merge_mask + 1) * sizeof(*b->merges));
	if (!b->merges)
		return ig_errf(eb, IG_E_NOMEM, "%s: %llu merges", KEY_MERGES,
		               (unsigned long long)m.n);
	for (uint64_t i = 0; i <= b->merge_mask; i++)
		b->merges[i].rank = UINT32_MAX;
	for (uint32_t r = 0; r < m.n; r++) {
		const char *s = m.strs[r].ptr;
		size_t len = m.strs[r].len, sp;
		uint32_t l, rt, j;
		char join[512];

		/* the first space past the first byte splits it */
		for (sp = 1; sp < len && s[sp] != ' '; sp++)
			;
		if (sp >= len)
			return ig_errf(eb, IG_E_INVAL, "%s: merge %u ('%.*s') is not 'left right'",
			               KEY_MERGES, r, (int)(len > 40 ? 40 : len), s);
		l = bpe_find(b, s, sp);
		rt = bpe_find(b, s + sp + 1, len - sp - 1);
		if (len - 1 > sizeof join)
			return ig_errf(eb, IG_E_INVAL, "%s: merge %u is %zu bytes long", KEY_MERGES,
			               r, len);
		memcpy(join, s, sp);
		memcpy(join + sp, s + sp + 1, len - sp - 1);
		j = bpe_find(b, join, len - 1);
		if (l == BPE_NONE || rt == BPE_NONE || j == BPE_NONE)
			return ig_errf(eb, IG_E_INVAL,
			               "%s: merge %u ('%.*s'): '%.*s' is not a token of the "
			               "vocabulary",
			               KEY_MERGES, r, (int)(len > 40 ? 40 : len), s,
			               (int)(l == BPE_NONE ? sp : rt == BPE_NONE ? len - sp - 1 : len - 1),
			               l == BPE_NONE ? s : rt == BPE_NONE ? s + sp + 1 : join);
		merge_put(b, l, rt, r, j);
	}
	return IG_E_OK;
}

int bpe_open(struct bpe **out, const struct gguf *g, struct ig_errbuf *eb)
{
	struct gguf_str model, pre;
	struct bpe *b;
	bool add_bos = false;
	int rc;

	*out = NULL;
	if ((rc = gguf_get_str(g, KEY_MODEL, &model, eb)))
		return rc;
	if (model.len != 4 || memcmp(model.ptr, "gpt2", 4))
		return ig_errf(eb, IG_E_INVAL, "%s: '%.*s' is not a byte-level BPE; accepted: gpt2",
		               KEY_MODEL, (int)model.len, model.ptr);
	if (!gguf_find_kv(g, KEY_PRE))
		return ig_errf(eb, IG_E_INVAL, "%s: missing; accepted: qwen2, qwen35", KEY_PRE);
	if ((rc = gguf_get_str(g, KEY_PRE, &pre, eb)))
		return rc;
	if (!(b = calloc(1, sizeof(*b))))
		return ig_errf(eb, IG_E_NOMEM, "a tokenizer");
	if (pre.len == 5 && !memcmp(pre.ptr, "qwen2", 5))
		b->info.pre = BPE_PRE_QWEN2;
	else if (pre.len == 6 && !memcmp(pre.ptr, "qwen35", 6))
		b->info.pre = BPE_PRE_QWEN35;
	else {
		free(b);
		return ig_errf(eb, IG_E_INVAL, "%s: '%.*s' is not a pre-tokenizer we run; accepted: "
		               "qwen2, qwen35",
		               KEY_PRE, (int)pre.len, pre.ptr);
	}
	if ((rc = load_tokens(b, g, eb)) || (rc = load_merges(b, g, eb)) ||
	    (rc = opt_id(g, "tokenizer.ggml.bos_token_id", b->info.n_tokens, &b->info.bos, eb)) ||
	    (rc = opt_id(g, "tokenizer.ggml.eos_token_id", b->info.n_tokens, &b->info.eos, eb)) ||
	    (rc = opt_id(g, "tokenizer.ggml.eot_token_id", b->info.n_tokens, &b->info.eot, eb)) ||
	    (rc = opt_id(g, "tokenizer.ggml.padding_token_id", b->info.n_tokens, &b->info.pad, eb)))
		goto fail;
	{
		uint32_t eom;

		if ((rc = opt_id(g, "tokenizer.ggml.eom_token_id", b->info.n_tokens, &eom, eb)))
			goto fail;
		eog_add(&b->info, b->info.eos);
		eog_add(&b->info, b->info.eot);
		eog_add(&b->info, eom);
	}
	if (gguf_find_kv(g, "tokenizer.ggml.add_bos_token") &&
	    (rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, eb)))
		goto fail;
	if (add_bos && b->info.bos == BPE_NONE) {
		rc = ig_errf(eb, IG_E_INVAL,
		             "tokenizer.ggml.add_bos_token is true but the file names no "
		             "tokenizer.ggml.bos_token_id");
		goto fail;
	}
	b->info.add_bos = add_bos;
	*out = b;
	return IG_E_OK;
fail:
	bpe_close(b);
	return rc;
}

void bpe_close(struct bpe *b)
{
	if (!b)
		return;
	free(b->text);
	free(b->text_off);
	free(b->piece);
	free(b->piece_off);
	free(b->type);
	free(b->by_text);
	free(b->merges);
	free(b->specials);
	free(b);
}

const struct bpe_info *bpe_info(const struct bpe *b)
{
	return &b->info;
}

bool bpe_piece(const struct bpe *b, uint32_t id, bool special, const uint8_t **p, size_t *n)
{
	if (id >= b->info.n_tokens) {
		*p = NULL;
		*n = 0;
		return false;
	}
	*p = b->piece + b->piece_off[id];
	*n = b->piece_off[id + 1] - b->piece_off[id];
	if (!special && (b->type[id] == BPE_CONTROL || b->type[id] == BPE_UNKNOWN))
		*n = 0;
	return true;
}

const char *bpe_text(const struct bpe *b, uint32_t id, size_t *len)
{
	if (id >= b->info.n_tokens) {
		*len = 0;
		return NULL;
	}
	*len = b->text_off[id + 1] - b->text_off[id];
	return b->text + b->text_off[id];
}

enum bpe_type bpe_token_type(const struct bpe *b, uint32_t id)
{
	return id < b->info.n_tokens ? (enum bpe_type)b->type[id] : 0;
}

bool bpe_is_eog(const struct bpe *b, uint32_t id)
{
	for (uint32_t k = 0; k < b->info.n_eog; k++)
		if (b->info.eog[k] == id)
			return true;
	return false;
}

/* ---- encoding ------------------------------------------------------------------- */

/* A merge that may apply: symbols `left` and `right` adjacent, holding
 * tokens `l` and `r` when it was found. */
struct cand {
	uint32_t rank, left, right, l, r;
};

struct scratch {
	uint32_t *cp; /* a stretch's code points */
	uint8_t *cls; /* their classes */
	size_t cap_cp, cap_cls;
	uint32_t *sym; /* a word's symbols: token ids; BPE_NONE once merged away */
	uint32_t *next, *prev;
	struct cand *heap;
	size_t cap_sym, cap_next, cap_prev, cap_heap;
	uint32_t *out;
	size_t n_out, cap_out;
};

static bool cand_less(const struct cand *a, const struct cand *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct scratch *s, size_t *n, struct cand c)
{
	size_t i = (*n)++;

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!cand_less(&c, &s->heap[p]))
			break;
		s->heap[i] = s->heap[p];
		i = p;
	}
	s->heap[i] = c;
}

static struct cand heap_pop(struct scratch *s, size_t *n)
{
	struct cand top = s->heap[0], last = s->heap[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && cand_less(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!cand_less(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (*n)
		s->heap[i] = last;
	return top;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	void *q;
	size_t c = *cap ? *cap : 64;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(q = realloc(*p, c * elem)))
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static int out_push(struct scratch *s, uint32_t id)
{
	if (grow((void **)&s->out, &s->cap_out, s->n_out + 1, sizeof(uint32_t)))
		return -1;
	s->out[s->n_out++] = id;
	return 0;
}

static void try_pair(const struct bpe *b, struct scratch *s, size_t *nh, uint32_t left,
                     uint32_t right)
{
	const struct merge_slot *m;

	if (left == UINT32_MAX || right == UINT32_MAX)
		return;
	if ((m = merge_find(b, s->sym[left], s->sym[right])))
		heap_push(s, nh, (struct cand){m->rank, left, right, s->sym[left], s->sym[right]});
}

/* One word's bytes (the UTF-8 of cp[0..n)), merged, appended to s->out. */
static int bpe_word(const struct bpe *b, struct scratch *s, const uint32_t *cp, size_t n)
{
	size_t ns = 0, nh = 0;

	/* at most 4 bytes a character; a merge adds two candidates at most */
	if (grow((void **)&s->sym, &s->cap_sym, 4 * n, sizeof(uint32_t)) ||
	    grow((void **)&s->next, &s->cap_next, 4 * n, sizeof(uint32_t)) ||
	    grow((void **)&s->prev, &s->cap_prev, 4 * n, sizeof(uint32_t)) ||
	    grow((void **)&s->heap, &s->cap_heap, 3 * 4 * n, sizeof(struct cand)))
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint8_t u[4];
		unsigned l = utf8_put(cp[i], u);

		for (unsigned k = 0; k < l; k++)
			s->sym[ns++] = b->byte_id[u[k]];
	}
	for (size_t i = 0; i < ns; i++) {
		s->prev[i] = i ? (uint32_t)i - 1 : UINT32_MAX;
		s->next[i] = i + 1 < ns ? (uint32_t)i + 1 : UINT32_MAX;
	}
	for (size_t i = 0; i + 1 < ns; i++)
		try_pair(b, s, &nh, (uint32_t)i, (uint32_t)i + 1);
	while (nh) {
		struct cand c = heap_pop(s, &nh);
		const struct merge_slot *m;

		if (s->sym[c.left] != c.l || s->sym[c.right] != c.r || s->next[c.left] != c.right)
			continue; /* one side merged since */
		m = merge_find(b, c.l, c.r);
		s->sym[c.left] = m->result;
		s->sym[c.right] = BPE_NONE;
		s->next[c.left] = s->next[c.right];
		if (s->next[c.right] != UINT32_MAX)
			s->prev[s->next[c.right]] = c.left;
		s->next[c.right] = UINT32_MAX;
		try_pair(b, s, &nh, s->prev[c.left], c.left);
		try_pair(b, s, &nh, c.left, s->next[c.left]);
	}
	for (uint32_t i = 0; i != UINT32_MAX && ns; i = s->next[i])
		if (out_push(s, s->sym[i]))
			return -1;
	return 0;
}

/* A stretch of text with no special token in it. */
static int encode_text(const struct bpe *b, struct scratch *s, const uint8_t *t, size_t len)
{
	unsigned letter = b->info.pre == BPE_PRE_QWEN35 ? C_LETTER | C_MARK : C_LETTER;
	size_t n = 0, at = 0;

	if (grow((void **)&s->cp, &s->cap_cp, len, sizeof(uint32_t)) ||
	    grow((void **)&s->cls, &s->cap_cls, len, 1))
		return -1;
	while (at < len) {
		s->cp[n] = utf8_next(t, len, &at);
		s->cls[n] = (uint8_t)char_class(s->cp[n]);
		n++;
	}
	for (size_t i = 0; i < n;) {
		size_t w = word_len(s->cp, s->cls, n, i, letter);

		if (bpe_word(b, s, s->cp + i, w))
			return -1;
		i += w;
	}
	return 0;
}

/* A piece of the input: text [off, off + len) or, when id != BPE_NONE, a
 * special token. */
struct frag {
	size_t off, len;
	uint32_t id;
};

static const void *find_bytes(const uint8_t *h, size_t hn, const char *nd, size_t nn)
{
	return nn <= hn ? memmem(h, hn, nd, nn) : NULL;
}

int bpe_spans_check(const struct chat_span *plain, size_t n_plain, size_t len, struct ig_errbuf *eb)
{
	if (n_plain && !plain)
		return ig_errf(eb, IG_E_INVAL, "plain spans: %zu spans but no array", n_plain);
	for (size_t i = 0; i < n_plain; i++) {
		const struct chat_span *p = &plain[i];

		if (p->start > p->end)
			return ig_errf(eb, IG_E_INVAL,
			               "plain span %zu [%zu, %zu): it ends before it starts", i,
			               p->start, p->end);
		if (p->end > len)
			return ig_errf(
			    eb, IG_E_INVAL,
			    "plain span %zu [%zu, %zu): it ends past the text (%zu bytes)", i,
			    p->start, p->end, len);
		if (i && p->start < plain[i - 1].end)
			return ig_errf(eb, IG_E_INVAL,
			               "plain span %zu [%zu, %zu): it starts before span %zu [%zu, "
			               "%zu) ends (spans ascend and do not overlap)",
			               i, p->start, p->end, i - 1, plain[i - 1].start,
			               plain[i - 1].end);
	}
	return IG_E_OK;
}

/* True when bytes [at, at + n) overlap a span of plain[0..n_plain) (checked
 * spans). Their ends ascend, so the first span ending past `at` is found by
 * halving; empty spans overlap nothing and are stepped over. */
static bool in_plain(const struct chat_span *plain, size_t n_plain, size_t at, size_t n)
{
	size_t lo = 0, hi = n_plain;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (plain[mid].end <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n_plain && plain[lo].start < at + n; lo++)
		if (plain[lo].start < plain[lo].end)
			return true;
	return false;
}

int bpe_encode(const struct bpe *b, const void *text, size_t len, unsigned flags, uint32_t *ids,
               size_t cap, size_t *n, struct ig_errbuf *eb)
{
	return bpe_encode_spans(b, text, len, flags, NULL, 0, ids, cap, n, eb);
}

int bpe_encode_spans(const struct bpe *b, const void *text, size_t len, unsigned flags,
                     const struct chat_span *plain, size_t n_plain, uint32_t *ids, size_t cap,
                     size_t *n, struct ig_errbuf *eb)
{
	const uint8_t *t = text;
	struct scratch s = {0};
	struct frag *f = NULL, *g = NULL;
	size_t nf = 1, capf = 0;
	int rc = IG_E_OK;

	*n = 0;
	if (flags & ~(unsigned)(BPE_ADD_SPECIAL | BPE_PARSE_SPECIAL))
		return ig_errf(eb, IG_E_INVAL, "bpe_encode: unknown flags 0x%x", flags);
	if ((rc = bpe_spans_check(plain, n_plain, len, eb)))
		return rc;
	if (grow((void **)&f, &capf, 1, sizeof(*f)))
		goto nomem;
	f[0] = (struct frag){0, len, BPE_NONE};
	/* special tokens, the longest first, each leftmost first */
	for (uint32_t k = 0; k < b->info.n_specials && len; k++) {
		uint32_t id = b->specials[k];
		const char *st = b->text + b->text_off[id];
		size_t sl = b->text_off[id + 1] - b->text_off[id], ng = 0, capg = 0;
		/* user-defined tokens are found everywhere, spans or not */
		bool spans = n_plain && b->type[id] != BPE_USER_DEFINED;

		if (!(flags & BPE_PARSE_SPECIAL) && b->type[id] != BPE_USER_DEFINED)
			continue;
		for (size_t i = 0; i < nf; i++) {
			/* [off, end) is the stretch left; the search goes on at `from` */
			size_t off = f[i].off, end = f[i].off + f[i].len, from = off;
			const uint8_t *hit;

			if (f[i].id != BPE_NONE) {
				if (grow((void **)&g, &capg, ng + 1, sizeof(*g)))
					goto nomem;
				g[ng++] = f[i];
				continue;
			}
			while (from < end && (hit = find_bytes(t + from, end - from, st, sl))) {
				size_t at = (size_t)(hit - t);

				if (spans && in_plain(plain, n_plain, at, sl)) {
					from = at + 1; /* text: a later match may overlap it */
					continue;
				}
				if (grow((void **)&g, &capg, ng + 2, sizeof(*g)))
					goto nomem;
				if (at > off)
					g[ng++] = (struct frag){off, at - off, BPE_NONE};
				g[ng++] = (struct frag){0, 0, id};
				off = from = at + sl;
			}
			if (end > off) {
				if (grow((void **)&g, &capg, ng + 1, sizeof(*g)))
					goto nomem;
				g[ng++] = (struct frag){off, end - off, BPE_NONE};
			}
		}
		free(f);
		f = g;
		nf = ng;
		capf = capg;
		g = NULL;
	}
	if ((flags & BPE_ADD_SPECIAL) && b->info.add_bos && out_push(&s, b->info.bos))
		goto nomem;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].id != BPE_NONE) {
			if (out_push(&s, f[i].id))
				goto nomem;
		} else if (f[i].len && encode_text(b, &s, t + f[i].off, f[i].len))
			goto nomem;
	}
	*n = s.n_out;
	if (s.n_out > cap) {
		if (cap)
			memcpy(ids, s.out, cap * sizeof(uint32_t));
		rc = ig_errf(eb, IG_E_INVAL, "the text is %zu tokens; room for %zu", s.n_out, cap);
	} else if (s.n_out)
		memcpy(ids, s.out, s.n_out * sizeof(uint32_t));
	goto out;
nomem:
	rc = ig_errf(eb, IG_E_NOMEM, "tokenizing %zu bytes", len);
out:
	free(f);
	free(g);
	free(s.cp);
	free(s.cls);
	free(s.sym);
	free(s.next);
	free(s.prev);
	free(s.heap);
	free(s.out);
	return rc;
}
