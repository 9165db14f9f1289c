/*
 * ignis-mkmodel - write a synthetic model of our family (GGUF "ignis-hybrid")
 * with seeded random weights, at any shape.
 *
 *   ignis-mkmodel --preset NAME (-o FILE | --dry-run) [--seed N] [--dtype TYPE]
 *                 [--set KEY=VALUE[,KEY=VALUE...]]... [--tokenizer bytes|none]
 *                 [--name NAME]
 *
 * Presets: the built-in descriptions (common/model.c): tiny-dense and
 * tiny-moe for tests (a few MB), tiny-chat (the embedded default:
 * tiny-dense's shapes in llama.cpp's qwen3 layout, with its vocabulary and
 * chat template), qwen3.8-27b (27b) and qwen3.8-flash-next (flash-next), the
 * reference shapes for GPU runs. --set changes any key of
 * the file's description (the table mfile_keys[], by field or file key) on
 * top of the preset; the result is checked by the rules mfile_open applies
 * (mfile_check_desc), so every file written loads. A file whose shape is not
 * a built-in model's may not carry that model's name: with --set changes the
 * default name is "<preset>-custom". --tokenizer names the file's tokenizer
 * (tokenizer.ggml.model): the preset's by default (bytes for tiny-dense and
 * tiny-moe, none for the reference shapes, whose BPE is not built); the
 * byte-level tokenizer has exactly 260 ids, so a vocabulary of another size
 * takes --tokenizer none (token ids only).
 *
 * The same preset, --set, seed, dtype and name give the same bytes. The file
 * is streamed (mfile_write_synthetic_opts): memory use is a few MiB whatever
 * the shape. Before writing, the exact file size is checked against the free
 * space of the target's volume (statvfs f_bavail: what an unprivileged
 * writer may use); --dry-run prints the description, the tensor count and
 * the exact size and writes nothing. SIGINT, SIGTERM and SIGHUP stop a write
 * at the next chunk and leave no file behind.
 *
 * A file's figures are its own (ADR 0006): weights summed from its tensors
 * at the dtype, the state image and expert figures derived from its shapes.
 * The built-in reference models carry the reference's figures instead (a
 * quantized model's bytes), so a reference-shape file plans with its own
 * larger figures; --dry-run prints both.
 *
 * Exit status: 0 written (or dry run), 1 not written (no room, I/O error,
 * interrupted), 2 bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <jansson.h>

#include "common/bytesize.h"
#include "model/mfile.h"
#include "version.h"

#define PROG "ignis-mkmodel"

/* Set by the signal handler; the write polls it once per chunk. */
static volatile sig_atomic_t mk_stop;

static void mk_on_signal(int sig)
{
	(void)sig;
	mk_stop = 1;
}

struct mk {
	const struct mdesc *preset;
	struct mdesc m; /* the preset with --set applied */
	char name[64];
	const char *out;
	enum mfile_dtype dtype;
	unsigned long long seed;
	bool dry_run;
	unsigned next_pct; /* progress: the next percentage to report */
};

/* --dtype's words, ggml's names in lower case */
static const struct {
	const char *name;
	enum mfile_dtype dtype;
} mk_dtypes[] = {{"bf16", MFILE_BF16}, {"f16", MFILE_F16},   {"f32", MFILE_F32},
                 {"q8_0", MFILE_Q8_0}, {"q4_0", MFILE_Q4_0}, {"q4_k", MFILE_Q4_K},
                 {"q5_k", MFILE_Q5_K}, {"q6_k", MFILE_Q6_K}, {"q4_k_m", MFILE_Q4_K_M}};
#define MK_DTYPES_TEXT "bf16, f16, f32, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m"

static const char *mk_dtype_name(enum mfile_dtype d)
{
	for (size_t i = 0; i < sizeof(mk_dtypes) / sizeof(mk_dtypes[0]); i++)
		if (mk_dtypes[i].dtype == d)
			return mk_dtypes[i].name;
	return "?";
}

static const char *mk_family_name(int family)
{
	return family == MDESC_DENSE ? "dense" : family == MDESC_MOE ? "moe" : "all";
}

#define USAGE                                                                                      \
	"usage: " PROG " --preset NAME (-o FILE | --dry-run) [--seed N]\n"                         \
	"                     [--dtype TYPE] [--set KEY=VALUE[,KEY=VALUE...]]...\n"                \
	"                     [--tokenizer bytes|none] [--name NAME] [--layout L] [--sparse]\n"    \
	"                     [--chat-template FILE]\n"

static void usage(FILE *f, bool full)
{
	if (!full) {
		fprintf(f, USAGE "See " PROG " --help for the options and the --set keys.\n");
		return;
	}
	fprintf(
	    f,
	    USAGE
	    "Write a synthetic model of the " MFILE_ARCH " family (GGUF) with seeded random\n"
	    "weights, at any shape.\n"
	    "\n"
	    "  -p, --preset NAME   the shape to start from, one of\n"
	    "                      %s\n"
	    "  -o, --output FILE   where to write, atomically (a failed write leaves nothing)\n"
	    "  -s, --seed N        the weights' seed (default 1): the same arguments give the\n"
	    "                      same bytes\n"
	    "  -d, --dtype T       bf16 (default), f16, f32, or a block type: q8_0, q4_0,\n"
	    "                      q4_k, q5_k, q6_k (the matrices whose rows are whole\n"
	    "                      blocks; norms, convolution, decay, bias and router BF16,\n"
	    "                      F32 in llama.cpp's layouts), or q4_k_m (Q4_K and Q6_K as\n"
	    "                      llama.cpp's Q4_K_M recipe mixes them)\n"
	    "      --set K=V,...   change keys of the preset's description (below); repeatable,\n"
	    "                      the last value of a key wins; integers take K/M/G/T suffixes\n"
	    "      --tokenizer T   bytes (the byte-level tokenizer: exactly 260 ids) or none\n"
	    "                      (token ids only: no text, no end of sequence); default:\n"
	    "                      the preset's\n"
	    "      --layout L      ignis (ours, " MFILE_ARCH ") or one of llama.cpp's,\n"
	    "                      which llama.cpp loads too (output tied to the embedding, a\n"
	    "                      synthetic gpt2 vocabulary and a ChatML template): qwen3 (a\n"
	    "                      dense preset's shapes, every layer full attention, no\n"
	    "                      output gate), qwen35 (a dense preset's hybrid), qwen35moe\n"
	    "                      or qwen3next (a moe preset's hybrid); default: the\n"
	    "                      preset's (ours, but qwen3 for tiny-chat)\n"
	    "      --name NAME     the model's name in the file, 1 to 63 bytes (default: the\n"
	    "                      preset's, or PRESET-custom when --set changed the shape);\n"
	    "                      a built-in model's name only with that model's shape\n"
	    "      --chat-template FILE  the chat template the file carries (llama.cpp's\n"
	    "                      layouts): a Jinja text, or a tokenizer_config.json's\n"
	    "                      chat_template (a real model's, on a tiny one); default:\n"
	    "                      ChatML as Qwen2.5 writes it\n"
	    "      --sparse        write the tensors' bytes as a hole: the file has the exact\n"
	    "                      layout, description and size, all-zero weights, and takes\n"
	    "                      only its header's room (for plans of real shapes)\n"
	    "  -n, --dry-run       print the description, the tensor count and the exact file\n"
	    "                      size (and, with -o, the free space there); write nothing\n"
	    "  -h, --help          this text\n"
	    "  -V, --version       the version\n"
	    "\n"
	    "Before writing, the exact file size is checked against the free space of the\n"
	    "target's volume. The reference shapes are large: qwen3.8-27b is about 52 GB and\n"
	    "qwen3.8-flash-next about 248 GB in bf16.\n"
	    "Exit status: 0 written (or dry run), 1 not written (no room, I/O error,\n"
	    "interrupted), 2 bad arguments.\n"
	    "\n"
	    "--set keys (field or file key; family; accepted values):\n",
	    mdesc_names());
	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];

		if (k->type == GGUF_TYPE_FLOAT32)
			fprintf(f, "  %-22s %-42s %-5s a number > 0\n", k->field, k->key,
			        mk_family_name(k->family));
		else
			fprintf(f, "  %-22s %-42s %-5s %llu to %llu\n", k->field, k->key,
			        mk_family_name(k->family), (unsigned long long)k->min,
			        (unsigned long long)k->max);
	}
	fprintf(f, "Rules across keys: q_heads a multiple of kv_heads; lin_v_heads a multiple of\n"
	           "lin_k_heads; rope_dims even and at most head_dim; head_dim a multiple of 64;\n"
	           "layers at least full_interval (every full_interval-th layer is full\n"
	           "attention); default_lanes at most max_lanes; top_k at most experts; vocab\n"
	           "260 with the byte-level tokenizer (--tokenizer bytes).\n");
}

/* "layers, full_interval, ..." for messages. */
static void mk_key_list(char *out, size_t cap)
{
	size_t n = 0;

	out[0] = '\0';
	for (size_t i = 0; i < mfile_nkeys && n < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", mfile_keys[i].field);
}

/* Apply one KEY=VALUE (`item`, as written) to mk->m; 0 or 2 (the message
 * printed). */
static int mk_set_one(struct mk *mk, const char *item)
{
	const char *eq = strchr(item, '=');
	const struct mfile_key *k;
	char key[64], list[1024];
	const char *val;

	if (!eq || eq == item || (size_t)(eq - item) >= sizeof(key)) {
		mk_key_list(list, sizeof(list));
		fprintf(stderr, PROG ": --set '%s': expected KEY=VALUE; keys: %s\n", item, list);
		return 2;
	}
	memcpy(key, item, (size_t)(eq - item));
	key[eq - item] = '\0';
	val = eq + 1;
	k = mfile_key_find(key);
	if (!k) {
		mk_key_list(list, sizeof(list));
		fprintf(stderr,
		        PROG ": --set '%s': unknown key '%s'; accepted: %s (or their file keys, "
		             "see --help)\n",
		        item, key, list);
		return 2;
	}
	if (!mfile_key_applies(k, mk->m.family)) {
		fprintf(stderr,
		        PROG ": --set '%s': %s (%s) applies to %s models; preset '%s' is %s\n",
		        item, k->field, k->key, mk_family_name(k->family), mk->preset->name,
		        mk_family_name(mk->m.family));
		return 2;
	}
	if (k->type == GGUF_TYPE_FLOAT32) {
		char *end;
		float f;

		errno = 0;
		f = strtof(val, &end);
		if (!*val || *end || errno || !(f > 0.0f) || f != f) {
			fprintf(stderr,
			        PROG ": --set '%s': %s (%s) takes a finite number above 0, such "
			             "as 1e-6\n",
			        item, k->field, k->key);
			return 2;
		}
		memcpy((char *)&mk->m + k->offset, &f, 4);
	} else {
		struct bsize b;
		struct ig_errbuf eb;

		if (bsize_parse(val, false, &b, &eb) || b.n < k->min || b.n > k->max) {
			fprintf(stderr,
			        PROG ": --set '%s': %s (%s) takes a whole number from %llu to "
			             "%llu\n",
			        item, k->field, k->key, (unsigned long long)k->min,
			        (unsigned long long)k->max);
			return 2;
		}
		if (k->type == GGUF_TYPE_UINT32) {
			uint32_t u = (uint32_t)b.n;

			memcpy((char *)&mk->m + k->offset, &u, 4);
		} else {
			memcpy((char *)&mk->m + k->offset, &b.n, 8);
		}
	}
	return 0;
}

/* Apply every --set (a comma list each), in order. */
static int mk_apply_sets(struct mk *mk, char **sets, int n)
{
	for (int i = 0; i < n; i++) {
		char *save = NULL, *item;

		if (!*sets[i]) {
			fprintf(stderr, PROG ": --set ''; expected KEY=VALUE[,KEY=VALUE...]\n");
			return 2;
		}
		for (item = strtok_r(sets[i], ",", &save); item;
		     item = strtok_r(NULL, ",", &save)) {
			int rc = mk_set_one(mk, item);

			if (rc)
				return rc;
		}
	}
	return 0;
}

/* The value of key `k` of `m` as text. */
static void mk_key_value(const struct mdesc *m, const struct mfile_key *k, char *out, size_t cap)
{
	float f;

	if (k->type != GGUF_TYPE_FLOAT32) {
		snprintf(out, cap, "%llu", (unsigned long long)mfile_key_get(m, k));
		return;
	}
	memcpy(&f, (const char *)m + k->offset, 4);
	snprintf(out, cap, "%g", (double)f);
}

/* The first key on which `a` and `b` differ, or NULL. */
static const struct mfile_key *mk_first_diff(const struct mdesc *a, const struct mdesc *b)
{
	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];
		float fa, fb;

		if (!mfile_key_applies(k, a->family))
			continue;
		if (k->type != GGUF_TYPE_FLOAT32) {
			if (mfile_key_get(a, k) != mfile_key_get(b, k))
				return k;
			continue;
		}
		memcpy(&fa, (const char *)a + k->offset, 4);
		memcpy(&fb, (const char *)b + k->offset, 4);
		if (fa != fb)
			return k;
	}
	return NULL;
}

/* The name written: --name (checked) or the default; 0 or 2. */
static int mk_name(struct mk *mk, const char *want)
{
	bool custom = !mfile_same_shape(&mk->m, mk->preset);
	const struct mdesc *b;

	if (!want) {
		snprintf(mk->name, sizeof(mk->name), "%s%s", mk->preset->name,
		         custom ? "-custom" : "");
		mk->m.name = mk->m.alias = mk->name;
		return 0;
	}
	if (!*want || strlen(want) >= sizeof(mk->name)) {
		fprintf(stderr, PROG ": --name '%s': accepted: 1 to %zu bytes\n", want,
		        sizeof(mk->name) - 1);
		return 2;
	}
	for (const char *p = want; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			fprintf(stderr,
			        PROG ": --name: a control character at byte %zu; accepted: "
			             "printable text\n",
			        (size_t)(p - want));
			return 2;
		}
	b = mdesc_find(want);
	if (b && b->family != mk->m.family) {
		fprintf(stderr,
		        PROG ": --name '%s' is the built-in model %s, a %s model; this file is "
		             "%s: choose another name\n",
		        want, b->name, mk_family_name(b->family), mk_family_name(mk->m.family));
		return 2;
	}
	if (b && !mfile_same_shape(&mk->m, b)) {
		const struct mfile_key *k = mk_first_diff(&mk->m, b);
		char here[32], there[32];

		if (!k) { /* the keys agree: the tokenizer differs */
			fprintf(stderr,
			        PROG ": --name '%s' is the built-in model %s, whose tokenizer is "
			             "%s (%s here): choose another name\n",
			        want, b->name, mdesc_tokenizer_name(b->tokenizer),
			        mdesc_tokenizer_name(mk->m.tokenizer));
			return 2;
		}
		mk_key_value(&mk->m, k, here, sizeof(here));
		mk_key_value(b, k, there, sizeof(there));
		fprintf(stderr,
		        PROG ": --name '%s' is the built-in model %s, whose shape this file "
		             "does not have (%s is %s here, %s there): choose another name\n",
		        want, b->name, k->field, here, there);
		return 2;
	}
	snprintf(mk->name, sizeof(mk->name), "%s", want);
	mk->m.name = mk->m.alias = mk->name;
	return 0;
}

/* The directory holding `path` ("." for a bare name) into `dir`. */
static void mk_dir_of(const char *path, char *dir, size_t cap)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(dir, cap, ".");
	else if (slash == path)
		snprintf(dir, cap, "/");
	else
		snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

/* Free bytes of the volume holding `path`'s directory; 0 or 1 (printed). */
static int mk_free_bytes(const char *path, uint64_t *free_bytes, char *dir, size_t cap)
{
	struct statvfs v;

	mk_dir_of(path, dir, cap);
	if (statvfs(dir, &v) != 0) {
		fprintf(stderr, PROG ": cannot check the free space of '%s' (for '%s'): %s\n", dir,
		        path, strerror(errno));
		return 1;
	}
	*free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
	return 0;
}

static void mk_print(const struct mk *mk, const struct mfile_synthetic *s)
{
	const struct mdesc *d = &s->desc, *b = mk->preset;
	bool same = mfile_same_shape(&mk->m, b);

	printf("name %s\n", mk->name);
	printf("preset %s%s\n", b->name, same ? "" : " (changed by --set)");
	printf("family %s\n", mk_family_name(d->family));
	printf("dtype %s\n", mk_dtype_name(mk->dtype));
	printf("seed %llu\n", mk->seed);
	printf("tokenizer %s\n", mdesc_tokenizer_name(d->tokenizer));
	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];

		char v[32];

		if (!mfile_key_applies(k, d->family))
			continue;
		mk_key_value(d, k, v, sizeof(v));
		printf("%s %s\n", k->field, v);
	}
	printf("full_layers %u\n", d->full_layers);
	printf("tensors %llu\n", (unsigned long long)s->n_tensors);
	printf("file_bytes %llu\n", (unsigned long long)s->file_bytes);
	/* the figures the plan takes from the file; a built-in that carries
	 * other figures for this same shape is named beside them */
	printf("weight_bytes %llu", (unsigned long long)mdesc_weight_bytes(d));
	if (same && mdesc_weight_bytes(b) != mdesc_weight_bytes(d))
		printf(" (the built-in %s carries %llu)", b->name,
		       (unsigned long long)mdesc_weight_bytes(b));
	printf("\n");
	if (d->family == MDESC_MOE) {
		printf("expert_bytes %llu", (unsigned long long)mdesc_expert_bytes(d));
		if (same && mdesc_expert_bytes(b) != mdesc_expert_bytes(d))
			printf(" (the built-in %s carries %llu)", b->name,
			       (unsigned long long)mdesc_expert_bytes(b));
		printf("\n");
		printf("heaviest_layer_expert_bytes %llu",
		       (unsigned long long)d->heaviest_layer_expert_bytes);
		if (same && b->heaviest_layer_expert_bytes != d->heaviest_layer_expert_bytes)
			printf(" (the built-in %s carries %llu)", b->name,
			       (unsigned long long)b->heaviest_layer_expert_bytes);
		printf("\n");
	}
	printf("state_image_bytes %llu", (unsigned long long)mdesc_state_image_bytes(d));
	if (same && mdesc_state_image_bytes(b) != mdesc_state_image_bytes(d))
		printf(" (the built-in %s carries %llu)", b->name,
		       (unsigned long long)mdesc_state_image_bytes(b));
	printf("\n");
}

/* A chat template from FILE: its text, or the chat_template of a
 * tokenizer_config.json. NULL, with a line on stderr, when it cannot be
 * read or holds no template. */
static char *mk_read_template(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL;
	size_t len = 0, cap = 0;

	if (!f) {
		fprintf(stderr, PROG ": --chat-template '%s': %s\n", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		size_t n;

		if (len + 4096 + 1 > cap) {
			char *t = realloc(text, cap = cap ? 2 * cap : 8192);

			if (!t) {
				fprintf(stderr, PROG ": --chat-template '%s': out of memory\n",
				        path);
				free(text);
				fclose(f);
				return NULL;
			}
			text = t;
		}
		n = fread(text + len, 1, 4096, f);
		len += n;
		if (n < 4096)
			break;
	}
	fclose(f);
	text[len] = '\0';
	if (len && text[0] == '{') {
		/* a tokenizer_config.json; a Jinja text may begin with '{' too
		 * ("{%- set ..."), and is no JSON */
		json_t *j = json_loads(text, 0, NULL);
		const char *t = json_string_value(json_object_get(j, "chat_template"));

		if (j) {
			free(text);
			text = t ? strdup(t) : NULL;
		}
		json_decref(j);
	}
	if (!text || !*text) {
		fprintf(stderr,
		        PROG
		        ": --chat-template '%s': no template (a Jinja text, or a JSON file with "
		        "a chat_template string, is accepted)\n",
		        path);
		free(text);
		return NULL;
	}
	return text;
}

static void mk_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct mk *mk = ctx;
	unsigned pct = total ? (unsigned)(done * 100u / total) : 100u;
	char a[32], b[32];

	if (pct < mk->next_pct)
		return;
	bsize_format(a, sizeof(a), done);
	bsize_format(b, sizeof(b), total);
	fprintf(stderr, PROG ": %3u%% (%s of %s)\n", pct, a, b);
	mk->next_pct = (pct / 5u + 1u) * 5u;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"preset", required_argument, NULL, 'p'},
	    {"output", required_argument, NULL, 'o'},
	    {"seed", required_argument, NULL, 's'},
	    {"dtype", required_argument, NULL, 'd'},
	    {"set", required_argument, NULL, 'S'},
	    {"name", required_argument, NULL, 'N'},
	    {"dry-run", no_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"tokenizer", required_argument, NULL, 'T'},
	    {"layout", required_argument, NULL, 'L'},
	    {"sparse", no_argument, NULL, 'Z'},
	    {"chat-template", required_argument, NULL, 'C'},
	    {NULL, 0, NULL, 0},
	};
	struct mk mk = {.dtype = MFILE_BF16, .seed = 1};
	const char *preset = NULL, *name = NULL, *tokenizer = NULL, *layout = NULL;
	char *tmpl = NULL;
	char **sets = calloc((size_t)argc + 1, sizeof(char *));
	int nsets = 0, c, rc;
	struct mfile_synthetic s;
	struct mfile_wopts wo = {0};
	struct sigaction sa;
	struct ig_errbuf eb;
	uint64_t free_bytes = 0;
	char dir[4096], a[32], b[32];
	char *end;

	if (!sets) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	while ((c = getopt_long(argc, argv, "p:o:s:d:nhV", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			preset = optarg;
			break;
		case 'o':
			mk.out = optarg;
			break;
		case 's':
			errno = 0;
			mk.seed = strtoull(optarg, &end, 0);
			if (*end || !*optarg || errno || *optarg == '-') {
				fprintf(stderr,
				        PROG ": --seed '%s'; accepted: a whole number from 0 to "
				             "18446744073709551615\n",
				        optarg);
				rc = 2;
				goto out;
			}
			break;
		case 'd': {
			size_t i = 0;

			while (i < sizeof(mk_dtypes) / sizeof(mk_dtypes[0]) &&
			       strcmp(optarg, mk_dtypes[i].name))
				i++;
			if (i == sizeof(mk_dtypes) / sizeof(mk_dtypes[0])) {
				fprintf(stderr,
				        PROG ": --dtype '%s'; accepted: " MK_DTYPES_TEXT "\n",
				        optarg);
				rc = 2;
				goto out;
			}
			mk.dtype = mk_dtypes[i].dtype;
		} break;
		case 'S':
			sets[nsets++] = optarg;
			break;
		case 'N':
			name = optarg;
			break;
		case 'T':
			tokenizer = optarg;
			break;
		case 'L':
			layout = optarg;
			break;
		case 'n':
			mk.dry_run = true;
			break;
		case 'Z':
			wo.sparse = true;
			break;
		case 'C':
			if (!(tmpl = mk_read_template(optarg))) {
				rc = 2;
				goto out;
			}
			wo.chat_template = tmpl;
			break;
		case 'h':
			usage(stdout, true);
			rc = 0;
			goto out;
		case 'V':
			printf(PROG " %s\n", IGNIS_VERSION);
			rc = 0;
			goto out;
		default:
			usage(stderr, false);
			rc = 2;
			goto out;
		}
	}
	if (!preset || (!mk.out && !mk.dry_run) || optind < argc) {
		if (optind < argc)
			fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		else
			fprintf(stderr, PROG ": %s is required\n",
			        !preset ? "--preset" : "-o FILE (or --dry-run)");
		usage(stderr, false);
		rc = 2;
		goto out;
	}
	mk.preset = mdesc_find(preset);
	if (!mk.preset) {
		fprintf(stderr, PROG ": unknown preset '%s'; accepted: %s\n", preset,
		        mdesc_names());
		rc = 2;
		goto out;
	}
	mk.m = *mk.preset;
	/* a preset in one of llama.cpp's layouts (tiny-chat) stays in it: its
	 * file carries its own vocabulary, and ours is its source preset's */
	if (mk.preset->arch != MDESC_ARCH_IGNIS &&
	    (tokenizer || (layout && !strcmp(layout, "ignis")))) {
		fprintf(stderr,
		        PROG ": preset %s is in llama.cpp's %s layout, which writes its own gpt2 "
		             "vocabulary: no --tokenizer, no --layout ignis\n",
		        mk.preset->name, mdesc_arch_name(mk.preset->arch));
		rc = 2;
		goto out;
	}
	if (tokenizer && (!mdesc_tokenizer_of(tokenizer, strlen(tokenizer), &mk.m.tokenizer) ||
	                  mk.m.tokenizer == MDESC_TOK_GPT2)) {
		fprintf(stderr,
		        PROG
		        ": --tokenizer '%s'; accepted: bytes, none (a llama.cpp --layout writes a "
		        "gpt2 vocabulary of its own)\n",
		        tokenizer);
		rc = 2;
		goto out;
	}
	rc = mk_apply_sets(&mk, sets, nsets);
	if (!rc && layout && strcmp(layout, "ignis")) {
		struct mdesc lm;
		struct ig_errbuf leb = {0};
		int arch = MDESC_ARCH_QWEN3;

		while (arch < MDESC_ARCH_COUNT && strcmp(layout, mdesc_arch_name(arch)))
			arch++;
		if (arch == MDESC_ARCH_COUNT) {
			fprintf(stderr,
			        PROG ": --layout '%s'; accepted: ignis, qwen3, qwen35, qwen35moe, "
			             "qwen3next\n",
			        layout);
			rc = 2;
		} else if (tokenizer) {
			fprintf(stderr,
			        PROG ": --layout %s writes its own gpt2 vocabulary (no "
			             "--tokenizer)\n",
			        layout);
			rc = 2;
		} else if (arch == MDESC_ARCH_QWEN3 && mk.m.family != MDESC_DENSE) {
			fprintf(stderr, PROG ": --layout qwen3 takes a dense preset\n");
			rc = 2;
		} else if (mfile_as_layout(&mk.m, (enum mdesc_arch)arch, &lm, &leb)) {
			fprintf(stderr, PROG ": --layout %s: %s\n", layout, leb.msg);
			rc = 2;
		} else {
			mk.m = lm;
		}
	}
	if (!rc)
		rc = mk_name(&mk, name);
	if (rc)
		goto out;
	rc = mfile_synthetic_describe_opts(&mk.m, mk.dtype, &wo, &s, &eb);
	if (rc) {
		fprintf(stderr, PROG ": %s%s\n", nsets ? "--set: " : "", eb.msg);
		rc = rc == IG_E_INVAL ? 2 : 1;
		goto out;
	}
	if (mk.out && mk_free_bytes(mk.out, &free_bytes, dir, sizeof(dir))) {
		rc = 1;
		goto out;
	}
	if (mk.dry_run) {
		mk_print(&mk, &s);
		if (mk.out) {
			printf("volume_free_bytes %llu\n", (unsigned long long)free_bytes);
			printf("fits %s\n", s.file_bytes <= free_bytes ? "yes" : "no");
		}
		rc = 0;
		goto out;
	}
	bsize_format(a, sizeof(a), s.file_bytes);
	bsize_format(b, sizeof(b), free_bytes);
	if (s.file_bytes > free_bytes && !wo.sparse) {
		fprintf(stderr,
		        PROG ": '%s' needs %llu bytes (%s), the volume of '%s' has %llu free (%s): "
		             "free space there or write elsewhere\n",
		        mk.out, (unsigned long long)s.file_bytes, a, dir,
		        (unsigned long long)free_bytes, b);
		rc = 1;
		goto out;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = mk_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	wo.stop = &mk_stop;
	if (s.file_bytes >= (1ull << 30) && !wo.sparse) { /* progress where it takes a while */
		wo.progress = mk_progress;
		wo.progress_ctx = &mk;
		mk.next_pct = 5;
		fprintf(stderr, PROG ": writing '%s': %s, %llu tensors, %s\n", mk.out, mk.name,
		        (unsigned long long)s.n_tensors, a);
	}
	if (mfile_write_synthetic_opts(&mk.m, mk.seed, mk.dtype, mk.out, &wo, &eb)) {
		fprintf(stderr, PROG ": %s\n", eb.msg);
		rc = 1;
		goto out;
	}
	if (wo.sparse)
		fprintf(stderr, PROG ": wrote %s (%s, %s, sparse: all-zero weights, %llu bytes)\n",
		        mk.out, mk.name, mk_dtype_name(mk.dtype), (unsigned long long)s.file_bytes);
	else
		fprintf(stderr, PROG ": wrote %s (%s, %s, seed %llu, %llu bytes)\n", mk.out,
		        mk.name, mk_dtype_name(mk.dtype), mk.seed,
		        (unsigned long long)s.file_bytes);
	rc = 0;
out:
	free(tmpl);
	free(sets);
	return rc;
}
